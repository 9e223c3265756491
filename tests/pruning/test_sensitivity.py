"""Pruning one layer at a time."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from explorer.pruning import PruningCancelled, SensitivityResult, sensitivity


def _setup():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)
    )
    with torch.no_grad():  # the middle layer already follows 2:4: pruning it changes nothing
        net[2].weight[:, 1::2] = 0.0
    x = torch.randn(64, 16)
    reference = net(x).detach()

    def score(model):
        with torch.no_grad():
            return -float((model(x) - reference).pow(2).mean())

    return net, x, score


def test_one_layer_at_a_time_and_restored():
    net, _, score = _setup()
    saved = {k: v.clone() for k, v in net.state_dict().items()}
    result = sensitivity(net, score, "magnitude", "2:4", progress=False)
    assert all(torch.equal(v, saved[k]) for k, v in net.state_dict().items())
    assert isinstance(result, SensitivityResult)
    assert list(result.metrics) == ["0", "2", "4"] and result.dense == 0.0
    assert all(d >= 0 for d in result.drops.values())
    assert result.metrics["2"] == 0.0 and result.drops["2"] == 0.0
    assert result.ranked()[-1][0] == "2" and result.drops["0"] > 0 and result.drops["4"] > 0


def test_lower_is_better_and_views():
    net, x, score = _setup()
    loss = lambda model: -score(model)  # noqa: E731
    result = sensitivity(
        net, loss, "sparsegpt", "4:8", calibration=[x], progress=False, higher_is_better=False
    )
    assert all(d >= 0 for d in result.drops.values())
    assert set(result.errors) == {"0", "2", "4"}
    assert repr(result).startswith("SensitivityResult(method='sparsegpt', pattern='4:8', layers=3")
    assert "<table" in result._repr_html_()
    assert [row["name"] for row in json.loads(result.to_json())["layers"]][-1] == "2"


def test_bad_input_and_cancel():
    net, x, score = _setup()
    with pytest.raises(TypeError, match="evaluate"):
        sensitivity(net, 3.0)
    with pytest.raises(ValueError, match="calibration"):
        sensitivity(net, score, "wanda")
    saved = {k: v.clone() for k, v in net.state_dict().items()}

    class After:
        checks = 2

        def is_set(self):
            self.checks -= 1
            return self.checks < 0

    with pytest.raises(PruningCancelled):
        sensitivity(net, score, "wanda", calibration=[x], progress=False, cancel=After())
    assert all(torch.equal(v, saved[k]) for k, v in net.state_dict().items())
