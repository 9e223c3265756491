"""Results: how every measurement is stored, looked up and reported, each one way.

- :mod:`explorer.results.store`: the SQLite results store, its rows, provenance and the one
  cache folder (:func:`~explorer.results.store.cache_dir`).
- :mod:`explorer.results.speedup`: the recorded speed of a shape and the one speed-up estimate.
- :mod:`explorer.results.tradeoff`: :class:`~explorer.results.tradeoff.TradeoffPoint` and the
  Pareto front.
- :mod:`explorer.results.quantized_speed` and :mod:`explorer.results.quantized_points`: int8,
  int4 and FP8 whole-model speed rows, and the quantized configurations' points.
- :mod:`explorer.results.html` (with :mod:`explorer.results.quantized_report`) and
  :mod:`explorer.results.markdown`: the HTML report and the Markdown tables.

Importing this package imports none of them; import the module you need.
"""
