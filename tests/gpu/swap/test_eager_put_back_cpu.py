"""Putting swapped modules back where only eager mode pays for them, and what folding undoes (CPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.gpu.swap import eager_put_back
from explorer.gpu.swap.block_fusion import SwapUnit, fuse_activations
from explorer.gpu.swap.eager_check import EagerCheck
from explorer.gpu.swap.eager_put_back import LOSS_BELOW, PutBack, put_back_unpaid
from explorer.gpu.swap.sparsify_report import SparsifyReport


class _Swapped(nn.Linear):
    """Stands for a swapped module: the same product, another class."""


def _model_and_units():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    units = []
    for place in ("0", "2"):
        original = model.get_submodule(place)
        new = _Swapped(8, 8)
        new.load_state_dict(original.state_dict())
        model._modules[place] = new
        units.append(SwapUnit(place, new, {place: original}, {place: original}))
    return model, units


def _failed(tokens, after=0.96):
    return EagerCheck(tokens, 1.0, 1.1, (1.0, 1.0 / after))


@pytest.mark.parametrize(
    ("mode", "eager", "graphs", "done"),
    [
        ("eager", {16: 1.03}, {}, True),  # nothing runs sparse in eager mode: always back
        ("auto", {4096: 0.96}, {4096: 1.01}, True),  # gains 1% in graphs, loses 4% eagerly
        ("auto", {16: 0.97}, {16: 1.10}, False),  # the graphs gain is the larger
        ("auto", {16: 0.97, 4096: 0.99}, {16: 1.01, 4096: 1.02}, True),  # largest against largest
        ("auto", {4096: 0.96}, {4096: None}, False),  # not captured: the gain is unknown
        ("auto", {4096: LOSS_BELOW}, {}, False),  # within the spread of equal models
        ("graphs", {4096: 0.90}, {4096: 1.00}, False),  # no eager check in that mode
    ],
)
def test_the_verdict_weighs_the_largest_graphs_gain_against_the_largest_eager_loss(
    mode, eager, graphs, done
):
    verdict = PutBack(mode, eager, graphs, 24)
    assert verdict.done is done
    text = verdict.why()
    assert ("original modules are back" in text) is done
    assert f"{min(eager.values()):.2f}x at" in text


def test_reprs_name_the_figures_and_the_verdict():
    assert repr(PutBack("auto", {4096: 0.96}, {4096: 1.01}, 24)) == (
        "PutBack(24 layers put back: eager 0.96x with every count dense, CUDA graphs 1.01x)"
    )
    assert "CUDA graphs not captured" in repr(PutBack("auto", {16: 0.9}, {16: None}, 2))
    assert "could not be captured" in PutBack("auto", {16: 0.9}, {16: None}, 2).why()


def test_a_model_dense_at_every_count_and_not_gaining_in_graphs_gets_its_modules_back():
    model, units = _model_and_units()
    originals = [u.restore[u.fqn] for u in units]
    report = SparsifyReport(mode="auto")
    report.eager_checks = [_failed(16), _failed(4096, 0.97)]
    seen = []

    def time_graphs(m, inputs, swap_dense, swap_sparse):
        swap_dense()
        seen.append((inputs, type(m[0]), type(m[2])))
        swap_sparse()
        seen.append((inputs, type(m[0]), type(m[2])))
        return 1.01

    inputs = {16: "x16", 4096: "x4096"}
    kept = put_back_unpaid(model, units, inputs, report.eager_checks, "auto", report, time_graphs)
    assert kept == []
    assert seen == [
        ("x16", nn.Linear, nn.Linear),
        ("x16", _Swapped, _Swapped),
        ("x4096", nn.Linear, nn.Linear),
        ("x4096", _Swapped, _Swapped),
    ]
    assert model[0] is originals[0] and model[2] is originals[1]
    assert report.put_back_check.done and report.put_back_check.graphs == {16: 1.01, 4096: 1.01}
    assert [fqn for fqn, _ in report.skipped] == ["0", "2"]
    assert all(why.startswith("put back: ") and "0.96x at 16" in why for _, why in report.skipped)
    assert "original modules back" in repr(report) and "0.96x" in repr(report)
    assert "original modules back" in report._repr_html_()


def test_a_graphs_gain_larger_than_the_eager_loss_keeps_the_swap_and_says_so():
    model, units = _model_and_units()
    report = SparsifyReport(mode="auto")
    checks = [_failed(16, 0.97)]
    kept = put_back_unpaid(model, units, {16: "x"}, checks, "auto", report, lambda *a: 1.10)
    assert kept == units and isinstance(model[0], _Swapped) and isinstance(model[2], _Swapped)
    assert not report.put_back_check.done and report.skipped == []
    assert any("kept for CUDA graphs" in n and "1.10x at 16" in n for n in report.notes)


def test_a_model_that_cannot_be_captured_keeps_its_swap_and_is_left_sparse():
    model, units = _model_and_units()
    report = SparsifyReport(mode="auto")

    def not_capturable(m, inputs, swap_dense, swap_sparse):
        swap_dense()
        raise RuntimeError("operation not permitted when stream is capturing")

    kept = put_back_unpaid(
        model, units, {16: "x"}, [_failed(16)], "auto", report, eager_put_back_timer(not_capturable)
    )
    assert kept == units and isinstance(model[0], _Swapped)
    assert any("could not be captured" in n for n in report.notes)


def eager_put_back_timer(inner):
    """``inner`` as the default timer runs it: the sparse modules back in place on any exit."""

    def timer(model, inputs, swap_dense, swap_sparse):
        try:
            return inner(model, inputs, swap_dense, swap_sparse)
        finally:
            swap_sparse()

    return timer


@pytest.mark.parametrize(
    "checks",
    [
        [_failed(16), EagerCheck(4096, 1.2, 1.0)],  # 4096 tokens runs its sparse routes
        [_failed(16)],  # 4096 tokens not checked
        [_failed(16), EagerCheck(4096, float("nan"), float("nan"), error="ValueError: long")],
    ],
)
def test_a_count_not_kept_dense_leaves_every_unit_and_times_nothing(checks):
    model, units = _model_and_units()
    report = SparsifyReport(mode="auto")

    def never(*args):
        raise AssertionError("timed")

    kept = put_back_unpaid(model, units, {16: "a", 4096: "b"}, checks, "auto", report, never)
    assert kept == units and report.put_back_check is None and report.notes == []


def test_eager_mode_puts_back_without_timing_graphs():
    model, units = _model_and_units()
    report = SparsifyReport(mode="eager")

    def never(*args):
        raise AssertionError("timed")

    kept = put_back_unpaid(model, units, {16: "x"}, [_failed(16, 1.01)], "eager", report, never)
    assert kept == [] and type(model[0]) is nn.Linear
    assert "no eager call runs a sparse route" in report.notes[-1]


def test_the_default_timer_restores_the_sparse_modules_when_capture_fails(monkeypatch):
    from explorer.gpu.swap import model_timing

    def refuse(model, inputs, mode, iters=5, reps=5):
        raise RuntimeError("not capturable")

    monkeypatch.setattr(model_timing, "time_forward", refuse)
    state = []
    with pytest.raises(RuntimeError):
        eager_put_back.graph_ratio(
            None, None, lambda: state.append("dense"), lambda: state.append("sparse")
        )
    assert state[-1] == "sparse"


def test_putting_back_a_layer_puts_back_the_activation_folded_into_it(monkeypatch):
    from explorer.gpu.modules import sparse_linear

    class FoldsActivations(nn.Linear):
        activation, backend, dtype = "none", "cusparselt", torch.float16

        def set_activation(self, kind):
            self.activation = kind

    monkeypatch.setattr(sparse_linear, "SparseLinear", FoldsActivations)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.GELU("tanh"))
    originals = [model[0], model[1], model[2], model[3]]
    units = []
    for place in ("0", "2"):
        new = FoldsActivations(4, 4)
        model._modules[place] = new
        units.append(SwapUnit(place, new, {place: originals[int(place)]}, {}))
    fuse_activations(model, units)
    assert [type(m) for m in model] == [FoldsActivations, nn.Identity] * 2
    assert (units[0].new.activation, units[1].new.activation) == ("relu", "gelu")
    units[1].put_back(model)
    assert model[2] is originals[2] and model[3] is originals[3] and type(model[1]) is nn.Identity
    units[0].put_back(model)
    assert list(model) == originals
