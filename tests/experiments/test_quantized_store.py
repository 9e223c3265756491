"""The quantization experiments record their rows in a results store, as quantized points."""

from __future__ import annotations

from explorer.experiments import fp8, int4
from explorer.results.quantized_points import quantized_points
from explorer.results.store import ResultStore


def test_int4_records_its_rows_and_they_become_int4_points(tmp_path):
    db = tmp_path / "int4.db"
    rows = int4.run(["digits-mlp"], progress=False, db=db)
    with ResultStore(db, readonly=True, source="local") as store:
        stored = store.query(include_reference=False)
    assert [(r.kind, r.config.get("quant")) for r in stored] == [
        ("dense", None),
        ("prune", None),
        ("prune", "int4"),
        ("prune", "int4-rtn"),
    ]
    joint = stored[2]
    assert joint.metrics["accuracy"] == next(
        r["value"] for r in rows if r["config"] == "2:4 + int4 joint"
    )
    assert joint.config["group_size"] == rows[0]["group_size"]
    assert joint.config["method"] == "sparsegpt" and joint.config["calibration_samples"] == 512
    points = {p.label: p for p in quantized_points(stored)}
    assert set(points) == {"int4 2:4 sparsegpt joint", "int4 2:4 sparsegpt RTN"}
    assert all(p.speedup is None and p.dense == rows[0]["value"] for p in points.values())


def test_the_fp8_command_line_keeps_its_rows_with_db(tmp_path, capsys):
    db = tmp_path / "fp8.db"
    argv = ["--models", "digits-mlp", "--methods", "magnitude", "--no-progress", "--db", str(db)]
    assert fp8.main(argv) == 0
    capsys.readouterr()
    with ResultStore(db, readonly=True, source="local") as store:
        labels = sorted(p.label for p in quantized_points(store.query(include_reference=False)))
    assert labels == ["FP8 2:4 magnitude", "FP8 dense"]
