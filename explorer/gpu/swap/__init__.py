"""The model-level swap: ``sparsify`` and what it reports.

- :mod:`~explorer.gpu.swap.model_swap`: ``sparsify``, ``set_mode`` and which layers qualify.
- :mod:`~explorer.gpu.swap.int4_swap`: the swap of ``sparsify(dtype="int4")``, blocks stacked.
- :mod:`~explorer.gpu.swap.eager_check`: the whole-model check behind "never slower in eager".
- :mod:`~explorer.gpu.swap.model_timing`: whole-model forward times, dense against sparse.
- :mod:`~explorer.gpu.swap.sparsify_report`: ``SparsifyReport``, layer by layer.
"""
