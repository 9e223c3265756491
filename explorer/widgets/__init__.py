"""Widgets for exploring sparsity: plain logic classes with thin ipywidgets views.

The logic classes (importable without ipywidgets or plotly) hold all state; ``.view()``
builds the widget lazily and objects display themselves in a notebook.

Examples
--------
>>> import torch
>>> from explorer.widgets import MaskViewer
>>> MaskViewer(torch.rand(64, 64) > 0.5, name="fc").mode
'overview'
"""

from explorer.widgets.dashboard import Dashboard
from explorer.widgets.dashboard_models import DEFAULT_MODEL, MODELS
from explorer.widgets.dashboard_status import Status
from explorer.widgets.kernel_runner import KernelResult, KernelRunner
from explorer.widgets.layer_picker import LayerPicker, LayerRow
from explorer.widgets.mask_view import (
    MaskComparison,
    MaskViewer,
    Overview,
    PermutationView,
    Window,
    block_density,
    window,
)
from explorer.widgets.method_picker import MethodConfig, MethodPicker
from explorer.widgets.pattern_panel import PatternPanel, row_validity
from explorer.widgets.tradeoff import TradeoffPlot

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "Dashboard",
    "KernelResult",
    "KernelRunner",
    "LayerPicker",
    "LayerRow",
    "MaskComparison",
    "MaskViewer",
    "MethodConfig",
    "MethodPicker",
    "Overview",
    "PatternPanel",
    "PermutationView",
    "Status",
    "TradeoffPlot",
    "Window",
    "block_density",
    "row_validity",
    "window",
]
