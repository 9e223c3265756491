"""Benchmark rows recorded and rendered from earlier runs' --json files, on a CPU."""

from __future__ import annotations

import json

import pytest

from explorer.bench import main
from explorer.bench.recording import read_bench_json, row_recorder
from explorer.results.store import ResultStore

H100 = {"torch": "2.11.0+cu130", "device": "NVIDIA H100 80GB HBM3", "capability": "9.0",
        "cusparselt": 800}  # fmt: skip
MODEL_ROW = {
    "suite": "models", "model": "llama-8b", "label": "llama-8b 1x1", "dtype": "bfloat16",
    "batch": 1, "seq": 1, "n": 1, "m": 0, "k": 0, "status": "ok", "dense_ms": 3.5,
    "speedup": 0.99, "speedup_compiled": 1.05, "control_speedup_compiled": 1.0,
    "timings": "| a table |",
}  # fmt: skip
HOST_ROW = {"suite": "host", "label": "decode launch 1024x1024", "dtype": "bfloat16", "n": 1,
            "m": 0, "k": 0, "status": "ok", "dense_host_us": 21.4, "explorer_host_us": 19.5,
            "ratio": 0.91}  # fmt: skip


def _write(path, rows, env=H100, command=None):
    data = {"env": env, "rows": rows}
    if command:
        data["command"] = command
    path.write_text(json.dumps(data))
    return path


def test_rows_of_several_files_are_read_in_order_with_each_command(tmp_path):
    a = _write(
        tmp_path / "models.json", [MODEL_ROW], command="sparsity-explorer bench --suites models"
    )
    b = _write(tmp_path / "host.json", [HOST_ROW])
    rows, env, commands = read_bench_json([a, b])
    assert [r["suite"] for r in rows] == ["models", "host"]
    assert env["device"] == "NVIDIA H100 80GB HBM3"
    assert commands == ["sparsity-explorer bench --suites models", "(the rows of host.json)"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not json", "cannot read it"),
        ('{"rows": []}', "no 'rows' list and 'env'"),
        ("[]", "no 'rows'"),
    ],
)
def test_a_file_that_is_not_a_bench_json_is_refused_by_name(tmp_path, text, said):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=said) as err:
        read_bench_json([path])
    assert "bad.json" in str(err.value)


def test_files_of_two_gpus_are_not_merged(tmp_path):
    a = _write(tmp_path / "a.json", [HOST_ROW])
    b = _write(tmp_path / "b.json", [HOST_ROW], env={**H100, "device": "NVIDIA H200"})
    with pytest.raises(ValueError, match=r"NVIDIA H200.*one GPU at a time"):
        read_bench_json([a, b])
    with pytest.raises(ValueError, match="no benchmark JSON file"):
        read_bench_json([])


def test_the_recorder_splits_config_from_metrics_and_keeps_the_provenance(tmp_path):
    db = tmp_path / "m.db"
    record = row_recorder(db, provenance={"gpu": "NVIDIA H100 80GB HBM3", "commit": "abc1234"})
    record(MODEL_ROW)
    with ResultStore(db, readonly=True) as store:
        (row,) = store.query("bench-models")
    assert row.config["model"] == "llama-8b" and row.config["tokens"] == 1
    assert row.metrics["speedup_compiled"] == 1.05 and "timings" not in row.metrics
    assert row.provenance["commit"] == "abc1234"


def test_from_json_writes_the_page_and_the_store_without_a_gpu(tmp_path, capsys):
    a = _write(
        tmp_path / "models.json", [MODEL_ROW], command="sparsity-explorer bench --suites models"
    )
    b = _write(tmp_path / "host.json", [HOST_ROW], command="sparsity-explorer bench --suites host")
    page, db = tmp_path / "bench.md", tmp_path / "m.db"
    argv = [
        "--from-json",
        str(a),
        str(b),
        "--commit",
        "abc1234",
        "--markdown",
        str(page),
        "--db",
        str(db),
    ]
    assert main(argv) == 0
    text = page.read_text()
    assert (
        "`sparsity-explorer bench --suites models`, `sparsity-explorer bench --suites host`" in text
    )
    assert "commit abc1234" in text and "NVIDIA H100 80GB HBM3" in text
    assert "llama-8b" in text and "decode launch 1024x1024" in text
    with ResultStore(db, readonly=True) as store:
        rows = store.query("bench-models") + store.query("bench-host")
    assert {r.provenance["commit"] for r in rows} == {"abc1234"}
    assert {r.provenance["gpu"] for r in rows} == {"NVIDIA H100 80GB HBM3"}
    assert "recorded 2 rows" in capsys.readouterr().err


def test_from_json_names_a_bad_file_and_commit_needs_it(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--from-json", str(tmp_path / "missing.json")])
    assert "missing.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--commit", "abc1234"])
    assert "give --from-json too" in capsys.readouterr().err
