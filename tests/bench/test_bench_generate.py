"""The generate suite's timing order and its static-cache pairs, on a CPU (stand-in models)."""

from __future__ import annotations

import pytest
import torch

import explorer.bench.generate as generate
import explorer.gpu as gpu
from explorer.bench.generate import interleaved_generate, static_in_pairs

#: Each stand-in model's milliseconds per generate call.
MS = {"dense": 10.0, "control": 10.0, "explorer": 8.0, "decode": 5.0}


class Model:
    """A stand-in with ``generate``: records its calls, returns its name's code as ids."""

    def __init__(self, name: str, log: list, fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    def generate(self, ids, **kw):
        if self.fail:
            raise RuntimeError("the step cannot be captured")
        self.log.append(self.name)
        return torch.zeros(ids.shape[0], ids.shape[1] + kw["max_new_tokens"], dtype=torch.long)


@pytest.fixture
def log(monkeypatch):
    calls: list = []

    def one(model, ids, kw):
        return MS[model.name], model.generate(ids, **kw)

    monkeypatch.setattr(generate, "timed_generate", one)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: calls.append("reset"))
    monkeypatch.setattr(gpu, "set_mode", lambda m, mode: calls.append(f"{m.name}:{mode}"))
    return calls


def test_each_round_starts_one_model_further_on(log):
    names = ("dense", "control", "explorer")
    models = {n: Model(n, log) for n in names}
    out = interleaved_generate(models, torch.zeros(1, 4, dtype=torch.long), 2, rounds=3)
    timed = [c for c in log if c in names][3:]  # after one warm-up call each
    assert timed == [*names, "control", "explorer", "dense", "explorer", "dense", "control"]
    assert out["explorer"][0] == 8.0 and out["explorer"][1] == [8.0] * 3
    assert out["dense"][2].shape == (1, 2)  # the new tokens only


def test_static_cache_times_each_variant_beside_dense_alone(log):
    models = {n: Model(n, log) for n in MS}
    timed, dense_rounds = static_in_pairs(
        models, torch.zeros(1, 4, dtype=torch.long), 2, graphs=("explorer", "decode"), rounds=2
    )
    assert set(timed) == set(MS) and set(dense_rounds) == {"control", "explorer", "decode"}
    assert all(rounds == [10.0, 10.0] for rounds in dense_rounds.values())
    resets = [i for i, c in enumerate(log) if c == "reset"]
    assert len(resets) == 4  # before each of the three pairs, and after
    between = log[resets[1] + 1 : resets[2]]  # the explorer pair
    assert between[0] == "explorer:graphs" and between[-1] == "explorer:auto"
    assert set(between[1:-1]) == {"dense", "explorer"}  # only the pair ran
    assert "control:graphs" not in log  # the dense copy is not a sparse model


def test_a_failing_pair_is_reported_and_the_others_still_run(log):
    models = {n: Model(n, log, fail=(n == "decode")) for n in MS}
    timed, dense_rounds = static_in_pairs(
        models, torch.zeros(1, 4, dtype=torch.long), 2, ("decode",), 1
    )
    assert "decode" not in timed and "captured" in dense_rounds["decode"]
    assert "decode:auto" in log  # set back even though it failed
    assert timed["explorer"][0] == 8.0


def test_no_cache_to_time_is_refused_with_the_fix():
    from explorer.bench.generate import bench_generate

    with pytest.raises(ValueError, match="leave no cache to time"):
        bench_generate(dynamic=False, static=False)
