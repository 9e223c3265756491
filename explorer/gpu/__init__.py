"""GPU side of the explorer: cuSPARSELt plans, ``SparseLinear``, ``sparsify`` and CUDA kernels.

CuPy and nvmath-python are imported lazily, so ``import explorer.gpu`` works on any machine;
the first call that needs a GPU raises a clear error when there is none. The public names load
on first use, so a submodule that needs no torch (``tune_cli``'s ``--help``) stays light.

The package has five rooms; imports run one way, from the top of this list to the bottom:

- :mod:`explorer.gpu.swap`: ``sparsify``, ``set_mode``, the whole-model check and the report.
- :mod:`explorer.gpu.modules`: ``SparseLinear``, the fused blocks, their options and weights.
- :mod:`explorer.gpu.library` (cuSPARSELt: binding, plans, algorithm search, tuning tables) and
  :mod:`explorer.gpu.cuda` (the explorer's own kernels, their launches, the compiled op).
- :mod:`explorer.gpu.routes`: which route a layer takes (pure rules), and the timing behind it.

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
    from explorer.gpu.modules.fused_qkv import SparseQKV
    from explorer.gpu.modules.gated_mlp import SparseGatedMLP
    from explorer.gpu.modules.sparse_linear import SparseLinear
    from explorer.gpu.modules.sparse_options import SparseOptions
    from explorer.gpu.swap.model_swap import set_mode, sparsify
    from explorer.gpu.swap.model_timing import ModelSpeed
    from explorer.gpu.swap.sparsify_report import SparsifyReport

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
    "ModelSpeed": "explorer.gpu.swap.model_timing",
    "set_mode": "explorer.gpu.swap.model_swap",
    "SparseGatedMLP": "explorer.gpu.modules.gated_mlp",
    "SparseLinear": "explorer.gpu.modules.sparse_linear",
    "SparseOptions": "explorer.gpu.modules.sparse_options",
    "SparseQKV": "explorer.gpu.modules.fused_qkv",
    "SparsifyReport": "explorer.gpu.swap.sparsify_report",
    "sparsify": "explorer.gpu.swap.model_swap",
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
