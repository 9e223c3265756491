"""Masked fine-tuning keeps the pattern and recovers accuracy on scikit-learn's digits."""

from __future__ import annotations

import copy
import json
import threading

import pytest
import torch
from torch import nn

from explorer.checks import check_pattern
from explorer.pruning import FinetuneResult, PruningCancelled, finetune, prune


@pytest.fixture(scope="module")
def digits():
    datasets = pytest.importorskip("sklearn.datasets")
    data = datasets.load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, test = perm[:1200], perm[1200:]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(150):
        loss = nn.functional.cross_entropy(net(x[train]), y[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
    batches = [(x[train][i : i + 300], y[train][i : i + 300]) for i in range(0, 1200, 300)]
    return net, batches, x[test], y[test]


def _accuracy(net, x, y) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def test_finetune_recovers_accuracy_after_24(digits):
    dense, batches, x, y = digits
    net = copy.deepcopy(dense)
    dense_acc = _accuracy(dense, x, y)
    result = prune(net, "magnitude", "2:4", progress=False)
    pruned_acc = _accuracy(net, x, y)
    assert dense_acc > 0.9 and pruned_acc < dense_acc - 0.02
    curve = finetune(net, result, batches, steps=60, lr=3e-3, progress=False)
    tuned_acc = _accuracy(net, x, y)
    assert tuned_acc > pruned_acc + 0.02 and tuned_acc >= dense_acc - 0.02
    assert curve.steps == 60 and curve.final_loss < curve.first_loss
    for name, mask in result.masks.items():
        weight = net.get_submodule(name).weight.detach()
        assert bool((weight[~mask] == 0).all()) and check_pattern(weight, "2:4").valid


def test_finetune_result_views(digits):
    dense, batches, _, _ = digits
    net = copy.deepcopy(dense)
    masks = prune(net, progress=False).masks
    curve = finetune(net, masks, iter(batches), steps=6, progress=False)  # a one-shot iterator
    assert isinstance(curve, FinetuneResult) and len(curve.losses) == 6
    assert repr(curve).startswith("FinetuneResult(steps=6") and "<table" in curve._repr_html_()
    assert json.loads(curve.to_json())["steps"] == 6


def test_finetune_cancel_restores(digits):
    dense, batches, _, _ = digits
    net = copy.deepcopy(dense)
    masks = prune(net, progress=False).masks
    saved = {k: v.clone() for k, v in net.state_dict().items()}

    class After:
        checks = 3

        def is_set(self):
            self.checks -= 1
            return self.checks < 0

    with pytest.raises(PruningCancelled, match="restored"):
        finetune(net, masks, batches, steps=10, progress=False, cancel=After())
    assert all(torch.equal(v, saved[k]) for k, v in net.state_dict().items())
    event = threading.Event()
    event.set()
    with pytest.raises(PruningCancelled):
        finetune(net, masks, batches, steps=10, progress=False, cancel=event)


def test_finetune_bad_input(digits):
    dense, batches, _, _ = digits
    with pytest.raises(ValueError, match="names no layer"):
        finetune(dense, {"nope": torch.ones(2, 2, dtype=torch.bool)}, batches, progress=False)
    with pytest.raises(ValueError, match="shape"):
        finetune(dense, {"0": torch.ones(2, 2, dtype=torch.bool)}, batches, progress=False)
    with pytest.raises(TypeError, match="masks must be"):
        finetune(dense, [1, 2], batches, progress=False)
    with pytest.raises(ValueError, match="empty"):
        finetune(dense, {}, [], steps=1, progress=False)
    with pytest.raises(TypeError, match=r"\(input, target\)"):
        finetune(dense, {}, [batches[0][0]], steps=1, progress=False)
