"""The quantization experiments record their rows in a results store, as quantized points."""

from __future__ import annotations

import pytest

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


def test_int8_weight_only_rows_take_int8_weight_only_speed_never_w8a8(tmp_path):
    from explorer.results.quantized_speed import quantized_speed_row

    db = tmp_path / "int8.db"
    rows = int4.run(["digits-mlp"], progress=False, db=db, precision="int8")
    assert [r["config"] for r in rows] == [
        "dense",
        "2:4",
        "2:4 + int8 joint",
        "2:4 then int8 RTN",
    ]
    assert all(r["precision"] == "int8" for r in rows)
    speed = {"ms": 1.0, "speedup_over_bf16": 1.5, "speedup_over_same": 1.2}
    with ResultStore(db, source="local") as store:
        # an int8 2:4 speed of the same model: weights and activations, not weight-only
        store.record_many([quantized_speed_row("digits-mlp", "int8", "2:4", 1, 1, "graphs", speed)])
        stored = store.query(include_reference=False)
    quants = [r.config.get("quant") for r in stored if r.kind in ("dense", "prune")]
    assert quants == [None, None, "int8-weights", "int8-weights-rtn"]
    points = {p.label: p for p in quantized_points(stored)}
    assert set(points) == {
        "int8 weight-only 2:4 sparsegpt joint",
        "int8 weight-only 2:4 sparsegpt RTN",
    }
    for p in points.values():
        assert p.speedup is None and p.precision == "int8-weights"
        assert "int8 weight-only 2:4 speed of digits-mlp" in p.details["why"]
    # a weight-only speed row of the same model (sparsify(dtype="int8-weights")) is taken
    faster = {"ms": 1.0, "speedup_over_bf16": 1.55, "speedup_over_same": 1.55}
    with ResultStore(db, source="local") as store:
        row = quantized_speed_row("digits-mlp", "int8-weights", "2:4", 1, 1, "graphs", faster)
        store.record_many([row])
        stored = store.query(include_reference=False)
    for p in quantized_points(stored):
        assert p.speedup == pytest.approx(1.55) and p.precision == "int8-weights"


def test_an_unknown_precision_is_refused_before_any_model_loads():
    import pytest

    with pytest.raises(ValueError, match="precision 'int2' unknown"):
        int4.run(["digits-mlp"], precision="int2")


def test_the_admm_rows_say_so_in_the_store_and_on_their_points(tmp_path, capsys):
    db = tmp_path / "admm.db"
    argv = ["--models", "digits-mlp", "--admm", "--no-progress", "--db", str(db)]
    assert int4.main(argv) == 0
    table = capsys.readouterr().out
    assert "| 2:4 + ADMM |" in table and "| 2:4 + int4 joint + ADMM |" in table
    with ResultStore(db, readonly=True, source="local") as store:
        stored = store.query(include_reference=False)
    assert [(r.config.get("quant"), r.config.get("update")) for r in stored] == [
        (None, None),
        (None, None),
        ("int4", None),
        (None, "admm"),
        ("int4", "admm"),
        ("int4-rtn", None),
    ]
    labels = sorted(p.label for p in quantized_points(stored))
    assert labels == [
        "int4 2:4 sparsegpt RTN",
        "int4 2:4 sparsegpt admm joint",
        "int4 2:4 sparsegpt joint",
    ]


def test_permuted_rows_say_so_in_the_table_and_the_store(tmp_path):
    db = tmp_path / "permuted.db"
    rows = int4.run(["digits-mlp"], progress=False, db=db, permute=True)
    assert all(r["permute"] for r in rows)
    assert "channels permuted" in int4.to_markdown(rows)
    with ResultStore(db, readonly=True, source="local") as store:
        stored = store.query(include_reference=False)
    assert [r.config.get("permute") for r in stored] == [None, True, True, True]
    assert all("permute" in p.label for p in quantized_points(stored))


def test_the_dense_quantized_rows_are_dense_points_by_gptq_and_rounding(tmp_path, capsys):
    db = tmp_path / "dense.db"
    argv = ["--models", "digits-mlp", "--dense", "--no-progress", "--db", str(db)]
    assert int4.main(argv) == 0
    table = capsys.readouterr().out
    assert "| int4 dense GPTQ |" in table and "| int4 dense RTN |" in table
    with ResultStore(db, readonly=True, source="local") as store:
        stored = store.query(include_reference=False)
    assert [(r.kind, r.config.get("quant")) for r in stored] == [
        ("dense", None),
        ("dense", "int4"),
        ("dense", "int4-rtn"),
        ("prune", None),
        ("prune", "int4"),
        ("prune", "int4-rtn"),
    ]
    gptq, rounded = stored[1], stored[2]
    assert gptq.config["group_size"] == rounded.config["group_size"] > 0
    assert "prune_seconds" in gptq.metrics and "method" not in gptq.config
    points = {p.label: p for p in quantized_points(stored)}
    assert {"int4 dense GPTQ", "int4 dense RTN"} <= set(points)
    assert points["int4 dense GPTQ"].pattern == "dense"
    assert "nothing pruned (GPTQ)" in points["int4 dense GPTQ"].details["accuracy"]
    assert "rounded to nearest" in points["int4 dense RTN"].details["accuracy"]
