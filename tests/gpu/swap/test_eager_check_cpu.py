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


def _timer(pairs, log):
    times = iter(pairs)

    def time_pair(m, inputs, swap_dense, swap_sparse):
        swap_dense()
        swap_sparse()
        log.append(inputs)
        return next(times)

    return time_pair


@pytest.mark.parametrize(
    ("gain", "pairs", "kept", "timed"),
    [
        # the layers gain 1.15x, the first pair reads 0.99x, the second 1.11x: kept (1.05x)
        (1.15, [(12.0, 12.1), (12.0, 10.8)], True, 2),
        # a second pair that fails too: dense, and a third pair times the model as it now runs
        (1.15, [(12.0, 12.1), (12.0, 12.2), (12.0, 11.9)], False, 3),
        # a clear second pass cannot lift a clearly slow first one: sqrt(0.90 * 1.10) < 1.02
        (1.15, [(12.0, 13.3), (12.0, 10.9), (12.0, 11.9)], False, 3),
        # the layers promise little: one failing pair is the verdict
        (1.03, [(12.0, 12.1), (12.0, 11.9)], False, 2),
        # a first pair that passes needs no second one
        (1.15, [(12.0, 10.8)], True, 1),
    ],
)
def test_a_failing_pair_is_confirmed_where_the_layers_say_a_clear_gain(gain, pairs, kept, timed):
    model, originals = _model()
    log, layers = [], [_Layer()]
    gains = {4096: gain}
    checks = check_eager(model, originals, {4096: "x"}, layers, _timer(pairs, log), gains)
    check = checks[0]
    assert len(log) == timed and check.kept is kept
    assert layers[0].told == [(4096, not kept)]
    if timed > 1 and gain >= 1.05:
        d1, s1 = pairs[0]
        d2, s2 = pairs[1]
        assert check.second == pairs[1]
        assert check.routes_speedup == pytest.approx(((d1 / s1) * (d2 / s2)) ** 0.5)
        assert "on a second pair" in repr(check)
    else:
        assert check.second is None and "second pair" not in repr(check)
    if kept:
        assert check.speedup == pytest.approx(check.routes_speedup)
    else:
        assert check.speedup == pytest.approx(pairs[timed - 1][0] / pairs[timed - 1][1])


def test_a_count_without_a_layer_estimate_gets_one_pair():
    model, originals = _model()
    log = []
    timer = _timer([(6.0, 6.6), (6.1, 6.05)], log)
    checks = check_eager(model, originals, {16: "y"}, [_Layer()], timer, {4096: 1.3})
    assert len(log) == 2 and checks[0].second is None and not checks[0].kept


def test_the_whole_model_check_passes_the_layers_wall_estimate(monkeypatch):
    """``check_whole_model`` hands the eager check the report's wall-clock layer gains."""
    from types import SimpleNamespace

    from explorer.gpu.swap import eager_check, whole_model
    from explorer.gpu.swap.sparsify_report import LayerTiming, SparsifyReport

    seen = {}

    def fake_check(model, originals, inputs, layers, time_pair=None, layer_gains=None):
        seen.update(layer_gains)
        return [EagerCheck(t, 1.0, 0.9) for t in sorted(inputs)]

    monkeypatch.setattr(eager_check, "check_eager", fake_check)
    report = SparsifyReport()
    report.timings = [
        LayerTiming("a", (8, 8), 4096, 2.0, 1.6, "cusparselt", "wall"),
        LayerTiming("b", (8, 8), 4096, 2.0, 1.6, "cusparselt", "wall"),
        LayerTiming("a", (8, 8), 4096, 2.0, 1.0, "cusparselt", "gpu"),  # another clock
        LayerTiming("a", (8, 8), 16, 1.0, 1.1, "dense", "wall"),
    ]
    model = nn.Linear(8, 8)
    unit = SimpleNamespace(restore={}, new=nn.Identity())
    examples = [torch.zeros(4096, 8), torch.zeros(16, 8)]
    kept = whole_model.check_whole_model(model, [unit], (16, 4096), examples, report)
    assert kept == [unit]
    assert seen == {4096: pytest.approx(1.25), 16: pytest.approx(1.0)}
