"""cuSPARSELt, the library: its binding and cached plans, algorithm search and tuning tables.

- :mod:`~explorer.gpu.library.cusparselt`: the nvmath-python binding, plans, compression.
- :mod:`~explorer.gpu.library.torch_backend`: torch's own cuSPARSELt ops, for comparison.
- :mod:`~explorer.gpu.library.search`, :mod:`~explorer.gpu.library.tuning`: which algorithm a
  plan runs, searched safely in a child process (:mod:`~explorer.gpu.library.child_process`)
  and remembered per GPU; :mod:`~explorer.gpu.library.tune_cli` is ``sparsity-explorer tune``.
"""
