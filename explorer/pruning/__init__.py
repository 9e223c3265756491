"""Pruning methods: magnitude, random, weightnorm, Wanda and SparseGPT behind one ``prune``.

Every method leaves each pruned weight dense with zeros in place and returns bool keep-masks
(the contract the kernels are tested against). ``permute_channels`` reorders input channels
where that is free so an N:M mask keeps more (``prune(permute=True)``); ``prune(update="admm")``
re-optimises the kept weights once the mask is fixed. ``finetune`` retrains with the masks held
fixed, from labels or by distillation from the dense model; ``sensitivity`` prunes one layer at
a time and records the metric drop.

Examples
--------
>>> import torch
>>> from torch import nn
>>> from explorer.pruning import prune
>>> net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
>>> prune(net, "magnitude", "2:4", progress=False).density
0.5
"""

from ..errors import PruningCancelled
from .admm import admm_update
from .api import prune
from .finetune import FinetuneResult, finetune
from .finetune_checks import FinetuneDiverged
from .methods import METHODS, UPDATES, MethodInfo
from .permutation_result import PermutationResult, PermutedLayer
from .permute import permute_channels, undo_permutation
from .result import PruneResult
from .sensitivity import SensitivityResult, sensitivity

__all__ = [
    "METHODS",
    "UPDATES",
    "FinetuneDiverged",
    "FinetuneResult",
    "MethodInfo",
    "PermutationResult",
    "PermutedLayer",
    "PruneResult",
    "PruningCancelled",
    "SensitivityResult",
    "admm_update",
    "finetune",
    "permute_channels",
    "prune",
    "sensitivity",
    "undo_permutation",
]
