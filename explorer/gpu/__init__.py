"""GPU side of the explorer: cuSPARSELt plans, ``SparseLinear``, ``sparsify`` and CUDA kernels.

CuPy and nvmath-python are imported lazily, so ``import explorer.gpu`` works on any machine;
the first call that needs a GPU raises a clear error when there is none.
"""

from __future__ import annotations

from explorer.gpu.fused_qkv import SparseQKV
from explorer.gpu.gated_mlp import SparseGatedMLP
from explorer.gpu.sparse_linear import SparseLinear
from explorer.gpu.sparsify import sparsify
from explorer.gpu.sparsify_report import SparsifyReport

__all__ = ["SparseGatedMLP", "SparseLinear", "SparseQKV", "SparsifyReport", "sparsify"]
