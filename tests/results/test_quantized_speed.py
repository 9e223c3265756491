"""Quantized whole-model speed rows: the benchmark's JSON to store rows, and reading them back."""

from __future__ import annotations

import os

import pytest
import torch

from explorer.results.quantized_speed import (
    benchmark_keys,
    benchmark_provenance,
    quantized_speed_row,
    quantized_speeds,
    rows_from_benchmark,
)
from explorer.results.speedup import recorded_model_speed
from explorer.results.store import ResultStore

#: One row as benchmarks/quantized_models.py writes it (--dtype float8_e4m3fn, 4x1024), by hand.
FP8_ROW = {
    "model": "llama-8b",
    "dtype": "float8_e4m3fn",
    "batch": 4,
    "seq": 1024,
    "fp8 dense relerr": 0.021,
    "2:4 fp8 relerr": 0.022,
    "eager bf16 dense ms": 20.0,
    "eager fp8 dense ms": 16.9,
    "eager 2:4 fp8 ms": 16.1,
    "eager fp8 dense over bf16": 1.18,
    "eager 2:4 fp8 over bf16": 1.24,
    "eager 2:4 fp8 over fp8 dense": 1.05,
    "graphs bf16 dense ms": 19.0,
    "graphs fp8 dense ms": 15.3,
    "graphs 2:4 fp8 ms": 15.2,
    "graphs fp8 dense over bf16": 1.24,
    "graphs 2:4 fp8 over bf16": 1.25,
    "graphs 2:4 fp8 over fp8 dense": 1.00,
}
ENV = {
    "torch": "2.11.0+cu130",
    "device": "NVIDIA H100 80GB HBM3",
    "capability": "9.0",
    "cuda": "13.0",
    "cusparselt": 800,  # environment() writes torch's integer
    "nvmath-python": None,
    "time": "2026-11-25T03:36:00+00:00",
    "command": "python benchmarks/quantized_models.py --dtype float8_e4m3fn",
    "commit": "abc1234",
}


def test_each_json_row_gives_a_dense_and_a_sparse_row_per_mode():
    rows = rows_from_benchmark({"env": ENV, "rows": [FP8_ROW]})
    got = [
        (r["config"]["pattern"], r["config"]["mode"], r["metrics"]["speedup_over_bf16"])
        for r in rows
    ]
    assert got == [
        ("dense", "eager", 1.18),
        ("2:4", "eager", 1.24),
        ("dense", "graphs", 1.24),
        ("2:4", "graphs", 1.25),
    ]
    sparse = rows[1]
    assert sparse["kind"] == "bench-models" and sparse["status"] == "ok"
    assert sparse["config"] == {
        "suite": "models",
        "model": "llama-8b",
        "label": "llama-8b 4x1024",
        "batch": 4,
        "seq": 1024,
        "tokens": 4096,
        "dtype": "bfloat16",
        "precision": "float8_e4m3fn",
        "pattern": "2:4",
        "mode": "eager",
    }
    assert sparse["metrics"] == {
        "bf16_dense_ms": 20.0,
        "ms": 16.1,
        "same_dense_ms": 16.9,
        "speedup_over_bf16": 1.24,
        "speedup_over_same": 1.05,
        "relerr": 0.022,
    }
    # a dense row is the same-precision baseline itself: no speed-up over it is recorded
    assert "speedup_over_same" not in rows[0]["metrics"] and rows[0]["metrics"]["ms"] == 16.9
    # the list of rows alone converts the same
    assert rows_from_benchmark([FP8_ROW]) == rows


def test_an_int4_row_uses_the_scripts_int4_keys():
    row = {"model": "llama-8b", "dtype": "int4", "batch": 16, "seq": 1}
    row.update(
        {"graphs bf16 dense ms": 2.0, "graphs int4 dense ms": 1.6, "graphs 2:4 int4 ms": 1.0}
    )
    row.update({"graphs int4 dense over bf16": 1.25, "graphs 2:4 int4 over bf16": 1.24})
    row["graphs 2:4 int4 over int4 dense"] = 1.54
    rows = rows_from_benchmark([row])
    assert [(r["config"]["precision"], r["config"]["tokens"]) for r in rows] == [("int4", 16)] * 2
    assert rows[1]["metrics"]["speedup_over_same"] == 1.54


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"dtype": "fp4"}, "precision 'fp4'"),
        ({"eager 2:4 fp8 over fp8 dense": None}, "speedup_over_same"),
        ({"graphs fp8 dense ms": -1.0}, r"ms \[-1.0\]"),
    ],
)
def test_a_bad_json_row_names_the_row_and_the_value(change, match):
    with pytest.raises(ValueError, match=match):
        rows_from_benchmark([{**FP8_ROW, **change}])


def test_a_json_row_without_a_key_names_it():
    row = {k: v for k, v in FP8_ROW.items() if k != "eager 2:4 fp8 ms"}
    with pytest.raises(ValueError, match=r"row 0 \(llama-8b 4x1024\): no 'eager 2:4 fp8 ms'"):
        rows_from_benchmark([row])


def test_the_row_builder_refuses_what_it_cannot_record():
    good = {"ms": 1.0, "speedup_over_bf16": 1.1}
    with pytest.raises(ValueError, match="pattern '4:8'"):
        quantized_speed_row("m", "int4", "4:8", 1, 1, "eager", good)
    with pytest.raises(ValueError, match="mode 'fast'"):
        quantized_speed_row("m", "int4", "dense", 1, 1, "fast", good)
    with pytest.raises(ValueError, match="batch=0"):
        quantized_speed_row("m", "int4", "dense", 0, 1, "eager", good)
    with pytest.raises(ValueError, match=r"\['speedup'\] unknown"):
        quantized_speed_row("m", "int4", "dense", 1, 1, "eager", {**good, "speedup": 1.1})


def test_provenance_comes_from_the_files_env():
    prov = benchmark_provenance(ENV)
    assert prov == {
        "gpu": "NVIDIA H100 80GB HBM3",
        "gpu_capability": "9.0",
        "cuda": "13.0",
        "torch": "2.11.0+cu130",
        "cusparselt": "0.8.0",
        "time": "2026-11-25T03:36:00+00:00",
        "commit": "abc1234",
        "measured_by": "python benchmarks/quantized_models.py --dtype float8_e4m3fn",
    }


def test_rows_read_back_by_model_precision_and_pattern_and_bf16_readers_skip_them(tmp_path):
    with ResultStore(tmp_path / "q.db") as store:
        prov = benchmark_provenance(ENV)
        store.record_many({**r, "provenance": prov} for r in rows_from_benchmark([FP8_ROW]))
        rows = store.query(include_reference=False)
        found = quantized_speeds(rows, "llama-8b", "float8_e4m3fn", "2:4")
        assert list(found) == [(4096, "eager"), (4096, "graphs")]
        eager = found[4096, "eager"][0]
        assert (eager.speedup, eager.over_same, eager.commit) == (1.24, 1.05, "abc1234")
        assert eager.gpu == "NVIDIA H100 80GB HBM3" and eager.model == "llama-8b"
        assert repr(eager) == (
            "QuantizedSpeed(FP8 2:4 llama-8b 4x1024 eager: 1.24x over bf16 dense, "
            "1.05x over FP8 dense)"
        )
        assert "1.05x over FP8 dense" in eager._repr_html_()
        assert quantized_speeds(rows, "llama-1b") == {}
        # the bf16 whole-model readers never take an FP8 dense row for a 2:4 one
        assert recorded_model_speed("llama-8b", "bfloat16", 4096, store) == []
        # created at the measuring machine's time, not the import's
        assert {r.created for r in rows} == {"2026-11-25T03:36:00+00:00"}


def _script():
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "quantized_models.py"
    return runpy.run_path(str(path), run_name="quantized_models")


def test_the_benchmark_imports_its_json_into_a_store_and_appends(tmp_path, capsys):
    import json

    main = _script()["main"]
    measured = tmp_path / "fp8.json"
    measured.write_text(json.dumps({"env": ENV, "rows": [FP8_ROW]}))
    db = tmp_path / "measured.db"
    assert main(["--from-json", str(measured), "--db", str(db)]) == 0
    assert "recorded 4 rows" in capsys.readouterr().out
    assert main(["--from-json", str(measured), "--db", str(db), "--commit", "def5678"]) == 0
    with ResultStore(db, readonly=True) as store:
        rows = store.query("bench-models")
    assert len(rows) == 8  # the second import appended, as a store does
    assert {r.provenance["gpu"] for r in rows} == {"NVIDIA H100 80GB HBM3"}
    assert [r.provenance["commit"] for r in rows] == ["abc1234"] * 4 + ["def5678"] * 4


def test_the_benchmark_never_writes_over_a_file_that_is_not_a_store(tmp_path):
    import json

    from explorer.results.store import StoreError

    main = _script()["main"]
    measured = tmp_path / "fp8.json"
    measured.write_text(json.dumps({"env": ENV, "rows": [FP8_ROW]}))
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    with pytest.raises(StoreError):
        main(["--from-json", str(measured), "--db", str(notes)])
    assert notes.read_text() == "mine\n"
    with pytest.raises(SystemExit):
        main(["--from-json", str(measured)])  # no --db: no default place to write
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fp8.json", "notes.txt"]


def test_the_benchmark_refuses_a_layer_count_below_one_before_any_work(tmp_path, capsys):
    main = _script()["main"]
    with pytest.raises(SystemExit):
        main(["--layers", "0", "--json", str(tmp_path / "out.json")])
    assert "--layers 0" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_benchmark_refuses_a_group_size_for_bfloat16_before_any_work(tmp_path, capsys):
    main = _script()["main"]
    with pytest.raises(SystemExit):
        main(["--dtype", "bfloat16", "--group-size", "64", "--json", str(tmp_path / "o.json")])
    assert "--group-size is for --dtype int4 or int8-weights" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_benchmark_refuses_an_unknown_mode_before_any_work(tmp_path, capsys):
    main = _script()["main"]
    with pytest.raises(SystemExit):
        main(["--modes", "eager,default", "--json", str(tmp_path / "o.json")])
    assert "--modes 'eager,default': expected some of eager, compile, graphs" in (
        capsys.readouterr().err
    )
    assert list(tmp_path.iterdir()) == []


def test_a_default_compile_run_is_recorded_as_its_own_mode():
    row = {"model": "llama-8b", "dtype": "int4", "batch": 16, "seq": 1}
    for how, sparse in (("eager", 1.02), ("compile", 1.31)):
        row.update({f"{how} bf16 dense ms": 4.0, f"{how} int4 dense ms": 3.9})
        row.update({f"{how} 2:4 int4 ms": 3.9 / sparse, f"{how} int4 dense over bf16": 1.03})
        row.update({f"{how} 2:4 int4 over bf16": 1.05, f"{how} 2:4 int4 over int4 dense": sparse})
    rows = rows_from_benchmark([row])
    got = [(r["config"]["mode"], r["config"]["pattern"]) for r in rows]
    assert got == [("eager", "dense"), ("eager", "2:4"), ("compile", "dense"), ("compile", "2:4")]
    assert rows[3]["metrics"]["speedup_over_same"] == 1.31


def test_the_benchmarks_group_scales_are_the_rounding_scales_of_each_pruned_linear():
    from torch import nn

    from explorer.lowbit import compress_int4
    from explorer.masks import make_mask

    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("proj", nn.Linear(256, 32))
    model.add_module("lm_head", nn.Linear(256, 8))
    with torch.no_grad():
        for mod in model:
            mod.weight.mul_(make_mask(mod.weight, "2:4"))
    scales = _script()["group_scales"](model, "int4", 64)
    assert list(scales) == ["proj"]  # lm_head is never pruned, so never quantized
    assert scales["proj"].shape == (32, 4)
    assert torch.equal(scales["proj"], compress_int4(model.proj.weight.float(), 64).scales)


def test_a_whole_model_run_is_recorded_under_its_own_name():
    row = {**FP8_ROW, "model": "llama-8b, 32 layers", "layers": 32}
    names = {r["config"]["model"] for r in rows_from_benchmark([row])}
    assert names == {"llama-8b, 32 layers"}  # never mixed with the four-layer spec's rows


def test_a_bfloat16_row_records_the_copy_as_dense_and_decode_as_2_4():
    # --dtype bfloat16: the "same precision dense" is an unchanged copy of the bf16 model (A/A)
    row = {"model": "llama-8b, 32 layers", "dtype": "bfloat16", "batch": 1, "seq": 1}
    row.update(
        {"graphs bf16 dense ms": 7.1, "graphs bf16 dense copy ms": 7.12, "graphs 2:4 bf16 ms": 5.12}
    )
    row.update({"graphs bf16 dense copy over bf16": 0.997, "graphs 2:4 bf16 over bf16": 1.39})
    row["graphs 2:4 bf16 over bf16 dense copy"] = 1.4
    dense, sparse = rows_from_benchmark([row])
    assert dense["config"]["precision"] == sparse["config"]["precision"] == "bfloat16"
    assert dense["metrics"]["speedup_over_bf16"] == 0.997  # the A/A: the noise of equal work
    assert sparse["metrics"] == {
        "bf16_dense_ms": 7.1,
        "ms": 5.12,
        "same_dense_ms": 7.12,
        "speedup_over_bf16": 1.39,
        "speedup_over_same": 1.4,
    }


def test_the_benchmark_keys_name_each_precision_or_refuse():
    assert benchmark_keys("int4") == ("int4 dense", "2:4 int4")
    assert benchmark_keys("bfloat16") == ("bf16 dense copy", "2:4 bf16")
    with pytest.raises(ValueError, match="precision 'fp4'"):
        benchmark_keys("fp4")
    with pytest.raises(ValueError, match=r"row 0 \(m 1x1\): precision 'fp4'"):
        rows_from_benchmark([{"model": "m", "dtype": "fp4", "batch": 1, "seq": 1}])


def test_ordinary_launches_set_the_switch_inside_and_restore_it_after(monkeypatch):
    from explorer.gpu.cuda.launch import OVERLAP_ENV

    ordinary_launches = _script()["ordinary_launches"]
    monkeypatch.delenv(OVERLAP_ENV, raising=False)
    with ordinary_launches():
        assert os.environ[OVERLAP_ENV] == "0"
    assert OVERLAP_ENV not in os.environ
    with ordinary_launches(False):
        assert OVERLAP_ENV not in os.environ
    monkeypatch.setenv(OVERLAP_ENV, "1")
    with pytest.raises(KeyError), ordinary_launches():
        raise KeyError("a failure inside")
    assert os.environ[OVERLAP_ENV] == "1"
