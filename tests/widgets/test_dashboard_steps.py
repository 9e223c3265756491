"""The dashboard's added pruning steps: channel permutation, the ADMM update, quantization."""

from __future__ import annotations

import json

import pytest
import torch

from explorer.widgets import Dashboard, MethodConfig

pytest.importorskip("sklearn", reason="digits-mlp needs scikit-learn (the models extra)")


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Dashboard("digits-mlp")


def _weights(dash) -> dict[str, torch.Tensor]:
    return {n: dash.model.get_submodule(n).weight.detach().clone() for n in ("0", "2", "4")}


def test_the_admm_update_changes_the_kept_weights_and_keeps_the_masks(dash):
    dash.run(MethodConfig("sparsegpt", "2:4", calibration=64), wait=True)
    assert dash.status.level == "ok", dash.status.text
    plain = _weights(dash)
    config = MethodConfig("sparsegpt", "2:4", calibration=64, update="admm")
    dash.run(config, wait=True)
    assert dash.status.level == "ok", dash.status.text
    assert "sparsegpt 2:4 all float16 +ADMM" in dash.status.text
    updated = _weights(dash)
    assert sorted(dash.current.masks) == ["0", "2"]  # the head, "4", is not pruned
    for name in dash.current.masks:
        weight = updated[name]
        kept = weight != 0
        assert kept.reshape(-1, 4).sum(-1).le(2).all()  # still 2:4
        assert not torch.equal(weight, plain[name])  # the update moved the kept weights
    labels = [p.label for p in dash.tradeoff.points]
    assert config.label in labels and "sparsegpt 2:4 all float16" in labels
    point = next(p for p in dash.tradeoff.points if p.label == config.label)
    assert point.speedup is not None  # a 16-bit 2:4 model: the same speed source as any 2:4 run
    assert MethodConfig.from_json(point.config) == config


def test_a_quantized_run_lands_on_the_grid_and_claims_no_16_bit_speed(dash):
    config = MethodConfig("sparsegpt", "2:4", calibration=64, quantize="int4", group_size=32)
    dash.run(config, wait=True)
    assert dash.status.level == "ok", dash.status.text
    assert "no speed data (2:4 on int4 weights is timed by the GPU benchmark" in dash.status.text
    point = next(p for p in dash.tradeoff.points if p.label == config.label)
    assert point.speedup is None
    run = dash.current
    for name, scales in run.result.scales.items():
        weight = dash.model.get_submodule(name).weight.detach().float()
        rows, cols = weight.shape
        codes = weight.reshape(rows, cols // 32, 32) / scales.float().reshape(rows, cols // 32, 1)
        assert torch.allclose(codes, codes.round(), atol=1e-3), name  # on the grid
        assert codes.abs().max() <= 7 + 1e-3  # int4: -7..7
        assert (weight != 0).reshape(-1, 4).sum(-1).le(2).all()


def test_saving_a_quantized_run_stores_its_int4_codes(dash, tmp_path):
    from explorer.checkpoint import read_int4_weights

    pytest.importorskip("safetensors")
    config = MethodConfig("sparsegpt", "2:4", calibration=64, quantize="int4", group_size=32)
    dash.run(config, wait=True)
    assert dash.status.level == "ok", dash.status.text
    dash.save(tmp_path / "run.safetensors", wait=True)
    assert dash.status.level == "ok", dash.status.text
    stored = read_int4_weights(tmp_path / "run.safetensors")
    assert sorted(stored) == ["0", "2"] and {w.group_size for w in stored.values()} == {32}
    for name, weight in stored.items():  # the very values the run left in the model
        assert torch.equal(weight.decompress(), dash.model.get_submodule(name).weight.float())


def test_a_permuted_runs_point_loads_its_settings_and_leaves_the_model_dense(dash):
    config = MethodConfig("wanda", "2:4", calibration=64, permute=True)
    dash.run(config, wait=True)
    assert dash.status.level == "ok", dash.status.text
    index = next(i for i, p in enumerate(dash.tradeoff.points) if p.label == config.label)
    dash.tradeoff.click(0)  # dense first
    dense = _weights(dash)
    dash.tradeoff.click(index)
    assert dash.method_picker.config == config
    assert dash.current is None and "the model stays dense" in dash.status.text
    assert all(torch.equal(w, dense[n]) for n, w in _weights(dash).items())


def test_a_refused_combination_leaves_the_picker_as_it_was(dash):
    before = dash.method_picker.config
    with pytest.raises(ValueError, match="method='sparsegpt'"):
        dash.method_picker.set(method="magnitude", quantize="int4")
    with pytest.raises(ValueError, match="permute=True reorders channels for N:M patterns"):
        dash.method_picker.set(pattern="unstructured:0.5", permute=True)
    with pytest.raises(ValueError, match="calibration is 0 samples"):
        dash.method_picker.set(method="magnitude", calibration=0, update="admm")
    assert dash.method_picker.config == before


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"update": "sgd"}, "unknown weight update 'sgd'"),
        ({"permute": "yes"}, "permute must be True or False"),
        ({"method": "sparsegpt", "quantize": "int3"}, "int3"),
        ({"method": "sparsegpt", "quantize": "int4", "group_size": 6}, "group_size"),
    ],
)
def test_bad_steps_are_errors_naming_the_value(changes, message):
    with pytest.raises((ValueError, TypeError), match=message):
        MethodConfig(**changes)


def test_steps_round_trip_and_old_configurations_still_load():
    config = MethodConfig("sparsegpt", permute=True, update="admm", quantize="int8", group_size=64)
    assert MethodConfig.from_json(config.to_json()) == config
    old = {"method": "wanda", "pattern": "2:4", "calibration": 32, "layers": None}
    old |= {"dtype": "float16", "tokens": 1024}  # as stored before the steps existed
    loaded = MethodConfig.from_json(json.dumps(old))
    assert loaded.label == "wanda 2:4 all float16" and loaded.prune_options() == {
        "permute": False,
        "update": None,
        "quantize": None,
        "group_size": 128,
    }


def test_a_loaded_point_sets_the_controls_and_prune_runs_what_they_show(dash):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.views import DashboardView

    config = MethodConfig("sparsegpt", "2:4", calibration=48, update="admm", tokens=512)
    dash.run(config, wait=True)
    assert dash.status.level == "ok", dash.status.text
    view = DashboardView(dash)
    view.method.value = "magnitude"  # the page now shows something else
    view.steps.update.value = None
    index = next(i for i, p in enumerate(dash.tradeoff.points) if p.label == config.label)
    dash.tradeoff.click(index)
    assert dash.method_picker.config == config
    shown = (view.method.value, view.calibration.value, view.tokens.value, view.steps.values())
    assert shown == ("sparsegpt", 48, 512, config.prune_options())
    view.run.click()  # Prune reads the controls: the loaded configuration runs again
    dash.job.join()
    assert dash.status.level == "ok", dash.status.text
    assert dash.current.config == config


def test_the_controls_show_any_valid_configuration_unclamped(dash):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.control_sync import show_config
    from explorer.widgets.views import DashboardView

    view = DashboardView(dash)
    wide = MethodConfig("wanda", "4:8", calibration=300, tokens=256, quantize=None, permute=True)
    show_config(view, wide)
    shown = (view.method.value, view.pattern_choice.value, view.calibration.value)
    assert shown == ("wanda", "4:8", 300) and view.tokens.value == 256
    assert view.steps.permute.value is True and not view.syncing
