"""The dashboard on hostile input: bad patterns, no calibration data, runs that fail halfway."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.pruning import METHODS, PruningCancelled
from explorer.widgets import Dashboard, MethodConfig, MethodPicker
from explorer.widgets.method_picker import min_calibration

DATA_METHODS = [name for name, info in METHODS.items() if info.needs_calibration]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 16))


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    tensors = {f"param {n}": p for n, p in model.named_parameters()}
    tensors.update({f"buffer {n}": b for n, b in model.named_buffers()})
    return {k: v.detach().clone() for k, v in tensors.items()}


def _assert_same(model: nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = _state(model)
    changed = [k for k, v in before.items() if not torch.equal(after[k], v)]
    assert changed == [], f"changed: {changed}"


@pytest.fixture
def view():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.views import DashboardView

    dash = Dashboard(_model())
    assert dash.status.level == "ok", dash.status.text
    return DashboardView(dash)


def _click_run(view) -> None:
    thread = view.dash.job
    view.run.click()
    if view.dash.job is not thread:
        view.dash.job.join()


# ---------------------------------------------------------------------------- the pattern box
@pytest.mark.parametrize("bad", ["abc", "4:2", "0:4", "unstructured:1.5", "", "2:3"])
def test_a_bad_pattern_is_an_error_and_runs_nothing(view, bad):
    dash = view.dash
    before = _state(dash.model)
    points = len(dash.tradeoff.points)
    view.pattern_choice.value = bad
    _click_run(view)
    assert dash.status.level == "error", dash.status.text
    assert "invalid setting" in dash.status.text and repr(bad) in dash.status.text
    assert "error" in view.status.value
    assert len(dash.tradeoff.points) == points and dash.runs == {}
    assert dash.method_picker.config.pattern == "2:4"  # the previous one, kept but not run
    _assert_same(dash.model, before)


def test_a_pattern_with_spaces_runs_as_the_pattern(view):
    dash = view.dash
    view.pattern_choice.value = " 2:4 "
    assert view.pattern_choice.value == "2:4"  # shown canonical
    _click_run(view)
    assert dash.status.level == "ok", dash.status.text
    assert list(dash.runs) == ["magnitude 2:4 all float16"]
    assert "runs 2:4 " not in dash.status.text
    assert [p.label for p in dash.tradeoff.points][-1] == "magnitude 2:4 all float16"


@pytest.mark.parametrize("spec", [" 4:8", "unstructured:0.50", "\t2:4\n"])
def test_method_config_stores_the_canonical_pattern(spec):
    config = MethodConfig("magnitude", spec)
    assert config.pattern == spec.strip().replace("0.50", "0.5")
    assert MethodConfig.from_json(config.to_json()) == config


# --------------------------------------------------------------------- calibration samples
@pytest.mark.parametrize("method", DATA_METHODS)
def test_data_methods_need_at_least_one_calibration_sample(view, method):
    assert min_calibration(method) == 1
    view.calibration.value = 0 if view.calibration.min == 0 else view.calibration.min
    view.method.value = method
    assert view.calibration.min == 1
    view.calibration.value = 0  # the slider stops at its lower end
    assert view.calibration.value == 1
    assert view.dash.method_picker.config.calibration == 1
    assert view.dash.status.level != "error", view.dash.status.text
    with pytest.raises(
        ValueError, match=rf"method '{method}' needs calibration data.*got|at least 1"
    ):
        MethodConfig(method, "2:4", calibration=0)
    picker = MethodPicker(MethodConfig("magnitude", "2:4", calibration=0))
    with pytest.raises(ValueError, match="needs calibration data"):
        picker.set(method=method)
    assert picker.config.method == "magnitude"  # a refused change leaves the config


def test_data_free_methods_may_use_no_samples(view):
    view.method.value = "wanda"
    view.method.value = "magnitude"
    assert view.calibration.min == 0 and min_calibration("magnitude") == 0
    view.calibration.value = 0
    assert view.dash.method_picker.config.calibration == 0


# ------------------------------------------------------------------------ a failed run
@pytest.mark.parametrize("error", [RuntimeError("out of memory"), PruningCancelled("cancelled")])
def test_a_failed_run_restores_the_model_and_the_layer_table(view, monkeypatch, error):
    import explorer.pruning as pruning

    dash = view.dash
    dense = _state(dash.model)
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert dash.status.level == "ok", dash.status.text
    assert all(row.valid_24 for row in dash.layer_picker.rows)
    assert ">2:4</span>" in view.table.value
    real_prune = pruning.prune

    def fails_halfway(model, *args, **kwargs):
        real_prune(model, *args, **kwargs)  # prunes in place ...
        with torch.no_grad():
            model[1].weight.mul_(3.0)  # ... writes elsewhere too ...
        raise error  # ... then fails

    monkeypatch.setattr(pruning, "prune", fails_halfway)
    dash.run(MethodConfig("random", "2:4"), wait=True)
    assert dash.status.level in ("error", "warn") and "dense again" in dash.status.text
    _assert_same(dash.model, dense)
    assert dash.current is None and not dash.busy
    # the table shows the model as it now is: dense, not 2:4
    assert not any(row.valid_24 for row in dash.layer_picker.rows)
    assert view.table.value == dash.layer_picker.html()
    assert ">2:4</span>" not in view.table.value and ">dense</span>" in view.table.value
    assert dash.pattern_panel.summary()["valid"] is False
