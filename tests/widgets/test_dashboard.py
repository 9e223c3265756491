"""The dashboard driven without a browser: state, figures, status text and bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.widgets import Dashboard, MethodConfig

pytest.importorskip("sklearn", reason="digits-mlp needs scikit-learn (the models extra)")


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    import os

    with pytest.MonkeyPatch.context() as mp:
        if "SPARSITY_EXPLORER_CACHE" not in os.environ:
            mp.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Dashboard("digits-mlp")


def test_loads_with_layers_and_a_dense_point(dash):
    assert dash.status.level == "ok"
    assert dash.layer_picker.names == ["0", "2", "4"]
    assert dash.selected == "0"  # no layer is fast at 2:4: the first prunable one
    assert [p.label for p in dash.tradeoff.points] == ["dense"]
    assert dash.tradeoff.metric == "accuracy"


def test_selecting_a_layer_updates_mask_and_panel(dash):
    dash.layer_picker.select("2")
    hm = dash.mask_viewer.heatmap()
    # zoomed on single weights: 32 x 64 of them, groups of 4 striped
    assert hm["z"].shape == (32, 64) and hm["xgap"] == 1
    # before any run the view previews what magnitude 2:4 keeps: two of every four
    weight = dash.model.get_submodule("2").weight.detach()
    kept = torch.from_numpy(hm["z"] & 1).bool()
    assert kept.reshape(32, 16, 4).sum(-1).eq(2).all()
    top2 = weight[:32, :64].abs().reshape(32, 16, 4).topk(2, dim=-1).indices
    assert kept.reshape(32, 16, 4).gather(-1, top2).all()
    assert dash.mask_viewer.zoomed.bad_groups == 0
    assert dash.mask_viewer.title.startswith("2: magnitude 2:4 preview<br>rows 0-31, cols 0-63")
    # the panel speaks of the weight as it is: dense, so every group breaks 2:4
    assert dash.pattern_panel.summary()["valid"] is False
    assert dash.layer_view.previews[("2", "2:4")] is dash.mask_viewer.mask  # computed once, cached
    dash.mask_viewer.click(0, 0)
    assert dash.mask_viewer.mode == "overview" and dash.mask_viewer.heatmap()["z"].shape == (
        256,
        256,
    )
    with pytest.raises(ValueError, match="no layer named"):
        dash.layer_picker.select("nope")


def test_pruning_adds_a_point_and_updates_the_views(dash):
    dash.layer_picker.select("2")
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert dash.status.level == "ok", dash.status.text
    assert "magnitude 2:4 all float16" in dash.status.text and "speedup" in dash.status.text
    assert [p.label for p in dash.tradeoff.points] == ["dense", "magnitude 2:4 all float16"]
    assert dash.pattern_panel.summary()["valid"] is True
    assert dash.mask_viewer.title.startswith("2 (magnitude 2:4)")
    z = dash.mask_viewer.heatmap()["z"]
    assert (z & 1).mean() == pytest.approx(0.5) and dash.mask_viewer.zoomed.bad_groups == 0
    assert dash.progress == (1.0, "done")
    assert not dash.busy


def test_clicking_a_point_loads_its_configuration(dash):
    dash.tradeoff.click(0)  # dense
    assert dash.current is None
    assert (dash.model.get_submodule("2").weight != 0).all()
    dash.tradeoff.click(1)
    assert dash.current.config.method == "magnitude"
    assert dash.pattern_panel.summary()["valid"] is True
    assert dash.method_picker.config.method == "magnitude"


def test_views_mirror_the_logic(dash):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.views import DashboardView

    view = DashboardView(dash)
    assert view.layer.value == dash.selected
    heat = view.mask.data[0]
    assert heat.z.shape == dash.mask_viewer.heatmap()["z"].shape
    view.layer.value = "0"
    assert dash.selected == "0"
    assert view.mask.layout.title.text.startswith("0 (magnitude 2:4)")

    def markers():  # every trace but the frontier (the last) is one speed source
        return sum(len(trace.x) for trace in view.tradeoff.data[:-1])

    before = markers()
    view.method.value = "random"
    view.run.click()
    dash.job.join()
    assert markers() == before + 1
    assert "random 2:4" in view.status.value


def test_cancelled_run_restores_the_model(dash, monkeypatch):
    import explorer.pruning as pruning
    from explorer.errors import check_cancel

    def slow_prune(model, method, pattern, cancel=None, **kwargs):
        dash.cancel()
        check_cancel(cancel, "in the test")

    monkeypatch.setattr(pruning, "prune", slow_prune)
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert dash.status.level == "warn" and "cancelled" in dash.status.text
    assert (dash.model.get_submodule("2").weight != 0).all()
    assert not dash.busy


def test_errors_become_messages(dash, monkeypatch):
    import explorer.pruning as pruning

    def broken(*args, **kwargs):
        raise ValueError("pattern 2:4 needs in_features divisible by 4")

    monkeypatch.setattr(pruning, "prune", broken)
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert dash.status.level == "error"
    assert "divisible by 4" in dash.status.text and "Traceback" not in dash.status.text
    dash.layer_picker.select("0")  # still usable
    assert dash.mask_viewer.mode == "zoom"


def test_a_model_without_prunable_layers():
    dash = Dashboard(nn.Sequential(nn.ReLU(), nn.Tanh()))
    assert dash.status.level == "warn" and "nothing to prune" in dash.status.text
    assert dash.mask_viewer.mode == "empty"
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert "no model with prunable layers" in dash.status.text


def test_a_layer_too_narrow_for_the_pattern():
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    dash = Dashboard(model)
    dash.run(MethodConfig("magnitude", "2:4", layers=("0",)), wait=True)
    assert dash.status.level == "error", dash.status.text
    assert "failed" in dash.status.text
    assert torch.equal(model[0].weight != 0, torch.ones(8, 3, dtype=torch.bool))
    dash.layer_picker.select("2")
    assert dash.mask_viewer.mode == "zoom"


def test_unknown_model_name_is_a_message():
    dash = Dashboard(nn.Sequential(nn.Linear(8, 8)))
    dash.load("no-such-model")
    assert dash.status.level == "error" and "no-such-model" in dash.status.text


def test_kernel_on_a_gpu_without_sparse_tensor_cores(dash, monkeypatch):
    dash.layer_picker.select("2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    result = dash.run_kernel(tokens=64, dtype="float16")
    assert result.mode in ("cpu-emulation", "unavailable")
    assert "compute capability 7.5" in result.message or "compress" in result.message.lower()
    assert dash.status.level in ("ok", "warn")


def test_every_point_says_where_its_speed_comes_from(tmp_path, monkeypatch):
    from explorer.results.store import ResultStore

    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path))
    store = ResultStore(str(tmp_path / "mine.db"))
    store.record(
        "bench-models",
        {"model": "digits-mlp", "dtype": "float16", "tokens": 1024, "label": "digits 1x1024"},
        {"speedup": 0.97},
        provenance={"gpu": "NVIDIA H100"},
    )
    dash = Dashboard("digits-mlp", store=store)
    dense = dash.tradeoff.points[0]
    assert (dense.speedup, dense.speed_source) == (1.0, "baseline")
    # all prunable layers at 2:4: the store's whole-model measurement
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    whole = dash.tradeoff.points[-1]
    assert (whole.speedup, whole.speed_source, whole.speed_from) == (
        0.97,
        "measured-model",
        "local",
    )
    assert "digits 1x1024: 0.97x" in whole.hover() and "measured on the whole model" in (
        dash.status.text
    )
    # one layer: not what was measured, and this store has no layer rows: no data
    dash.run(MethodConfig("magnitude", "2:4", layers=("2",)), wait=True)
    one = dash.tradeoff.points[-1]
    assert one.speedup is None and one.speed_source == "none", one
    assert "no speed data" in dash.status.text
    # the shipped reference has the digits layers measured: an estimate, with its formula
    ref = Dashboard("digits-mlp")
    ref.run(MethodConfig("magnitude", "2:4", layers=("2",)), wait=True)
    layer = ref.tradeoff.points[-1]
    assert layer.speed_source == "estimate-layers" and "H100" in layer.speed_from
    assert layer.speedup < 1.0  # the GPU time says the small layer runs slower sparse
    assert "formula: speedup = Σ w / Σ (w / s)" in layer.hover()


def test_an_unknown_dtype_is_an_error_naming_it():
    with pytest.raises(ValueError, match="'float17'"):
        Dashboard(nn.Sequential(nn.Linear(16, 16)), dtype="float17")
    dash = Dashboard(nn.Sequential(nn.Linear(16, 16)), dtype="bf16")
    assert dash.dtype == "bfloat16"


def test_say_is_the_status_line():
    dash = Dashboard(nn.Sequential(nn.Linear(16, 16)))
    seen = []
    dash.on_change(seen.append)
    dash.say("warn", "careful")
    assert dash.status.text == "careful" and seen == ["status"]
    with pytest.raises(ValueError, match="status level 'loud' unknown"):
        dash.say("loud", "x")


def test_prebuild_writes_the_first_page_once(tmp_path, monkeypatch):
    from explorer.widgets import dashboard
    from explorer.widgets.dashboard_cache import PageCache

    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path))
    path = dashboard.prebuild_first_page("digits-mlp")
    assert path.parent == tmp_path and PageCache.load(path).name == "digits-mlp"
    # cached: nothing is loaded again
    monkeypatch.setattr(dashboard, "Dashboard", None)
    assert dashboard.prebuild_first_page("digits-mlp") == path
    with pytest.raises(ValueError, match="model 'nope' is not one the dashboard offers"):
        dashboard.prebuild_first_page("nope")
