"""Writing, reading and exporting results; provenance; faults (read-only path, full disk)."""

from __future__ import annotations

import csv
import json
import math
import os
import sqlite3
import stat
import sys

import pytest
import torch

from explorer.results.store import ResultStore, StoreError, config_key, default_path
from explorer.results.store.provenance import machine


@pytest.fixture
def store(tmp_path):
    with ResultStore(tmp_path / "r.db") as s:
        yield s


def test_record_then_query_round_trips_config_metrics_and_indexed_columns(store):
    config = {
        "model": "digits-mlp",
        "method": "wanda",
        "pattern": "2:4",
        "dtype": torch.float16,
        "tokens": 1024,
        "layers": ["0", "2"],
    }
    rid = store.record("prune", config, {"accuracy": 0.91, "prune_seconds": 0.2})
    (row,) = store.query("prune", method="wanda", dtype="float16", tokens=1024)
    assert row.id == rid
    assert row.config["dtype"] == "float16" and row.config["layers"] == ["0", "2"]
    assert row.metrics == {"accuracy": 0.91, "prune_seconds": 0.2}
    assert row.get("accuracy") == 0.91 and row.get("method") == "wanda"
    assert row.source == "local" and row.status == "ok"
    assert len(store.query("prune", method="magnitude")) == 0


def test_every_row_carries_provenance(store):
    for i in range(5):
        store.record("layer-speed", {"model": "m", "shape": [256, 64], "tokens": 2**i}, {"x": i})
    store.record("prune", {}, status="failed", error="boom")
    for row in store.query():
        for key in (
            "gpu",
            "torch",
            "explorer",
            "python",
            "platform",
            "time",
            "cuda",
            "cusparselt",
            "driver",
            "gpu_capability",
        ):
            assert key in row.provenance
        assert row.provenance["torch"] == torch.__version__
        assert row.gpu == row.provenance["gpu"]
    assert len(store.query(gpu=machine()["gpu"])) == 6


def test_failed_row_keeps_its_reason(store):
    store.record("prune", {"model": "m"}, status="failed", error="RuntimeError: out of memory")
    (row,) = store.query(status="failed")
    assert row.error == "RuntimeError: out of memory"
    assert "failed" in repr(row) and "out of memory" in repr(row)


def test_bad_inputs_name_the_value(store):
    with pytest.raises(ValueError, match="status='done'"):
        store.record("prune", {}, status="done")
    with pytest.raises(ValueError, match="kind=''"):
        store.record("", {})
    with pytest.raises(ValueError, match=r"'colour'.*expected one of"):
        store.query(colour="red")
    with pytest.raises(TypeError, match="cannot store a object"):
        store.record("prune", {"model": object()})


def test_sweep_cell_is_unique(store):
    store.record("prune", {"a": 1}, sweep_id="s", cell_key="k")
    with pytest.raises(sqlite3.IntegrityError):
        store.record("prune", {"a": 1}, sweep_id="s", cell_key="k")
    store.record("prune", {"a": 1}, sweep_id="t", cell_key="k")
    assert store.done_cells("s") == {"k": "ok"}


def test_record_many_is_atomic_and_replace_redoes_a_cell(store):
    entries = [
        {"kind": "layer-speed", "config": {"i": 0}, "cell_key": "c"},
        {"kind": "layer-speed", "config": {"i": 1}, "cell_key": "c#1"},
    ]
    store.record_many(entries, sweep_id="s")
    with pytest.raises(sqlite3.IntegrityError):
        store.record_many([{"kind": "x", "config": {}, "cell_key": "d"}, entries[1]], sweep_id="s")
    assert store.done_cells("s") == {"c": "ok"}  # "d" rolled back with its partner
    store.record_many(entries[:1], sweep_id="s", replace=True)
    assert len(store.query(sweep_id="s")) == 1


def test_non_finite_metrics_become_null(store):
    store.record("prune", {}, {"perplexity": math.inf, "loss": math.nan, "ok": 1.5})
    assert store.query()[0].metrics == {"perplexity": None, "loss": None, "ok": 1.5}


def test_exports(store, tmp_path):
    store.record("prune", {"model": "m", "method": "wanda"}, {"accuracy": 0.5})
    store.record("dense", {"model": "m", "layers": [1, 2]}, {"accuracy": 0.9})
    out = store.export_csv(tmp_path / "out.csv")
    rows = list(csv.DictReader(out.open()))
    assert [r["kind"] for r in rows] == ["prune", "dense"]
    assert rows[0]["metrics.accuracy"] == "0.5" and rows[1]["config.layers"] == "[1, 2]"
    assert rows[0]["provenance.torch"] == torch.__version__
    data = json.loads(store.export_json(tmp_path / "out.json", kind="dense").read_text())
    assert len(data) == 1 and data[0]["metrics"] == {"accuracy": 0.9}


def test_reprs(store):
    store.record("prune", {"model": "m", "method": "random", "pattern": "2:4"}, {"accuracy": 0.1})
    assert repr(store).startswith("ResultStore(") and "1 rows" in repr(store)
    table = store.query()
    assert repr(table) == "ResultTable(1 rows: prune=1, failed=0)"
    assert "<table" in table._repr_html_() and "random" in table._repr_html_()
    assert "<table" in store._repr_html_()
    assert "\n" not in repr(table[0])


def test_reference_rows_are_labeled_and_read_only(store, tmp_path):
    ref_path = tmp_path / "ref.db"
    with ResultStore(ref_path) as ref:
        ref.record(
            "layer-speed",
            {"model": "m", "pattern": "2:4"},
            {"speedup": 1.4},
            provenance={"gpu": "NVIDIA H100 80GB HBM3", "time": "2026-01-01T00:00:00+00:00"},
        )
        ref.snapshot(tmp_path / "shipped.db")
    store.record("layer-speed", {"model": "m", "pattern": "2:4"}, {"speedup": 1.0})
    attached = store.attach_reference(tmp_path / "shipped.db")
    assert attached.readonly
    rows = store.query("layer-speed")
    assert [r.source for r in rows] == ["local", "reference"]
    assert rows[1].gpu == "NVIDIA H100 80GB HBM3"
    assert len(store.query("layer-speed", include_reference=False)) == 1
    with pytest.raises(StoreError, match="read-only"):
        attached.record("x", {})


def test_shipped_reference_is_optional():
    ref = ResultStore.reference()
    assert ref is None or ref.readonly


def test_default_path_honours_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path / "cache"))
    assert default_path() == tmp_path / "cache" / "results.db"
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path / "x.db"))
    assert default_path() == tmp_path / "x.db"
    monkeypatch.delenv("SPARSITY_EXPLORER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with ResultStore() as s:
        assert s.path == tmp_path / "xdg" / "sparsity-explorer" / "results.db"
        assert s.path.is_file()


def test_config_key_is_deterministic_and_order_free():
    a = {"model": "m", "pattern": "2:4", "dtype": torch.float16, "layers": ("a", "b")}
    b = {"layers": ["a", "b"], "dtype": "float16", "pattern": "2:4", "model": "m"}
    assert config_key(a) == config_key(b)
    assert config_key(a) != config_key({**a, "pattern": "4:8"})


needs_posix_permissions = pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0,
    reason="needs POSIX permissions as a non-root user",
)


@needs_posix_permissions
def test_read_only_folder_gives_clear_error(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(StoreError, match="unable to open") as info:
            ResultStore(folder / "r.db")
        assert str(folder / "r.db") in str(info.value) and "writable" in str(info.value)
    finally:
        folder.chmod(stat.S_IRWXU)


@needs_posix_permissions
def test_read_only_file_gives_clear_error(tmp_path):
    path = tmp_path / "r.db"
    ResultStore(path).close()
    for p in tmp_path.iterdir():
        p.chmod(stat.S_IRUSR)
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(StoreError, match=r"read-only|readonly") as info:
            ResultStore(path).record("prune", {})
        assert str(path) in str(info.value)
    finally:
        tmp_path.chmod(stat.S_IRWXU)
        for p in tmp_path.iterdir():
            p.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_readonly_open_of_missing_file(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        ResultStore(tmp_path / "nope.db", readonly=True)


def test_full_disk_gives_clear_error(tmp_path):
    # SQLite reports "database or disk is full" when max_page_count is reached: a real full disk.
    path = tmp_path / "small.db"
    store = ResultStore(path)
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 1}")
    with pytest.raises(StoreError, match="full") as info:
        for i in range(1000):
            store.record("prune", {"model": "m" * 200}, {"blob": "x" * 4000, "i": i})
    assert str(path) in str(info.value) and "space" in str(info.value)
    store.close()
    assert ResultStore(path).query()  # what was committed before is intact


def test_file_turned_read_only_under_an_open_store(tmp_path):
    # The file becomes read-only after opening (as a chmod or a remount would do); works as root.
    path = tmp_path / "r.db"
    store = ResultStore(path)
    store._conn.close()
    store._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    with pytest.raises(StoreError, match=r"readonly database.*read-only") as info:
        store.record("prune", {"model": "m"})
    assert str(path) in str(info.value)


def test_path_inside_a_file_gives_clear_error(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(StoreError, match=r"unable to open.*writable") as info:
        ResultStore(tmp_path / "file.txt" / "r.db")
    assert "file.txt" in str(info.value)


def test_to_pandas_names_the_install_when_missing(store, monkeypatch):
    import builtins

    from explorer.errors import MissingExtraError

    real = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas":
            raise ImportError("no pandas")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(MissingExtraError, match="pip install pandas"):
        store.query().to_pandas()
