"""The models benchmark's shared whole-model timing columns, on a CPU (no model is built)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import explorer.bench.model_speed as model_speed
from explorer.bench.models import _model_speed_columns
from explorer.gpu.swap.model_timing import ModelSpeed


def _row():
    return {"n": 32, "batch": 2, "seq": 16}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer without a GPU")
def test_without_a_gpu_the_column_says_why():
    row = _row()
    _model_speed_columns(
        row, nn.Linear(8, 8), torch.zeros(2, 16), ("graphs",), torch.float16, (32,)
    )
    assert "model_speed_graphs" not in row
    assert "no CUDA GPU" in row["model_speed_graphs_error"]


def test_each_mode_gets_its_speedup_from_the_shared_timing(monkeypatch):
    asked = []

    def fake(model, example, tokens, mode, *, dtype, filter_fn, sparsify_for):
        asked.append((tuple(example["input_ids"].shape), tokens, mode, dtype, sparsify_for))
        speed = ModelSpeed(tokens[0], mode, 10.0, 8.0, 0.5)
        return model_speed.ModelSpeedResult(mode, "bfloat16", tokens, speeds=(speed,))

    monkeypatch.setattr(model_speed, "measure_model_speed", fake)
    row = _row()
    ids = torch.zeros(2, 16, dtype=torch.long)
    _model_speed_columns(row, nn.Linear(8, 8), ids, ("eager", "graphs"), torch.bfloat16, (4096, 32))
    assert row["model_speed_eager"] == pytest.approx(1.25)
    assert row["model_speed_graphs"] == pytest.approx(1.25)
    # the copy is sparsified for every count the benchmark serves, as its own sparse model is
    assert asked == [((2, 16), (32,), m, torch.bfloat16, (4096, 32)) for m in ("eager", "graphs")]


def test_a_failing_mode_is_reported_and_the_others_still_run(monkeypatch):
    def fake(model, example, tokens, mode, **kw):
        if mode == "compile":
            raise RuntimeError("compile failed")
        speed = ModelSpeed(tokens[0], mode, 9.0, 9.0)
        return model_speed.ModelSpeedResult(mode, "float16", tokens, speeds=(speed,))

    monkeypatch.setattr(model_speed, "measure_model_speed", fake)
    row = _row()
    _model_speed_columns(row, nn.Linear(8, 8), torch.zeros(2, 16), ("compile", "eager"), "x", (32,))
    assert row["model_speed_compile_error"] == "RuntimeError: compile failed"
    assert row["model_speed_eager"] == pytest.approx(1.0)


def test_run_bench_hands_the_modes_to_every_whole_model_job(monkeypatch):
    import explorer.bench.models as models
    from explorer.bench import run_bench

    seen = []

    def fake_bench(name, dtype, **kw):
        seen.append((name, kw["model_speed_modes"]))
        return [{"suite": "models", "model": name, "status": "ok", "model_speed_graphs": 1.2}]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(models, "bench_whole_model", fake_bench)
    rows = run_bench(
        suites=["models"],
        models=["llama-1b"],
        dtypes=["bfloat16"],
        progress=False,
        model_speed_modes=["graphs"],
    )
    assert seen == [("llama-1b", ("graphs",))]
    assert rows[0]["model_speed_graphs"] == 1.2


def test_run_bench_refuses_an_unknown_mode_before_timing(monkeypatch):
    from explorer.bench import run_bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match="speed mode 'fast' unknown; expected one of eager"):
        run_bench(suites=["models"], progress=False, model_speed_modes=["fast"])


def test_the_command_names_a_bad_mode_and_the_choices(capsys):
    from explorer.bench import main

    with pytest.raises(SystemExit) as stop:
        main(["--suites", "models", "--model-speed-modes", "graphs,fast"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--model-speed-modes: speed mode 'fast' unknown" in err
    assert "expected one of eager, compile, graphs" in err


def test_the_log_counts_the_layers_on_a_sparse_route_at_each_count_and_clock():
    from explorer.bench.models import say_checks
    from explorer.gpu.swap.sparsify_report import LayerTiming, SparsifyReport

    report = SparsifyReport()
    report.timings = [
        LayerTiming("mlp", (64, 64), 16, 1.0, 1.2, "dense", "wall"),
        LayerTiming("mlp", (64, 64), 16, 1.0, 0.9, "sparse cc default", "gpu"),
        LayerTiming("mlp", (64, 64), 4096, 9.0, 7.0, "sparse cc default", "wall"),
        LayerTiming("qkv", (64, 64), 4096, 9.0, 9.5, "dense", "wall"),
    ]
    lines = []
    say_checks(lines.append, "m", report)
    assert lines == [
        "m: layers on a sparse route, of those timed: "
        "4096 tokens wall 1/2, 16 tokens wall 0/1, 16 tokens gpu 1/1"
    ]
