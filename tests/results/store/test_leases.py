"""Concurrent sweeps on one store claim cells before computing them, so they split the work."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from explorer.results.store import ResultStore
from explorer.results.store.leases import CLAIMED, DONE, HELD, claim_cell
from explorer.sweeps import SweepConfig, cells, sweep

GRID = {"methods": "magnitude,random", "patterns": "2:4,4:8", "dtypes": "float16"}


def slow_cell(calls):
    def run(config, cancel=None):
        calls.append(config)
        time.sleep(0.1)
        kind = {"speed": "layer-speed"}.get(config["cell"], config["cell"])
        return [{"kind": kind, "config": config, "metrics": {"accuracy": 0.5}}]

    return run


def test_two_identical_sweeps_split_the_cells(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cells, "run_cell", slow_cell(calls))
    db = tmp_path / "r.db"
    ResultStore(db).close()
    results = []

    def one():
        results.append(sweep("digits-mlp", db=db, progress=False, **GRID))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = results[0].total
    assert len(calls) == total  # every cell computed once, not once per sweep
    assert sum(r.ran for r in results) == total
    for r in results:
        assert r.ran + r.by_other_writer == total and r.already_done == 0
        assert "done by another writer" in repr(r)
    assert all(r.ran > 0 for r in results)  # both did work
    with ResultStore(db) as store:
        keys = Counter(r.cell_key for r in store.query(sweep_id=results[0].sweep_id))
        assert set(keys.values()) == {1} and len(keys) == total
        assert store._read("SELECT count(*) FROM leases")[0][0] == 0


def test_claims_are_exclusive_until_done_or_stale(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        assert claim_cell(store, "s", "c", "hostA:1:a") == CLAIMED
        assert claim_cell(store, "s", "c", "hostB:2:b") == HELD
        assert claim_cell(store, "s", "c", "hostB:2:b", stale_after=0.0) == CLAIMED
        store.record_many([{"kind": "prune", "config": {}, "cell_key": "c"}], "s", writer="x")
        assert claim_cell(store, "s", "c", "hostC:3:c") == DONE
        store.record_many(
            [{"kind": "prune", "config": {}, "cell_key": "f", "status": "failed"}], "s"
        )
        assert claim_cell(store, "s", "f", "hostC:3:c") == DONE
        assert claim_cell(store, "s", "f", "hostC:3:c", finished=("ok",)) == CLAIMED


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_dead_writers_cells_are_taken_over_at_once(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cells, "run_cell", slow_cell(calls))
    db = tmp_path / "r.db"
    cfg = SweepConfig.make("digits-mlp", **GRID)
    dead = f"{socket.gethostname()}:{_dead_pid()}:gone"
    with ResultStore(db) as store:
        for cell in cfg.cells()[:2]:
            assert claim_cell(store, cfg.sweep_id, cell.key, dead) == CLAIMED
    result = sweep("digits-mlp", db=db, progress=False, lease_timeout=3600, **GRID)
    assert result.ran == result.total == len(calls)


def test_a_stale_lease_of_another_machine_is_waited_for_then_taken_over(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cells, "run_cell", slow_cell(calls))
    db = tmp_path / "r.db"
    cfg = SweepConfig.make("digits-mlp", **GRID)
    with ResultStore(db) as store:
        claim_cell(store, cfg.sweep_id, cfg.cells()[0].key, "elsewhere:1:x")
    result = sweep("digits-mlp", db=db, progress=False, lease_timeout=0.6, **GRID)
    assert result.ran == result.total and result.by_other_writer == 0


def test_only_the_cell_key_conflict_is_taken_as_another_writers_row(tmp_path, monkeypatch):
    monkeypatch.setattr(cells, "run_cell", slow_cell([]))
    db = tmp_path / "r.db"
    real = ResultStore.record_many

    def conflict(self, entries, sweep_id=None, replace=False, writer=None):
        raise sqlite3.IntegrityError("UNIQUE constraint failed: results.sweep_id, results.cell_key")

    monkeypatch.setattr(ResultStore, "record_many", conflict)
    result = sweep("digits-mlp", db=db, progress=False, **GRID)
    assert result.ran == 0 and result.by_other_writer == result.total

    def other(self, entries, sweep_id=None, replace=False, writer=None):
        raise sqlite3.IntegrityError("NOT NULL constraint failed: results.kind")

    monkeypatch.setattr(ResultStore, "record_many", other)
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
        sweep("digits-mlp", db=tmp_path / "other.db", progress=False, **GRID)
    monkeypatch.setattr(ResultStore, "record_many", real)


def test_bad_lease_timeout_is_refused(tmp_path):
    with pytest.raises(ValueError, match="lease_timeout=0"):
        sweep(db=tmp_path / "r.db", lease_timeout=0)
