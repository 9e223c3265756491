"""The whole-model eager check's logic (CPU: the timer is injected)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.gpu.routes.layer_decisions import eager_verdict
from explorer.gpu.swap.eager_check import EagerCheck, check_eager, synthetic_inputs


class _Layer:
    def __init__(self):
        self.told = []

    def keep_dense_at(self, tokens, keep=True):
        self.told.append((tokens, keep))


def _model():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    originals = {"0": model[0], "2": model[2]}
    model[0], model[2] = nn.Identity(), nn.Identity()  # stand-ins for the sparse modules
    return model, originals


@pytest.mark.parametrize(
    ("verdicts", "tokens", "expected"),
    [
        ({16: True}, 16, True),
        ({16: True}, 1, True),  # a decode size takes the nearest decode verdict
        ({16: True}, 4096, False),  # never a prefill size
        ({16: True, 1: False}, 2, False),
        ({16: True, 1: False}, 8, True),
        ({4: False, 16: True}, 8, False),  # a tie on the log scale: the smaller count
        ({4096: True}, 16, False),
        ({}, 16, False),
    ],
)
def test_eager_verdict_at_and_near_checked_counts(verdicts, tokens, expected):
    assert eager_verdict(verdicts, tokens) is expected


def test_a_slower_count_is_kept_dense_and_the_model_left_sparse():
    model, originals = _model()
    sparse_now = (model[0], model[2])
    seen = []
    times = iter([(6.0, 6.6), (6.1, 6.05), (12.0, 10.9)])

    def time_pair(m, inputs, swap_dense, swap_sparse):
        swap_dense()
        seen.append(type(m[0]).__name__)
        swap_sparse()
        return next(times)

    layers = [_Layer(), _Layer()]
    checks = check_eager(model, originals, {4096: "x", 16: "y"}, layers, time_pair)
    assert seen == ["Linear", "Linear", "Linear"]  # the dense runs ran the original modules
    assert (model[0], model[2]) == sparse_now  # and the sparse ones are back
    assert [c.tokens for c in checks] == [16, 4096]
    assert not checks[0].kept and checks[1].kept
    assert checks[0].speedup == pytest.approx(6.1 / 6.05)
    assert layers[0].told == layers[1].told == [(16, True), (4096, False)]
    assert repr(checks[0]) == "EagerCheck(16 tokens: sparse routes 0.91x, kept dense: 1.01x)"


def test_synthetic_inputs_follow_the_vocabulary_and_the_regime():
    class Config:
        vocab_size = 50

    model = nn.Linear(2, 2)
    model.config = Config()
    small, large = synthetic_inputs(model, 16, "cpu"), synthetic_inputs(model, 4096, "cpu")
    assert small["input_ids"].shape == (16, 1) and large["input_ids"].shape == (1, 4096)
    assert int(large["input_ids"].max()) < 50
    assert torch.equal(synthetic_inputs(model, 16, "cpu")["input_ids"], small["input_ids"])
    Config.max_position_embeddings = 512  # BERT: 4096 tokens as 8 sequences of 512
    assert synthetic_inputs(model, 4096, "cpu")["input_ids"].shape == (8, 512)
    assert synthetic_inputs(model, 4099, "cpu") is None  # 4099 = 4099 x 1 only: no fit
    Config.vocab_size = None
    assert synthetic_inputs(model, 16, "cpu") is None


def test_an_eager_check_reads_well():
    assert "kept" in repr(EagerCheck(4096, 12.0, 10.9))


def test_a_model_that_fails_at_a_count_keeps_its_routes_there_and_stays_sparse():
    model, originals = _model()
    sparse_now = (model[0], model[2])

    def time_pair(m, inputs, swap_dense, swap_sparse):
        swap_dense()
        if inputs == "too long":
            raise IndexError("index out of range in self")
        swap_sparse()
        return 5.0, 4.0

    layers = [_Layer()]
    checks = check_eager(model, originals, {16: "ok", 8192: "too long"}, layers, time_pair)
    assert (model[0], model[2]) == sparse_now
    assert checks[0].kept and checks[1].error == "IndexError: index out of range in self"
    assert "not timed" in repr(checks[1])
    assert layers[0].told == [(16, False)]  # nothing said about the count never timed


def test_the_default_timer_swaps_each_side_in_before_its_rounds(monkeypatch):
    """The real pairing (interleaved CUDA-event rounds), with a clock the forwards advance:
    the dense modules cost 2 units a call, the stand-ins 1, so sparse is 2x and kept."""
    clock = [0.0]

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = clock[0]

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return end.t - self.t

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    model, originals = _model()

    def forward(x):
        clock[0] += 2.0 if isinstance(model[0], nn.Linear) else 1.0
        return x

    model.forward = forward
    checks = check_eager(model, originals, {4096: torch.zeros(1)}, [_Layer()])
    assert checks[0].kept and checks[0].dense_ms == 2.0 and checks[0].sparse_ms == 1.0
    assert isinstance(model[0], nn.Identity)  # left sparsified


def test_short_forwards_get_more_rounds_within_bounds():
    from explorer.gpu.swap.eager_check import MAX_ROUNDS, MIN_ROUNDS, rounds_for

    times = [0.01, 0.5, 2.0, 5.0, 20.0, 80.0, 1e4]
    rounds = [rounds_for(ms) for ms in times]
    assert rounds == sorted(rounds, reverse=True)  # the longer the forward, the fewer rounds
    assert rounds[0] == MAX_ROUNDS and rounds[-1] == MIN_ROUNDS
    assert rounds_for(0.0) == rounds_for(-1.0) == MIN_ROUNDS
