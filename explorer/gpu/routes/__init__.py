"""Route choice: which way a sparse layer computes its product, decided by measurement.

- :mod:`~explorer.gpu.routes.dispatch`: routes, decisions and the rules that pick one (pure).
- :mod:`~explorer.gpu.routes.mode_check`: when a layer run in another mode warns (pure).
- :mod:`~explorer.gpu.routes.route_timing`: timing a layer's routes; decisions shared by
  every layer of one problem.
- :mod:`~explorer.gpu.routes.timing`: CUDA-event medians, graph replays, host cost per call.
"""
