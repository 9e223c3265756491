"""Pruning methods: magnitude, random, weightnorm, Wanda and SparseGPT behind one ``prune``.

Every method leaves each pruned weight dense with zeros in place and returns bool keep-masks
(the contract the kernels are tested against). ``finetune`` retrains with the masks held
fixed; ``sensitivity`` prunes one layer at a time and records the metric drop.

Examples
--------
>>> import torch
>>> from torch import nn
>>> from explorer.pruning import prune
>>> net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
>>> prune(net, "magnitude", "2:4", progress=False).density
0.5
"""

from .api import METHODS, MethodInfo, prune
from .calibration import PruningCancelled
from .finetune import FinetuneResult, finetune
from .result import PruneResult
from .sensitivity import SensitivityResult, sensitivity

__all__ = [
    "METHODS",
    "FinetuneResult",
    "MethodInfo",
    "PruneResult",
    "PruningCancelled",
    "SensitivityResult",
    "finetune",
    "prune",
    "sensitivity",
]
