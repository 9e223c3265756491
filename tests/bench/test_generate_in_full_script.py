"""``benchmarks/generate_in_full.py`` on a CPU: its arguments reach the benchmark (a stand-in)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "generate_in_full.py"


@pytest.fixture
def script(monkeypatch):
    """The script's ``main`` with the benchmark replaced by a stand-in that records its call."""
    import explorer.bench as bench
    import explorer.bench.generate as generate

    seen = {}

    def stand_in(name, dtype, batches, new_tokens, log, layers, dynamic, static):
        seen.update(name=name, dtype=dtype, batches=batches, new=new_tokens, layers=layers)
        seen.update(dynamic=dynamic, static=static)
        model = generate.model_name(name, layers)
        return [
            dict(suite="generate", model=model, label=f"{model} generate batch {b} static",
                 batch=b, cache="static", dense_tok_s=100.0, explorer_speedup=1.2)
            for b in batches
        ]  # fmt: skip

    monkeypatch.setattr(generate, "bench_generate", stand_in)
    monkeypatch.setattr(bench, "environment", lambda: {"device": "stand-in"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return runpy.run_path(str(SCRIPT), run_name="generate_in_full")["main"], seen


def test_the_layers_and_batches_reach_the_benchmark_and_the_rows_name_the_layers(script, tmp_path):
    main, seen = script
    out = tmp_path / "rows.json"
    argv = ["--layers", "32", "--batches", "8", "--dtype", "float16", "--json", str(out)]
    assert main(argv) == 0
    assert seen == dict(
        name="llama-8b",
        dtype=torch.float16,
        batches=(8,),
        new=128,
        layers=32,
        dynamic=True,
        static=True,
    )
    written = json.loads(out.read_text())
    assert written["env"] == {"device": "stand-in"}
    assert written["command"] == "python benchmarks/generate_in_full.py " + " ".join(argv)
    assert [r["label"] for r in written["rows"]] == ["llama-8b, 32 layers generate batch 8 static"]


def test_caches_pick_what_is_timed(script):
    main, seen = script
    assert main(["--caches", "static"]) == 0
    assert (seen["dynamic"], seen["static"]) == (False, True)


def test_without_layers_the_spec_is_built_and_named_as_it_is(script):
    main, seen = script
    assert main(["--batches", "1,8"]) == 0
    assert seen["layers"] is None and seen["batches"] == (1, 8)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--layers", "0"], "--layers 0"),
        (["--batches", "1,x"], "--batches '1,x'"),
        (["--caches", "static,disk"], "--caches 'static,disk'"),
        (["--caches", ","], "--caches ','"),
    ],
)
def test_bad_arguments_are_named_with_the_fix(script, capsys, argv, named):
    main, _ = script
    with pytest.raises(SystemExit):
        main(argv)
    assert named in capsys.readouterr().err
