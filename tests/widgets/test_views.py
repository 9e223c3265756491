"""The thin views: figures mirror the logic and send reduced arrays as binary buffers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")
pytest.importorskip("anywidget", reason="plotly's FigureWidget needs anywidget")

from explorer.results.tradeoff import TradeoffPoint
from explorer.widgets import MaskComparison, MaskViewer, TradeoffPlot
from explorer.widgets._plotly import binary_rows, record_messages
from explorer.widgets.comparison_view import comparison_box
from explorer.widgets.views import mask_figure, tradeoff_figure


def test_binary_rows_only_touches_2d_numeric_arrays():
    z = np.arange(6, dtype=np.uint8).reshape(2, 3)
    out = binary_rows({"z": [z], "x": [1, 2], "s": "a", "big": np.zeros((2, 2), np.int64)})
    assert isinstance(out["z"][0], list) and out["z"][0][1].tolist() == [3, 4, 5]
    assert out["x"] == [1, 2] and out["big"].shape == (2, 2)


def test_mask_figure_follows_the_viewer_and_sends_little():
    viewer = MaskViewer(torch.rand(2048, 4096) > 0.5, "fc", device="cpu")
    fig = mask_figure(viewer)
    sizes = record_messages(fig)
    assert fig.data[0].z.shape == (512, 512)
    viewer.click(1000, 2000)
    assert fig.data[0].z.shape == (64, 128)
    assert fig.layout.title.text == viewer.title
    viewer.show_overview()
    assert sizes and max(sizes) < 1_000_000
    assert fig.layout.yaxis.autorange == "reversed"


def test_comparison_box_has_three_linked_heatmaps():
    a = torch.rand(64, 64) > 0.5
    cmp = MaskComparison(a, ~a, "a", "b")
    box = comparison_box(cmp)
    assert len(box.children) == 3
    cmp.click(10, 10)
    assert all(fig.data[0].z.shape == (64, 64) for fig in box.children)


def test_tradeoff_figure_redraws_on_new_points():
    plot = TradeoffPlot("accuracy")
    plot.add(TradeoffPoint("dense", 1.0, 0.9))
    fig = tradeoff_figure(plot)
    plot.add(TradeoffPoint("fast", 1.5, 0.85))
    assert list(fig.data[0].x) == [1.0, 1.5]
    assert list(fig.data[1].x) == [1.0, 1.5]  # both on the frontier
