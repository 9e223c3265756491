"""Each part of the dashboard on its own, wired by hand with the collaborators it takes."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from explorer.widgets.dashboard_files import Files
from explorer.widgets.dashboard_layer import LayerView
from explorer.widgets.dashboard_loading import Loader
from explorer.widgets.dashboard_points import Points
from explorer.widgets.dashboard_pruning import Pruning
from explorer.widgets.dashboard_state import DashboardState, Run
from explorer.widgets.dashboard_status import Events, Status
from explorer.widgets.mask_view import MaskViewer
from explorer.widgets.method_picker import MethodConfig, MethodPicker
from explorer.widgets.pattern_panel import PatternPanel
from explorer.widgets.tradeoff import TradeoffPlot


def _parts(model: nn.Module | None = None):
    """Every part, wired as :class:`explorer.widgets.Dashboard` wires them."""
    torch.manual_seed(0)
    state, events = DashboardState(1024, "float16"), Events()
    picker, tradeoff, viewer = MethodPicker(), TradeoffPlot(), MaskViewer(window_shape=(8, 8))
    layer_view = LayerView(state, events, viewer, PatternPanel(), picker)
    points = Points(state, events, tradeoff, layer_view, picker)
    loader = Loader(state, events, layer_view, points, picker, tradeoff, viewer)
    pruning = Pruning(state, events, loader, points, layer_view, picker)
    loader.load(model or nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8)))
    return state, events, layer_view, points, loader, pruning


def test_state_is_plain_data_with_a_one_line_repr():
    state = DashboardState(1024, "float16")
    assert state.bundle is None and state.selected is None and state.runs == {}
    assert not state.cancel.is_set() and state.job is None
    state.restore_dense()  # nothing to restore: no error
    assert repr(state) == "DashboardState(model=None, 0 runs, busy=False)"
    run = Run(MethodConfig(), {"0": torch.ones(2, 2, dtype=torch.bool)}, 0.5)
    assert repr(run) == "Run(magnitude 2:4 all float16, 1 masks, score=0.5)"


def test_events_call_listeners_and_refuse_an_unknown_level():
    events, seen = Events(), []
    events.on_change(seen.append)
    events.say("warn", "careful")
    events.report(0.5, "half")
    assert seen == ["status", "progress"]
    assert events.status == Status("warn", "careful") and events.progress == (0.5, "half")
    with pytest.raises(ValueError, match="status level 'loud' unknown; expected one of ok"):
        events.say("loud", "x")
    assert "1 listeners" in repr(events)


def test_the_loader_fills_the_state_and_the_points_get_the_dense_one():
    state, events, _, points, loader, _ = _parts()
    assert state.layer_picker.names == ["0", "2"] and state.selected == "0"
    assert state.dense is not None and not loader.pending()
    assert [p.label for p in points.tradeoff.points] == ["dense"]
    assert events.status.level == "ok"


def test_the_layer_view_previews_then_shows_a_run():
    _, _, layer_view, *_ = _parts()
    layer_view.select("2")
    assert ("2", "2:4") in layer_view.previews
    assert layer_view.mask_viewer.title.startswith("2: magnitude 2:4 preview")
    assert layer_view.prunable() == ["0", "2"] and layer_view.first_prunable() == "0"


def test_pruning_uses_its_collaborators_and_the_dense_weights_come_back():
    state, events, _, points, _, pruning = _parts()
    dense = state.bundle.model[0].weight.detach().clone()
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert events.status.level == "ok", events.status.text
    assert state.current is state.runs["magnitude 2:4 all float16"] and not state.busy
    assert len(points.tradeoff.points) == 2
    points.load_point(points.tradeoff.points[0])  # the dense point
    assert state.current is None and torch.equal(state.bundle.model[0].weight, dense)


def test_files_write_in_a_thread_and_refuse_while_busy(tmp_path):
    state, events, _, _, loader, _ = _parts()
    files = Files(state, events, loader)
    state.busy = True
    assert files.save(tmp_path / "model") is None and events.status.level == "warn"
    state.busy = False
    job = files.save(tmp_path / "model", wait=True)
    assert isinstance(job, threading.Thread) and job is state.job
    assert events.status.level == "ok", events.status.text
    assert state.last_file is not None
