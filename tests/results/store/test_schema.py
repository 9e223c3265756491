"""Schema creation, migration from older versions, and refusal of foreign or newer files."""

from __future__ import annotations

import json
import sqlite3

import pytest

from explorer.results.store import SCHEMA_VERSION, ResultStore, StoreError, schema


def test_new_file_gets_current_schema_and_identity(tmp_path):
    path = tmp_path / "r.db"
    store = ResultStore(path)
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"results", "sweeps"} <= tables


def test_migrate_from_version_1_keeps_rows_and_backfills_gpu(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    schema.migrate(conn, 0, target=1)
    conn.execute(
        "INSERT INTO results (kind, created, model, config, metrics, provenance) "
        "VALUES ('prune', '2025-01-01', 'digits-mlp', ?, ?, ?)",
        (
            json.dumps({"model": "digits-mlp"}),
            json.dumps({"accuracy": 0.9}),
            json.dumps({"gpu": "NVIDIA H100"}),
        ),
    )
    conn.close()
    store = ResultStore(path)
    assert store.schema_version == SCHEMA_VERSION
    (row,) = store.query(gpu="NVIDIA H100")
    assert row.metrics == {"accuracy": 0.9}
    assert row.model == "digits-mlp"
    store.record("prune", {"model": "x"}, {"accuracy": 1.0})
    assert len(store) == 2


def test_migration_is_ordered_and_rejects_bad_range():
    conn = sqlite3.connect(":memory:")
    assert schema.migrate(conn, 0, target=1) == 1
    assert schema.migrate(conn, 1) == SCHEMA_VERSION
    with pytest.raises(ValueError, match="schema version"):
        schema.migrate(conn, SCHEMA_VERSION + 1)


def test_readonly_old_reference_is_upgraded_in_memory(tmp_path):
    path = tmp_path / "ref.db"
    conn = sqlite3.connect(path, isolation_level=None)
    schema.migrate(conn, 0, target=1)
    conn.execute(
        "INSERT INTO results (kind, created, config, metrics, provenance) "
        "VALUES ('layer-speed', 't', '{}', '{}', '{\"gpu\": \"H100\"}')"
    )
    conn.close()
    before = path.read_bytes()
    ref = ResultStore(path, readonly=True)
    assert ref.query()[0].source == "reference"
    assert ref.query(gpu="H100")[0].kind == "layer-speed"
    assert path.read_bytes() == before


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.db"
    ResultStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=r"newer.*pip install -U") as info:
        ResultStore(path)
    assert str(path) in str(info.value)


def test_not_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"not an SQLite database|not a database") as info:
        ResultStore(path)
    message = str(info.value)
    assert str(path) in message and "new path" in message and "mv" in message
    assert path.read_bytes() == before


def test_corrupt_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "broken.db"
    store = ResultStore(path)
    for i in range(50):
        store.record("prune", {"model": f"m{i}"}, {"x": i})
    store.snapshot(tmp_path / "copy.db")
    store.close()
    data = bytearray((tmp_path / "copy.db").read_bytes())
    data[16:100] = b"\xff" * 84  # smash the header after the magic string
    path2 = tmp_path / "smashed.db"
    path2.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=str(path2)):
        ResultStore(path2)


def test_foreign_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    conn.execute("INSERT INTO customers VALUES (1, 'Ada')")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a sparsity-explorer results database"):
        ResultStore(path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM customers").fetchall() == [("Ada",)]


def test_folder_path_is_refused(tmp_path):
    with pytest.raises(StoreError, match="is a folder"):
        ResultStore(tmp_path)
