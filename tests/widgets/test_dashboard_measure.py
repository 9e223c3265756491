"""The dashboard measures on a GPU: a fake GPU flag and a fake timer stand in for CUDA."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from explorer.gpu.swap.sparsify_report import SparsifyReport
from explorer.results.store import ResultStore
from explorer.widgets.dashboard_layer import LayerView
from explorer.widgets.dashboard_loading import Loader
from explorer.widgets.dashboard_measure import NO_GPU, Measure, example_input
from explorer.widgets.dashboard_points import Points
from explorer.widgets.dashboard_pruning import Pruning
from explorer.widgets.dashboard_state import DashboardState
from explorer.widgets.dashboard_status import Events
from explorer.widgets.mask_view import MaskViewer
from explorer.widgets.method_picker import MethodConfig, MethodPicker
from explorer.widgets.pattern_panel import PatternPanel
from explorer.widgets.tradeoff import TradeoffPlot

LABEL = "magnitude 2:4 all float16"


class FakeTimer:
    """Dense forwards take 10 ms, sparse ones 8 ms: 1.25x. ``during`` runs at the first forward."""

    def __init__(self, during=None, fail: Exception | None = None):
        self.during, self.fail = during, fail
        self.calls: list[str] = []

    def unavailable(self):
        return None

    def device_name(self):
        return "Fake GPU"

    def place(self, model, dtype):
        self.calls.append("place")
        return model.eval()

    def place_inputs(self, inputs, dtype):
        return inputs

    def sparsify(self, model, mode, tokens, filter_fn):
        self.calls.append(f"sparsify {mode} {tokens}")
        model.sparse = True
        report = SparsifyReport(mode=mode)
        report.swapped += [(n, m.weight.shape) for n, m in model.named_modules() if filter_fn(m, n)]
        return report

    def forward_ms(self, model, inputs, mode):
        if self.during is not None:
            self.during()
        if self.fail is not None:
            raise self.fail
        return mode, 8.0 if getattr(model, "sparse", False) else 10.0

    def gpu_busy(self, model, inputs):
        return 0.5

    def layer_estimate(self, report, tokens, mode, dtype):
        return None


def _wired(store=None, timer=None, gpu=True):
    """The dashboard's parts with a Measure over a fake timer, a small Sequential loaded."""
    torch.manual_seed(0)
    state, events = DashboardState(1024, "float16", store), Events()
    picker, tradeoff, viewer = MethodPicker(), TradeoffPlot(), MaskViewer(window_shape=(8, 8))
    layer_view = LayerView(state, events, viewer, PatternPanel(), picker)
    points = Points(state, events, tradeoff, layer_view, picker)
    loader = Loader(state, events, layer_view, points, picker, tradeoff, viewer)
    measure = Measure(state, events, points, timer=timer or FakeTimer(), gpu=lambda: gpu)
    pruning = Pruning(
        state, events, loader, points, layer_view, picker, after_run=measure.after_run
    )
    loader.load(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8)))
    return state, events, points, pruning, measure


def _point(points, label=LABEL):
    return next(p for p in points.tradeoff.points if p.label == label)


def test_a_run_on_a_gpu_is_measured_and_its_point_says_so(tmp_path):
    store = ResultStore(str(tmp_path / "results.db"))
    timer = FakeTimer()
    state, events, points, pruning, measure = _wired(store, timer)
    seen = []
    events.on_change(lambda e: seen.append(events.progress) if e == "progress" else None)
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert events.status.level == "ok", events.status.text
    assert events.status.text == (
        f"{LABEL}: speedup 1.25x (measured, graphs, 1024 tokens) on Fake GPU"
    )
    point = _point(points)
    assert point.speedup == pytest.approx(1.25)
    assert (point.speed_source, point.speed_note) == (
        "measured-model",
        "measured, graphs, 1024 tokens",
    )
    assert point.details["on"] == "Fake GPU" and "pruning took" in point.details
    assert "sparsify graphs (1024,)" in timer.calls
    # the progress bar followed the measurement, then the job ended
    steps = [p for p in seen if p[1].startswith("measuring")]
    assert [f for f, _ in steps] == sorted(f for f, _ in steps) and len(steps) >= 6
    assert (0.7, "measuring: timing the sparse model") in steps
    assert events.progress == (1.0, "measured") and not state.busy
    # the row is in the dashboard's store, and the store alone gives the same speed
    (row,) = store.query("model-speed")
    assert row.status == "ok" and row.metrics["speedup"] == pytest.approx(1.25)
    assert row.config["layers"] == "all" and row.config["tokens"] == 1024
    points.timed.clear()
    assert points.own_speed(state.current.config).label == "measured, graphs, 1024 tokens"
    assert measure.last.measured and "Measure(last=ModelSpeedResult(graphs" in repr(measure)


def test_without_a_store_the_measurement_is_kept_in_memory():
    state, events, points, pruning, _ = _wired(store=None)
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert events.status.level == "ok", events.status.text
    assert _point(points).speed_note == "measured, graphs, 1024 tokens"
    assert points.own_speed(state.current.config).gpu == "Fake GPU"


def test_the_measure_action_times_the_loaded_run_again_in_a_job():
    state, events, points, pruning, measure = _wired(gpu=False)  # the run is not measured
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert _point(points).speed_source != "measured-model"
    measure.gpu = lambda: True
    job = measure.start(wait=True)
    assert isinstance(job, threading.Thread) and job is state.job and not state.busy
    assert _point(points).speed_note == "measured, graphs, 1024 tokens"
    # dense model, or another job running: refused with a reason
    points.load_point(points.tradeoff.points[0])
    assert measure.start() is None and "the model is dense" in events.status.text
    state.busy = True
    assert measure.start() is None and "a job is in progress" in events.status.text


def test_a_cancelled_measurement_leaves_the_estimate_and_says_so():
    holder = {}
    timer = FakeTimer(during=lambda: holder["pruning"].cancel())
    state, events, points, pruning, _ = _wired(timer=timer)
    holder["pruning"] = pruning
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert events.status.level == "warn"
    assert events.status.text == f"measuring {LABEL} was cancelled; its point keeps the estimate"
    assert "\n" not in events.status.text
    point = _point(points)
    assert point.speed_source != "measured-model" and point.speed_note == ""
    # the run itself stands: its masks are still in the model
    assert state.current is state.runs[LABEL] and not state.busy
    assert float(state.bundle.model[0].weight.eq(0).float().mean()) == 0.5


def test_a_failing_timer_leaves_the_estimate_with_a_one_line_message():
    timer = FakeTimer(fail=RuntimeError("CUDA error: out of memory\nmore lines\nand more"))
    _, events, points, pruning, _ = _wired(timer=timer)
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert events.status.level == "error"
    assert events.status.text == (
        f"measuring {LABEL} failed: RuntimeError: CUDA error: out of memory; "
        "its point keeps the estimate"
    )
    assert _point(points).speed_note == "" and events.progress[1] == "measuring failed"


def test_a_run_with_nothing_to_time_is_not_measured():
    timer = FakeTimer()
    _, events, points, pruning, _ = _wired(timer=timer)
    pruning.run(MethodConfig("magnitude", "4:8"), wait=True)
    assert timer.calls == []
    assert "not measured: no sparse kernel runs 4:8" in events.status.text
    assert _point(points, "magnitude 4:8 all float16").speed_note == ""


def test_without_a_gpu_nothing_is_measured():
    timer = FakeTimer()
    _, events, points, pruning, measure = _wired(timer=timer, gpu=False)
    pruning.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert timer.calls == [] and events.status.level == "ok"
    assert "measured" not in events.status.text.replace("no speed", "")
    assert _point(points).speed_source != "measured-model"
    assert measure.unavailable() == NO_GPU == "no CUDA GPU here"
    assert measure.start() is None and events.status.text == "cannot measure: no CUDA GPU here"
    assert repr(measure) == "Measure(unavailable: no CUDA GPU here)"


def test_the_measure_button_is_disabled_with_the_reason_without_a_gpu():
    pytest.importorskip("ipywidgets")
    from explorer.widgets import Dashboard
    from explorer.widgets.dashboard_page import DashboardPage

    dash = Dashboard(nn.Sequential(nn.Linear(16, 16)))
    dash.measure.gpu = lambda: False
    page = DashboardPage(dash)
    assert page.measure.disabled and page.measure.tooltip == "no CUDA GPU here"
    dash.events.emit("busy")  # a job's end does not enable it
    assert page.measure.disabled
    dash.measure.gpu = lambda: True
    dash.events.emit("busy")
    assert not page.measure.disabled and "time the loaded run" in page.measure.tooltip
    dash.measure.timer = FakeTimer()
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert dash.tradeoff.points[-1].speed_note == "measured, graphs, 1024 tokens"
    dash.measure.timer.calls.clear()
    page.measure.click()
    dash.job.join()
    assert any(c.startswith("sparsify") for c in dash.measure.timer.calls)


def test_an_example_input_comes_from_the_data_else_the_first_linear():
    from explorer.models.bundle import ModelBundle

    x = torch.randn(4, 8)
    with_data = ModelBundle.from_module(nn.Linear(8, 2), evaluate=lambda m: {}, calibration=[x])
    assert torch.equal(example_input(with_data), x)
    no_linear = ModelBundle.from_module(nn.ReLU(), evaluate=lambda m: {}, name="relu")
    with pytest.raises(ValueError, match="no input to time 'relu'"):
        example_input(no_linear)
