"""The models benchmark's compiled columns, on a CPU: compiling and timing are stand-ins."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import explorer.bench.compiled_pairs as compiled_pairs
import explorer.gpu as gpu
from explorer.bench.compiled_pairs import SPEEDUP_KEYS, TIME_KEYS, compiled_columns

#: Each stand-in model's time per call, by its name.
TIMES = {"dense": 2.0, "sparse": 1.6, "control": 2.0, "decode": 1.0, "broken": 1.0}


class Named(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


@pytest.fixture
def stand_ins(monkeypatch):
    """Record resets, compiles, modes and the pairs timed; time each model by its name."""
    seen = {"events": [], "pairs": []}

    def compile_(model, mode=None):
        if model.name == "broken":
            raise RuntimeError("cannot trace this")
        seen["events"].append(("compile", model.name, mode))
        return model

    def timed(fns, rounds, iters, lead_in):
        seen["pairs"].append((sorted(fns), lead_in))
        return {key: [TIMES[fn.__self__.name]] * rounds for key, fn in fns.items()}

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: seen["events"].append(("reset",)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(compiled_pairs, "interleaved_runs", timed)
    monkeypatch.setattr(gpu, "set_mode", lambda m, mode: seen["events"].append((mode, m.name)))
    return seen


class Call:
    """``call(model)``: a forward bound to the model, so the timing stand-in can name it."""

    def __init__(self, model: Named) -> None:
        self.__self__ = model

    def __call__(self) -> None:
        return None


def _models(**extra):
    models = {name: Named(name) for name in ("dense", "sparse", "control", "decode")}
    models.update(extra)
    return models


def test_each_variant_is_timed_in_its_own_pair_with_dense_after_a_reset(stand_ins):
    row: dict = {}
    compiled_columns(row, Call, _models(), rounds=5)
    assert len(stand_ins["pairs"]) == 6  # three variants, two compile modes
    for how in ("default", "reduce-overhead"):
        keys = TIME_KEYS[how]
        for variant in ("sparse", "control", "decode"):
            assert (sorted([keys["dense"], keys[variant]]), 1) in stand_ins["pairs"]
    resets = [i for i, e in enumerate(stand_ins["events"]) if e == ("reset",)]
    assert len(resets) == 7  # one before each pair, one at the end
    compiles = [e for e in stand_ins["events"] if e[0] == "compile"]
    assert [e[1] for e in compiles].count("dense") == 6  # dense recompiled in every pair


def test_speedups_are_over_dense_in_the_same_pair(stand_ins):
    row: dict = {}
    compiled_columns(row, Call, _models(), rounds=3)
    assert row["speedup_compiled"] == pytest.approx(2.0 / 1.6)
    assert row["decode_speedup_default"] == pytest.approx(2.0)
    assert row["control_speedup_compiled"] == pytest.approx(1.0)
    assert row["dense_default_ms"] == 2.0 and row["explorer_compiled_ms"] == 1.6
    assert set(SPEEDUP_KEYS.values()) <= set(row)
    assert row["compile_mode"] == "reduce-overhead"


def test_only_cuda_graphs_sets_the_variants_to_graphs_mode_and_back(stand_ins):
    compiled_columns({}, Call, _models(), rounds=1)
    modes = [e for e in stand_ins["events"] if e[0] in ("graphs", "auto")]
    assert ("graphs", "dense") not in modes
    for name in ("sparse", "control", "decode"):
        assert modes.count(("graphs", name)) == 1 and modes.count(("auto", name)) == 1


def test_a_missing_variant_is_skipped_and_a_failing_one_reported(stand_ins):
    row: dict = {}
    compiled_columns(row, Call, _models(decode=None, control=Named("broken")), rounds=1)
    assert "decode_speedup_compiled" not in row and "decode_compiled_ms" not in row
    assert "cannot trace this" in row["control_compiled_error"]
    assert "control_speedup_default" not in row
    assert row["speedup_default"] == pytest.approx(1.25)  # the others still ran


def test_without_rounds_a_pair_gets_what_the_budget_holds_for_its_two_forwards(
    stand_ins, monkeypatch
):
    rounds_seen = []

    def timed(fns, rounds, iters, lead_in):
        rounds_seen.append(rounds)
        return {key: [TIMES[fn.__self__.name]] * rounds for key, fn in fns.items()}

    monkeypatch.setattr(compiled_pairs, "interleaved_runs", timed)
    monkeypatch.setattr(compiled_pairs, "call_s", lambda fn: 0.5e-3)  # a 0.5 ms forward
    compiled_columns({}, Call, _models())
    # 2 s over 4 calls each of two 0.5 ms forwards holds 500 rounds: the most
    assert rounds_seen == [compiled_pairs.ROUNDS[1]] * 6
    rounds_seen.clear()
    monkeypatch.setattr(compiled_pairs, "call_s", lambda fn: 20e-3)  # a 20 ms prefill
    compiled_columns({}, Call, _models())
    assert rounds_seen == [12] * 6  # int(2000 / (8 * 20))
    rounds_seen.clear()
    monkeypatch.setattr(compiled_pairs, "call_s", lambda fn: 1.0)
    compiled_columns({}, Call, _models())
    assert rounds_seen == [compiled_pairs.ROUNDS[0]] * 6


def test_a_slow_variant_sizes_the_rounds_as_much_as_dense_does(monkeypatch):
    """A variant ten times slower than dense (torch's own 2:4 path) must not take ten times the
    budget: the rounds are sized by every call of a round."""
    dense, slow = Call(Named("dense")), Call(Named("slow"))
    times = {"dense": 4e-3, "slow": 40e-3}
    monkeypatch.setattr(compiled_pairs, "call_s", lambda fn: times[fn.__self__.name])
    alone = compiled_pairs.bench_rounds([dense, dense], 4)
    beside_slow = compiled_pairs.bench_rounds([dense, slow], 4)
    assert alone == 61  # int(2000 / (4 * 8)) = 62, bounded
    assert beside_slow == 11  # int(2000 / (4 * 44)) = 11
    round_s = 4 * (times["dense"] + times["slow"])
    assert beside_slow * round_s <= compiled_pairs.TIMING_BUDGET_S * 1.01
    times["slow"] = 10.0  # far slower: the fewest rounds, never zero
    assert compiled_pairs.bench_rounds([dense, slow], 4) == compiled_pairs.ROUNDS[0]


def test_a_variant_far_slower_than_dense_is_left_out_with_its_time(monkeypatch):
    dense, slow = Call(Named("dense")), Call(Named("slow"))
    times = {"dense": 4e-3, "slow": 40e-3}
    monkeypatch.setattr(compiled_pairs, "call_s", lambda fn: times[fn.__self__.name])
    assert compiled_pairs.too_slow_to_time(slow, dense) is None  # 10 times: still timed
    times["slow"] = 4.0  # 1000 times dense's
    why = compiled_pairs.too_slow_to_time(slow, dense)
    assert "4000 ms" in why and "1000 times" in why and "4.00 ms" in why
    assert compiled_pairs.too_slow_to_time(slow, dense, slowest=2000) is None
    times["slow"] = compiled_pairs.SLOWEST_TIMED * times["dense"]  # at the bound: timed
    assert compiled_pairs.too_slow_to_time(slow, dense) is None
