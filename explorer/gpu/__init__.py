"""GPU side of the explorer: cuSPARSELt plans, ``SparseLinear``, ``sparsify`` and CUDA kernels.

CuPy and nvmath-python are imported lazily, so ``import explorer.gpu`` works on any machine;
the first call that needs a GPU raises a clear error when there is none. The public names load
on first use, so a submodule that needs no torch (``tune_cli``'s ``--help``) stays light.

Examples
--------
>>> import explorer.gpu
>>> explorer.gpu.SparseLinear.__name__
'SparseLinear'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from explorer.gpu.fused_qkv import SparseQKV
    from explorer.gpu.gated_mlp import SparseGatedMLP
    from explorer.gpu.model_swap import set_mode, sparsify
    from explorer.gpu.model_timing import ModelSpeed
    from explorer.gpu.sparse_linear import SparseLinear
    from explorer.gpu.sparse_options import SparseOptions
    from explorer.gpu.sparsify_report import SparsifyReport

__all__ = [
    "ModelSpeed",
    "SparseGatedMLP",
    "SparseLinear",
    "SparseOptions",
    "SparseQKV",
    "SparsifyReport",
    "set_mode",
    "sparsify",
]

_HOMES = {
    "ModelSpeed": "explorer.gpu.model_timing",
    "set_mode": "explorer.gpu.model_swap",
    "SparseGatedMLP": "explorer.gpu.gated_mlp",
    "SparseLinear": "explorer.gpu.sparse_linear",
    "SparseOptions": "explorer.gpu.sparse_options",
    "SparseQKV": "explorer.gpu.fused_qkv",
    "SparsifyReport": "explorer.gpu.sparsify_report",
    "sparsify": "explorer.gpu.model_swap",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'explorer.gpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
