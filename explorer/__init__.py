"""sparsity-explorer: see, prune and measure weight sparsity (2:4 and N:M) in PyTorch models.

The core imports only torch and numpy:

>>> import explorer
>>> explorer.Pattern.parse("2:4").explain()
'Keep at most 2 of every 4 consecutive weights along each row (50% zeros) - the pattern NVIDIA sparse tensor cores run at up to 2x.'

Pruning, the offline models, the GPU backend, the results store and the widgets load lazily on
first use, so ``import explorer`` stays fast and works without the optional extras.
"""

from __future__ import annotations

import importlib

from .errors import MissingExtraError
from .patterns import Pattern

__version__ = "0.1.0"

# name -> module that defines it, imported on first access. The torch-based core is lazy too,
# so that the command line answers --help without importing torch.
_LAZY = {
    "PatternReport": "explorer.checks",
    "check_pattern": "explorer.checks",
    "keep_patterns": "explorer.checks",
    "DeviceTarget": "explorer.devices",
    "DoctorReport": "explorer.diagnosis",
    "Finding": "explorer.diagnosis",
    "doctor": "explorer.diagnosis",
    "LayerInfo": "explorer.prunable_layers",
    "LayerTable": "explorer.prunable_layers",
    "layers": "explorer.prunable_layers",
    "make_mask": "explorer.masks",
    "prune": "explorer.pruning",
    "PruneResult": "explorer.pruning",
    "PruningCancelled": "explorer.pruning",
    "FinetuneDiverged": "explorer.pruning",
    "finetune": "explorer.pruning",
    "permute_channels": "explorer.pruning",
    "sensitivity": "explorer.pruning",
    "METHODS": "explorer.pruning",
    "compress": "explorer.compression",
    "CompressedWeight": "explorer.compression",
    "SparseLinear": "explorer.gpu",
    "sparsify": "explorer.gpu",
    "sweep": "explorer.sweeps",
    "ResultStore": "explorer.results.store",
    "load_model": ("explorer.models", "load"),
    "save_sparse": "explorer.checkpoint",
    "load_sparse": "explorer.checkpoint",
    "export_onnx": "explorer.checkpoint",
    "export_pretrained": "explorer.checkpoint",
    "check_onnx": "explorer.checkpoint",
}

__all__ = ["MissingExtraError", "Pattern", *_LAZY]


def __getattr__(name: str):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'explorer' has no attribute {name!r}")
    module_name, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
