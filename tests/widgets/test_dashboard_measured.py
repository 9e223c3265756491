"""A run the results store has timed whole is drawn as measured, with its mode and token count."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.results.model_speed import model_speed_row
from explorer.results.speedup import SpeedEstimate
from explorer.results.store import ResultStore
from explorer.widgets.dashboard_layer import LayerView
from explorer.widgets.dashboard_loading import Loader
from explorer.widgets.dashboard_points import Points
from explorer.widgets.dashboard_pruning import Pruning
from explorer.widgets.dashboard_state import DashboardState
from explorer.widgets.dashboard_status import Events
from explorer.widgets.mask_view import MaskViewer
from explorer.widgets.method_picker import MethodConfig, MethodPicker
from explorer.widgets.pattern_panel import PatternPanel
from explorer.widgets.tradeoff import TradeoffPlot

CONFIG = {"model": "Sequential", "method": "magnitude", "pattern": "2:4", "layers": "all"}
ESTIMATE = SpeedEstimate(1.3, 2, 0, 0, ("H100",), 1.6)


@pytest.fixture
def store(tmp_path):
    return ResultStore(str(tmp_path / "results.db"))


def _record(store, method="magnitude", tokens=1024, mode="graphs"):
    """One ok model-speed row, dense 2.0 ms against sparse 1.6 ms: 1.25x."""
    config = {**CONFIG, "method": method, "dtype": "float16"}
    row = model_speed_row(config, tokens, mode, {"dense_ms": 2.0, "sparse_ms": 1.6})
    store.record(**row, provenance={"gpu": "NVIDIA H100"})


def _wired(store):
    """The dashboard's parts over ``store``, a small Sequential loaded (model name 'Sequential')."""
    torch.manual_seed(0)
    state, events = DashboardState(1024, "float16", store), Events()
    picker, tradeoff, viewer = MethodPicker(), TradeoffPlot(), MaskViewer(window_shape=(8, 8))
    layer_view = LayerView(state, events, viewer, PatternPanel(), picker)
    points = Points(state, events, tradeoff, layer_view, picker)
    loader = Loader(state, events, layer_view, points, picker, tradeoff, viewer)
    pruning = Pruning(state, events, loader, points, layer_view, picker)
    loader.load(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8)))
    assert state.bundle.name == CONFIG["model"]
    return events, points, pruning


def test_a_run_timed_whole_is_drawn_at_its_measured_speedup(store):
    _record(store)
    events, points, pruning = _wired(store)
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert events.status.level == "ok", events.status.text
    point = points.tradeoff.points[-1]
    assert point.speedup == pytest.approx(1.25)
    assert (point.speed_source, point.speed_note) == (
        "measured-model",
        "measured, graphs, 1024 tokens",
    )
    assert "speedup 1.250x (measured, graphs, 1024 tokens)" in point.hover()
    assert "NVIDIA H100" in point.hover() and "formula" not in point.hover()
    assert "1.25x (measured, graphs, 1024 tokens)" in events.status.text
    # the measurement wins over a per-layer estimate, which the hover still lists
    speed = points.speed_of(MethodConfig("magnitude", "2:4"), ESTIMATE)
    assert speed.speedup == pytest.approx(1.25)
    assert speed.details["per-layer estimate (not shown)"] == "1.30x"


def test_the_nearest_token_count_is_named_in_the_note(store):
    _record(store, tokens=4096, mode="eager")
    _, points, _ = _wired(store)
    speed = points.speed_of(MethodConfig("magnitude", "2:4", tokens=1024))
    assert (speed.source, speed.note) == ("measured-model", "measured, eager, 4096 tokens")


def test_without_its_own_row_a_run_stays_an_estimate(store):
    _record(store, method="wanda")  # another configuration's row
    _, points, pruning = _wired(store)
    speed = points.speed_of(MethodConfig("magnitude", "2:4"), ESTIMATE)
    assert (speed.speedup, speed.source, speed.note) == (1.3, "estimate-layers", "")
    # some layers only: a sweep's "all" row is not this configuration
    _record(store)
    subset = points.speed_of(MethodConfig("magnitude", "2:4", layers=("0",)), ESTIMATE)
    assert (subset.source, subset.note) == ("estimate-layers", "")
    # no store: nothing changes either
    points.state.store = None
    assert points.own_speed(MethodConfig("magnitude", "2:4")) is None
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    point = points.tradeoff.points[-1]
    assert point.speed_source != "measured-model" and point.speed_note == ""
