"""Calibration plumbing: input statistics, shared inputs, reconstruction error, batches."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from explorer.pruning.calibration import (
    InputStats,
    as_batches,
    call_model,
    reconstruction_error,
    record_inputs,
)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(6, 3), nn.Linear(6, 3), nn.Linear(6, 3)

    def forward(self, x):
        return self.a(x) + self.b(x) + self.c(x * 1.0)  # a and b share the same tensor object


def test_shared_inputs_give_the_same_statistics():
    net = TwoHeads()
    xs = [torch.randn(2, 5, 6) for _ in range(3)]
    with torch.no_grad(), record_inputs(dict(net.named_children())) as stats:
        for x in xs:
            net(x)
    flat = torch.cat([x.reshape(-1, 6) for x in xs])
    for name in "abc":
        torch.testing.assert_close(stats[name].hessian, flat.T @ flat)
        assert stats[name].rows == 30
    with torch.no_grad(), record_inputs(dict(net.named_children()), full=False) as diag:
        net(xs[0])
    torch.testing.assert_close(diag["b"].col_norms_sq, xs[0].reshape(-1, 6).square().sum(0))
    with pytest.raises(ValueError, match="only the diagonal"):
        _ = diag["a"].hessian


def test_hooks_are_removed():
    lin = nn.Linear(4, 4)
    with record_inputs({"lin": lin}):
        pass
    assert not lin._forward_hooks


def test_reconstruction_error_matches_outputs():
    x = torch.randn(50, 8)
    w = torch.randn(4, 8)
    pruned = w * (torch.rand(4, 8) > 0.5)
    stats = InputStats(8, torch.device("cpu"))
    stats.add(x)
    expected = float((x @ (w - pruned).T).norm() / (x @ w.T).norm())
    assert reconstruction_error(w, pruned, stats) == pytest.approx(expected, rel=1e-4)
    assert reconstruction_error(w, w, stats) == 0.0
    assert math.isnan(reconstruction_error(torch.zeros(4, 8), w, stats))
    assert math.isnan(reconstruction_error(w, w, InputStats(8, torch.device("cpu"))))


def test_as_batches():
    x = torch.randn(10, 4)
    assert len(as_batches(x)) == 1 and len(as_batches({"input_ids": x})) == 1
    assert len(as_batches(iter([x, x]))) == 2
    assert as_batches(None) is None
    with pytest.raises(TypeError, match="iterable of batches"):
        as_batches(3)


def test_call_model_names_the_batch():
    net = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    with pytest.raises(
        ValueError, match=r"batch 5 \(dict \{input_ids: \(2, 3\)\}.*token ids below 10"
    ):
        call_model(net, {"input_ids": torch.zeros(2, 3, dtype=torch.long)}, 5)
