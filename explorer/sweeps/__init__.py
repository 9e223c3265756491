"""Resumable sweeps: a grid of pruning and speed measurements, each cell committed at once.

Examples
--------
>>> from explorer.sweeps import SweepConfig
>>> cfg = SweepConfig.make("digits-mlp", methods="magnitude,wanda", patterns="2:4,4:8")
>>> len(cfg.cells())  # 1 dense + 2 methods x 2 patterns + 1 speed cell (2:4) + 5 model-speed
11
"""

from explorer.sweeps.cells import run_cell
from explorer.sweeps.grid import Cell, SweepConfig
from explorer.sweeps.loading import layer_filter
from explorer.sweeps.runner import SweepResult, sweep

__all__ = ["Cell", "SweepConfig", "SweepResult", "layer_filter", "run_cell", "sweep"]
