"""The model-level swap: ``sparsify`` and what it reports.

- :mod:`~explorer.gpu.swap.model_swap`: ``sparsify`` and ``set_mode``.
- :mod:`~explorer.gpu.swap.eligibility`: which layers qualify, and the dtype each runs in.
- :mod:`~explorer.gpu.swap.block_fusion`: the fused q/k/v and SwiGLU blocks put in place, and
  taken out again where they do not pay.
- :mod:`~explorer.gpu.swap.whole_model`: the whole-model measurements beside the per-layer ones.
- :mod:`~explorer.gpu.swap.int4_swap`: the swap of ``sparsify(dtype="int4")``, blocks stacked.
- :mod:`~explorer.gpu.swap.eager_check`: the whole-model check behind "never slower in eager".
- :mod:`~explorer.gpu.swap.model_timing`: whole-model forward times, dense against sparse.
- :mod:`~explorer.gpu.swap.sparsify_report`: ``SparsifyReport``, layer by layer.
"""
