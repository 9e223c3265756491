"""ModelBundle, load() and the cache directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from explorer.models import MODELS, ModelBundle, load
from explorer.models.bundle import classifier_filter
from explorer.results.store import cache_dir


def _toy():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    x = torch.randn(32, 8)
    return model, x


def test_load_unknown_name_lists_the_names():
    with pytest.raises(ValueError, match="unknown model 'bert'") as info:
        load("bert")
    for name in MODELS:
        assert name in str(info.value)


def test_load_unknown_option_names_accepted_ones():
    with pytest.raises(TypeError, match="accepts"):
        load("digits-mlp", colour="red")


def test_from_module_with_dict_and_float():
    model, x = _toy()
    bundle = ModelBundle.from_module(model, lambda m: {"mean": float(m(x).mean()), "n": 32})
    out = bundle.evaluate()
    assert out["metric"] == "mean" and out["higher_is_better"] is True and out["n"] == 32
    scalar = ModelBundle.from_module(model, lambda m: 0.5, name="toy", higher_is_better=False)
    assert scalar.evaluate() == {"score": 0.5, "metric": "score", "higher_is_better": False}
    assert scalar.prunable == ["0", "2"]


def test_from_module_calibration_list_and_callable():
    model, x = _toy()
    batches = [x[:8], x[8:16], x[16:]]
    bundle = ModelBundle.from_module(model, lambda m: 1.0, calibration=batches)
    assert len(bundle.calibration(2)) == 2
    fn = ModelBundle.from_module(model, lambda m: 1.0, calibration=lambda n, seed: [x[:n]])
    assert fn.calibration(5, seed=1)[0].shape == (5, 8)


def test_bad_input_is_explained():
    model, _ = _toy()
    bundle = ModelBundle.from_module(model, lambda m: 1.0)
    with pytest.raises(ValueError, match="no calibration data"):
        bundle.calibration(4)
    with pytest.raises(TypeError, match=r"nn\.Module"):
        ModelBundle.from_module("model", lambda m: 1.0)
    with pytest.raises(TypeError, match="callable"):
        ModelBundle.from_module(model, 3.0)
    with_cal = ModelBundle.from_module(model, lambda m: 1.0, calibration=[torch.zeros(1, 8)])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="positive int"):
            with_cal.calibration(bad)
    broken = ModelBundle.from_module(model, lambda m: {"a": 1.0}, metric="b")
    with pytest.raises(ValueError, match="lacks the headline metric 'b'"):
        broken.evaluate()


def test_evaluate_restores_training_mode_and_uses_inference_mode():
    model, _x = _toy()
    seen = {}

    def evaluate(m):
        seen["training"] = m.training
        seen["grad"] = torch.is_grad_enabled()
        return 1.0

    bundle = ModelBundle.from_module(model, evaluate)
    model.train()
    bundle.evaluate()
    assert seen == {"training": False, "grad": False} and model.training


def test_repr_is_one_line_and_html_renders():
    model, _ = _toy()
    bundle = ModelBundle.from_module(model, lambda m: 1.0, name="toy")
    assert "\n" not in repr(bundle) and "'toy'" in repr(bundle) and "2 prunable" in repr(bundle)
    assert "<table" in bundle._repr_html_() and "toy" in bundle._repr_html_()


def test_classifier_filter():
    f = classifier_filter("4")
    assert f(nn.Linear(2, 2), "0") and not f(nn.Linear(2, 2), "4") and not f(nn.ReLU(), "1")


def test_cache_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SPARSITY_EXPLORER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "sparsity-explorer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "sparsity-explorer"
