"""prune(): bad input, restoring on failure, cancellation, batches, the result object."""

from __future__ import annotations

import dataclasses
import json
import threading
from types import MappingProxyType

import pytest
import torch
from torch import nn

from explorer.patterns import Pattern
from explorer.pruning import METHODS, PruneResult, PruningCancelled, prune
from explorer.pruning import methods as methods_module


def _weights(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _same(net: nn.Module, saved: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, saved[k]) for k, v in net.state_dict().items())


class _CancelAfter:
    """An is_set() that turns true after a number of checks."""

    def __init__(self, checks: int):
        self.left = checks

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0


# ----------------------------------------------------------------------------- bad input
def test_unknown_method(make_mlp):
    with pytest.raises(ValueError, match=r"unknown pruning method 'obs'.*'magnitude'.*'sparsegpt'"):
        prune(make_mlp(), "obs")


def test_needs_calibration(make_mlp):
    with pytest.raises(ValueError, match=r"'wanda' needs calibration data: pass calibration="):
        prune(make_mlp(), "wanda")


@pytest.mark.parametrize(
    ("method", "pattern"),
    [("wanda", "rows:0.25"), ("sparsegpt", "block8:0.5"), ("weightnorm", "unstructured-row:0.5")],
)
def test_unsupported_pattern_lists_supported(method, pattern, make_mlp):
    with pytest.raises(ValueError, match=rf"{method!r} does not support pattern .* supports"):
        prune(make_mlp(), method, pattern, calibration=[torch.randn(4, 32)])


def test_filter_selecting_nothing_lists_layers(make_mlp):
    with pytest.raises(ValueError, match=r"selected no layers.*'0', '2'"):
        prune(make_mlp(), filter_fn=lambda mod, fqn: False)


def test_width_not_divisible_names_layer():
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 2))
    with pytest.raises(ValueError, match=r"layer '4' has in_features=6.*M=4.*filter_fn"):
        prune(net, "magnitude", "2:4")
    result = prune(
        net, "magnitude", "2:4", filter_fn=lambda mod, fqn: mod.in_features % 4 == 0, progress=False
    )
    assert result.layers == ("0", "2")


def test_wrong_shape_batch_says_which(make_mlp):
    net = make_mlp()
    saved = _weights(net)
    calib = [torch.randn(8, 32), torch.randn(8, 32), torch.randn(8, 31)]
    with pytest.raises(
        ValueError, match=r"batch 2 \(tensor of shape \(8, 31\).*last dimension is 32"
    ):
        prune(net, "magnitude", "2:4", calibration=calib, progress=False)
    assert _same(net, saved)  # magnitude had pruned before the failing measurement: restored


def test_bad_argument_types(make_mlp):
    with pytest.raises(TypeError, match="cancel"):
        prune(make_mlp(), cancel=True)
    with pytest.raises(TypeError, match="filter_fn"):
        prune(make_mlp(), filter_fn="fc")
    with pytest.raises(ValueError, match="unknown sparsity pattern"):
        prune(make_mlp(), pattern="3of4")
    with pytest.raises(ValueError, match="calibration is empty"):
        prune(make_mlp(), "wanda", calibration=[])


# ----------------------------------------------------------------------------- restoring
@pytest.mark.parametrize("method", list(METHODS))
def test_failure_half_way_restores_bit_identical(method, make_mlp, monkeypatch):
    net = make_mlp()
    saved = _weights(net)
    calls = {"n": 0}

    if method == "weightnorm":

        def failing_check(mask, pattern):
            raise RuntimeError("boom")

        monkeypatch.setattr(methods_module, "check_pattern", failing_check)
    else:
        # the registry entry's own function fails on its second layer
        info = methods_module.METHODS[method]
        step = "calibrated" if info.calibrated is not None else "from_weights"
        real = getattr(info, step)

        def failing(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("boom")
            return real(*args, **kwargs)

        changed = dataclasses.replace(info, **{step: failing})
        registry = MappingProxyType({**methods_module.METHODS, method: changed})
        monkeypatch.setattr(methods_module, "METHODS", registry)
    with pytest.raises(RuntimeError, match="boom"):
        prune(net, method, "2:4", calibration=[torch.randn(16, 32)], progress=False)
    assert _same(net, saved)
    assert all(type(m) in (nn.Linear, nn.ReLU, nn.Sequential) for m in net.modules())


def test_calibration_batch_raising_half_way_restores(make_mlp):
    class Flaky:
        def __iter__(self):
            yield torch.randn(8, 32)
            raise OSError("disk gone")

    net = make_mlp()
    saved = _weights(net)
    with pytest.raises(OSError, match="disk gone"):
        prune(net, "sparsegpt", "2:4", calibration=Flaky(), progress=False)
    assert _same(net, saved)


@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
@pytest.mark.parametrize("checks", [0, 1, 3])
def test_cancel_restores(method, checks, make_mlp):
    net = make_mlp()
    saved = _weights(net)
    with pytest.raises(PruningCancelled, match="restored"):
        prune(
            net,
            method,
            "2:4",
            calibration=[torch.randn(8, 32)] * 3,
            progress=False,
            cancel=_CancelAfter(checks),
        )
    assert _same(net, saved)


def test_cancel_accepts_threading_event(tiny_transformer, token_batches):
    event = threading.Event()
    event.set()
    saved = _weights(tiny_transformer)
    with pytest.raises(PruningCancelled):
        prune(
            tiny_transformer, "sparsegpt", calibration=token_batches, progress=False, cancel=event
        )
    assert _same(tiny_transformer, saved)
    assert isinstance(PruningCancelled("x"), Exception)


# ----------------------------------------------------------------------------- batches
def test_dict_and_tuple_batches():
    class Keyword(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x, scale=1.0):
            return self.fc(x * scale)

    x = torch.randn(16, 8)
    a, b, c = Keyword(), Keyword(), Keyword()
    b.load_state_dict(a.state_dict())
    c.load_state_dict(a.state_dict())
    ra = prune(a, "wanda", calibration=[{"x": x, "scale": 2.0}], progress=False)
    rb = prune(b, "wanda", calibration=[(x, 2.0)], progress=False)
    rc = prune(c, "wanda", calibration=x * 2.0, progress=False)  # one tensor = one batch
    assert torch.equal(ra.masks["fc"], rb.masks["fc"]) and torch.equal(
        ra.masks["fc"], rc.masks["fc"]
    )
    assert ra.calibration_batches == rc.calibration_batches == 1


def test_generator_calibration_is_replayed(tiny_transformer, token_batches):
    result = prune(
        tiny_transformer, "wanda", calibration=(b for b in token_batches), progress=False
    )
    assert result.calibration_batches == 3
    assert "head" in result.errors  # the head needed a second pass over the calibration set


# ----------------------------------------------------------------------------- result
def test_inplace_false_leaves_model(make_mlp):
    net = make_mlp()
    saved = _weights(net)
    result = prune(net, "magnitude", inplace=False, progress=False)
    assert _same(net, saved)
    assert result.model is not net
    assert bool((result.model[0].weight[~result.masks["0"]] == 0).all())
    assert prune(net, progress=False).model is net


def test_result_views(make_mlp):
    result = prune(
        make_mlp(), "sparsegpt", "4:8", calibration=[torch.randn(32, 32)], progress=False
    )
    assert isinstance(result, PruneResult)
    assert result.pattern == Pattern.parse("4:8")
    text = repr(result)
    assert text.startswith("PruneResult(method='sparsegpt', pattern='4:8', layers=2, density=0.500")
    assert "\n" not in text
    html = result._repr_html_()
    assert "<table" in html and "reconstruction error" in html
    summary = json.loads(result.to_json())
    assert summary["method"] == "sparsegpt" and summary["pattern"] == "4:8"
    assert [layer["name"] for layer in summary["layers"]] == ["0", "2"]
    assert all(0 <= layer["error"] < 1 for layer in summary["layers"])
    with pytest.raises(AttributeError):
        result.method = "x"


def test_result_without_calibration_has_no_errors(make_mlp):
    result = prune(make_mlp(), "magnitude", progress=False)
    assert result.errors == {}
    assert "mean_error" not in repr(result)
    assert json.loads(result.to_json())["mean_error"] is None


def test_tied_weight_warns():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(16, 8)
            self.head = nn.Linear(8, 16, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, ids):
            return self.head(self.embed(ids))

    with pytest.warns(UserWarning, match=r"head.weight is shared with embed.weight"):
        prune(Tied(), progress=False)


def test_progress_bar_runs(make_mlp, capsys):
    prune(make_mlp(), "wanda", calibration=[torch.randn(8, 32)], progress=True)
