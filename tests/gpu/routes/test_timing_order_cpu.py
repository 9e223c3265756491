"""The order of interleaved timing rounds (CPU: CUDA events replaced by stand-ins)."""

from __future__ import annotations

import torch

from explorer.gpu.routes import timing
from explorer.gpu.routes.timing import interleaved_runs, round_order


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = float(len(CALLS))

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: _Event) -> float:
        return other.t - self.t


CALLS: list[str] = []


def test_each_round_starts_one_callable_further_on(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    CALLS.clear()
    fns = {name: (lambda name=name: CALLS.append(name)) for name in ("dense", "sparse", "twin")}
    runs = interleaved_runs(fns, rounds=4, iters=1, warmup=0)
    assert CALLS == [
        *("dense", "sparse", "twin"),
        *("sparse", "twin", "dense"),
        *("twin", "dense", "sparse"),
        *("dense", "sparse", "twin"),
    ]
    assert {name: len(times) for name, times in runs.items()} == dict.fromkeys(fns, 4)
    assert all(t == 1.0 for times in runs.values() for t in times)  # one call between events


def test_every_place_is_taken_equally_often_over_whole_cycles():
    names = ["a", "b", "c"]
    firsts = [round_order(names, r)[0] for r in range(9)]
    assert sorted(firsts) == sorted(names * 3)
    assert timing.round_order(names, 0) == names


def test_lead_in_calls_run_before_each_turns_start_event_and_are_not_timed(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    CALLS.clear()
    fns = {name: (lambda name=name: CALLS.append(name)) for name in ("dense", "sparse")}
    runs = interleaved_runs(fns, rounds=2, iters=2, warmup=0, lead_in=1)
    assert CALLS == [*["dense"] * 3, *["sparse"] * 3, *["sparse"] * 3, *["dense"] * 3]
    assert all(t == 1.0 for times in runs.values() for t in times)  # 2 timed calls / 2 iters


def test_rounds_within_a_budget_are_bounded_and_fewer_for_longer_calls():
    from explorer.gpu.routes.timing import rounds_within

    got = [rounds_within(2.0, ms, 10, 11, 61) for ms in (0.01, 1.0, 5.0, 10.0, 50.0)]
    assert got == [61, 61, 40, 20, 11]
    for bad in (0.0, -3.0, float("nan"), float("inf")):
        assert rounds_within(2.0, bad, 10, 11, 61) == 11


class _Graph:
    """A stand-in for a captured CUDA graph: a replay makes the captured calls again."""

    def __init__(self, fn, iters: int) -> None:
        self.fn, self.iters = fn, iters

    def replay(self) -> None:
        for _ in range(self.iters):
            self.fn()


def test_graph_replays_are_timed_per_call(monkeypatch):
    """graph_ms and cold_graph_ms divide a replay's events by the calls it holds; the cold one
    takes off the replays of its eviction reads alone (here: no time)."""
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    monkeypatch.setattr(timing, "_captured", _Graph)
    CALLS.clear()
    assert timing.graph_ms(lambda: CALLS.append("call"), iters=4, reps=3) == 1.0
    assert CALLS == ["call"] * 12
    CALLS.clear()
    cold = timing.cold_graph_ms(lambda: CALLS.append("call"), iters=5, reps=3, evict_bytes=64)
    assert cold == 1.0 and CALLS == ["call"] * 15
