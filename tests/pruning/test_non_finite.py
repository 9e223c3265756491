"""NaN and Inf in weights or calibration data: every method refuses, says which, restores."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.patterns import Pattern
from explorer.pruning import METHODS, prune
from explorer.pruning.calibration import InputStats, reconstruction_error
from explorer.pruning.random import random_mask
from explorer.pruning.sparsegpt import sparsegpt_prune
from explorer.pruning.weightnorm import weightnorm_masks


def _bits(net: nn.Module) -> dict[str, torch.Tensor]:
    # Bit patterns, so that NaN compares equal to itself.
    return {k: v.detach().clone().view(torch.int32) for k, v in net.state_dict().items()}


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_every_method_refuses_non_finite_weights_and_leaves_the_model(method, bad, make_mlp):
    net = make_mlp((16, 32, 8))
    with torch.no_grad():
        net[2].weight[3, 5] = bad
    before = _bits(net)
    calibration = [torch.randn(16, 16)] if METHODS[method].needs_calibration else None
    with pytest.raises(ValueError, match=r"NaN or inf") as info:
        prune(net, method, "2:4", calibration=calibration, progress=False)
    assert "(3, 5)" in str(info.value) or method in ("wanda", "sparsegpt")
    after = _bits(net)
    assert all(torch.equal(after[k], before[k]) for k in before)


def test_random_and_weightnorm_name_the_layer():
    with pytest.raises(ValueError, match=r"weight of layer 'fc' holds 1 NaN .* at \(0, 2\)"):
        random_mask(torch.tensor([[1.0, 2.0, float("nan"), 4.0]]), Pattern.parse("2:4"), name="fc")
    net = nn.Sequential(nn.Linear(8, 4))
    with torch.no_grad():
        net[0].weight[1, 1] = float("inf")
    before = _bits(net)
    with pytest.raises(ValueError, match=r"layer '0' holds 1 NaN or infinite .* at \(1, 1\)"):
        weightnorm_masks(net, {"0": net[0]}, Pattern.parse("2:4"))
    assert not hasattr(net[0], "parametrizations")
    assert all(torch.equal(_bits(net)[k], before[k]) for k in before)


@pytest.mark.parametrize("method", ["sparsegpt", "wanda"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_calibration_data_is_named_as_such(method, bad, make_mlp):
    net = make_mlp((16, 32, 8))
    before = _bits(net)
    data = torch.randn(64, 16)
    data[7, 3] = bad
    with pytest.raises(ValueError, match=r"inputs of layer '0' held NaN or Inf") as info:
        prune(net, method, "2:4", calibration=[data], progress=False)
    assert "too little" not in str(info.value) and "more (or more varied)" not in str(info.value)
    assert all(torch.equal(_bits(net)[k], before[k]) for k in before)


def test_sparsegpt_on_its_own_says_the_hessian_is_not_finite():
    h = torch.eye(8)
    h[2, 2] = float("nan")
    with pytest.raises(ValueError, match="held NaN or Inf during calibration"):
        sparsegpt_prune(torch.randn(4, 8), h, Pattern.parse("2:4"))


def test_reconstruction_error_stays_nan_tolerant():
    stats = InputStats(4, torch.device("cpu"), layer="fc")
    stats.add(torch.tensor([[1.0, float("nan"), 0.0, 1.0]]))
    w = torch.ones(2, 4)
    assert reconstruction_error(w, w * 0.5, stats) != reconstruction_error(w, w * 0.5, stats)
    with pytest.raises(ValueError, match="layer 'fc'"):
        stats.hessian  # noqa: B018
    with pytest.raises(ValueError, match="layer 'fc'"):
        stats.col_norms_sq  # noqa: B018


def test_magnitude_names_the_layer():
    net = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 4))
    with torch.no_grad():
        net[2].weight[2, 3] = float("nan")
    before = _bits(net)
    with pytest.raises(ValueError, match=r"weight of layer '2' holds 1 NaN .* at \(2, 3\)"):
        prune(net, "magnitude", "2:4", progress=False)
    after = _bits(net)
    assert all(torch.equal(after[k], before[k]) for k in before)
