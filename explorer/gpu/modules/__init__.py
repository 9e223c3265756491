"""The sparse ``nn.Module`` s that replace a model's layers, and what they are built from.

- :mod:`~explorer.gpu.modules.sparse_linear`: ``SparseLinear``, the drop-in for ``nn.Linear``;
  :mod:`~explorer.gpu.modules.sparse_weight` readies its weight, its build options are one
  :mod:`~explorer.gpu.modules.sparse_options` object, :mod:`~explorer.gpu.modules.route_choice`
  chooses its route per problem, :mod:`~explorer.gpu.modules.sparse_forward` runs its calls
  (eager, compiled, in CUDA graphs), :mod:`~explorer.gpu.modules.sparse_calls` runs a plan.
- :mod:`~explorer.gpu.modules.fused_qkv`, :mod:`~explorer.gpu.modules.gated_mlp`: the fused
  attention-input and SwiGLU blocks; :mod:`~explorer.gpu.modules.int4_linear`: 2:4 + int4.
- :mod:`~explorer.gpu.modules.quant`, :mod:`~explorer.gpu.modules.fp8`,
  :mod:`~explorer.gpu.modules.reference`: int8 and FP8 quantization and reference layers.
"""
