"""The explorer's own CUDA kernels (sources in ``kernels/*.cu``) and how they are launched.

- :mod:`~explorer.gpu.cuda.kernels`: loading the sources with CuPy; transpose, SwiGLU, checks.
- :mod:`~explorer.gpu.cuda.launch`: launches through the CUDA driver at torch-op host cost.
- :mod:`~explorer.gpu.cuda.decode`, :mod:`~explorer.gpu.cuda.decode_int4`: the 2:4 decode
  kernels (16-bit and int8 weights; int4 weights) for 1 to 64 tokens.
- :mod:`~explorer.gpu.cuda.ops`: any registered module as one opaque ``torch.library`` op, so
  ``torch.compile`` calls it without tracing its Python.
"""
