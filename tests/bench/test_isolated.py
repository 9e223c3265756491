"""One model per process: the order of processes, the pairing, failures, the workloads, the CLI."""

from __future__ import annotations

import json

import pytest

import explorer.bench.isolated as iso

MS = {"dense": 10.0, "control": 10.0, "decode": 8.0}


def fake_run(seen: list, fail: set | None = None, tokens: dict | None = None):
    """A stand-in for a process: each model's time, its jobs recorded, some failing."""
    calls = iter(range(100))

    def run(job):
        i = next(calls)
        seen.append(job)
        if fail and i in fail:
            return {"error": "CUDA out of memory"}
        return {
            "ms": [MS[job["variant"]]] * job["rounds"],
            "tokens": (tokens or {}).get(job["variant"], [[1, 2, 3, 4]]),
        }

    return run


def test_each_repeat_runs_dense_and_the_variant_once_in_alternating_order():
    order = iso.process_order("control", 4)
    assert [order[2 * r : 2 * r + 2] for r in range(4)] == [
        ["dense", "control"],
        ["control", "dense"],
        ["dense", "control"],
        ["control", "dense"],
    ]


def test_pairs_give_one_ratio_per_repeat_and_the_job_reaches_each_process():
    seen: list = []
    job = {"model": "llama-8b", "batch": 8, "cache": "static", "rounds": 3}
    res = iso.isolated_pairs(job, "decode", 3, run=fake_run(seen), log=lambda line: None)
    assert res["ratios"] == [1.25, 1.25, 1.25] and res["speedup"] == 1.25
    assert res["dense_ms"] == [10.0] * 3 and res["variant_ms"] == [8.0] * 3
    assert [j["variant"] for j in seen] == iso.process_order("decode", 3)
    assert all(j["batch"] == 8 and j["cache"] == "static" for j in seen)
    assert res["agreement"] == 1.0 and res["errors"] == []


def test_a_failed_process_drops_its_repeat_only_and_is_reported():
    seen: list = []
    lines: list = []
    res = iso.isolated_pairs(
        {"rounds": 2}, "decode", 3, run=fake_run(seen, fail={3}), log=lines.append
    )
    assert len(res["ratios"]) == 2  # the second repeat lost its dense process
    assert res["errors"] == ["dense: CUDA out of memory"]
    assert any("failed" in line for line in lines)


def test_every_process_failing_gives_no_speedup():
    res = iso.isolated_pairs(
        {"rounds": 1}, "control", 2, run=fake_run([], fail=set(range(4))), log=lambda line: None
    )
    assert res["speedup"] is None and res["ratios"] == [] and len(res["errors"]) == 4


def test_agreement_is_the_share_of_equal_new_tokens():
    tokens = {"dense": [[1, 2, 3, 4]], "decode": [[1, 2, 0, 0]]}
    res = iso.isolated_pairs(
        {"rounds": 1}, "decode", 1, run=fake_run([], tokens=tokens), log=lambda line: None
    )
    assert res["agreement"] == 0.5


@pytest.mark.parametrize("variant", ["dense", "sparse"])
def test_a_variant_that_is_not_one_to_compare_is_refused(variant):
    with pytest.raises(ValueError, match="expected one of"):
        iso.isolated_pairs({}, variant, 1, run=fake_run([]))


def test_no_repeat_is_refused():
    with pytest.raises(ValueError, match="at least one pair"):
        iso.isolated_pairs({}, "decode", 0, run=fake_run([]))


def test_a_spawned_process_reports_its_failure_instead_of_raising():
    # a real child process (spawn start): the model name is unknown, so it fails at once
    result = iso._spawned({"model": "no-such-model", "variant": "dense"})
    assert "error" in result and "no-such-model" in result["error"]


def test_the_command_line_times_each_variant_and_writes_json(tmp_path, monkeypatch, capsys):
    asked = []

    def pairs(job, variant, repeats):
        asked.append((variant, repeats, job["batch"], job["cache"]))
        return {
            "speedup": 1.1,
            "ratios": [1.1],
            "dense_ms": [100.0],
            "variant_ms": [90.9],
            "agreement": 1.0,
            "errors": [],
        }

    monkeypatch.setattr(iso, "isolated_pairs", pairs)
    out = tmp_path / "iso.json"
    iso.main(
        [
            "--variants",
            "control,decode",
            "--repeats",
            "2",
            "--batch",
            "1",
            "--cache",
            "dynamic",
            "--json",
            str(out),
        ]
    )
    assert asked == [("control", 2, 1, "dynamic"), ("decode", 2, 1, "dynamic")]
    assert "decode 1.10x over dense" in capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["job"]["batch"] == 1 and set(saved["results"]) == {"control", "decode"}


def test_the_command_line_says_why_a_variant_was_not_measured(monkeypatch, capsys):
    def pairs(job, variant, repeats):
        return {
            "speedup": None,
            "ratios": [],
            "dense_ms": [],
            "variant_ms": [],
            "agreement": None,
            "errors": ["dense: no CUDA GPU"],
        }

    monkeypatch.setattr(iso, "isolated_pairs", pairs)
    iso.main(["--variants", "decode"])
    assert "decode not measured; dense: no CUDA GPU" in capsys.readouterr().out


def test_the_command_line_times_a_compiled_step_with_its_own_fields(monkeypatch, capsys):
    asked = []

    def pairs(job, variant, repeats):
        asked.append(job)
        return {
            "speedup": 0.99,
            "ratios": [0.99],
            "dense_ms": [2.5],
            "variant_ms": [2.52],
            "agreement": 1.0,
            "errors": [],
        }

    monkeypatch.setattr(iso, "isolated_pairs", pairs)
    iso.main(["--workload", "step", "--model", "phi3-mini", "--batch", "1", "--seq", "1",
              "--compile", "default", "--variants", "explorer"])  # fmt: skip
    (job,) = asked
    assert job["workload"] == "step" and job["compile"] == "default" and job["seq"] == 1
    assert "cache" not in job and "new_tokens" not in job  # generate's fields stay out
    out = capsys.readouterr().out
    assert "phi3-mini step 1x1, default" in out and "2.500 ms a step" in out


def test_an_unknown_workload_is_a_reported_failure_not_a_crash():
    result = iso.time_in_process({"workload": "train", "variant": "dense"})
    assert "error" in result and "expected one of ('generate', 'step')" in result["error"]


def test_an_unknown_step_mode_is_refused_on_the_command_line():
    with pytest.raises(SystemExit):
        iso.main(["--workload", "step", "--compile", "max-speed"])
