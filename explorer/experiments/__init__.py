"""Experiments that measure the explorer's methods on the bundled models.

``python -m explorer.experiments.accuracy`` writes ``docs/accuracy.md`` and ``docs/accuracy.json``.
"""
