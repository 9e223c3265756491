"""A sweep and an export killed at random points leave a healthy store and whole export files."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

from explorer.results.store import ResultStore
from explorer.sweeps import SweepConfig, cells, sweep

ROOT = Path(__file__).resolve().parents[3]
GRID = {"methods": "magnitude,random,wanda", "patterns": "2:4,4:8", "dtypes": "float16,bfloat16"}

_SWEEP = textwrap.dedent(
    """
    import time
    from explorer.sweeps import cells, sweep

    def slow(config, cancel=None):
        time.sleep(0.05)
        kind = {{"speed": "layer-speed"}}.get(config["cell"], config["cell"])
        return [{{"kind": kind, "config": config, "metrics": {{"accuracy": 0.5}}}}]

    cells.run_cell = slow
    sweep("digits-mlp", db={db!r}, progress=False, **{grid!r})
    """
)

_EXPORT = textwrap.dedent(
    """
    from explorer.results.store import ResultStore

    store = ResultStore({db!r})
    i = 0
    while True:
        store.record("dense", {{"model": "m", "i": i, "pad": "y" * 500}}, {{"accuracy": 0.9}})
        store.export_json({json_out!r})
        store.export_csv({csv_out!r})
        i += 1
    """
)


def _start(script: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", script], env=env)


def _rows(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT count(*) FROM results").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_kill_a_sweep_and_an_export_at_random_points(tmp_path, monkeypatch):
    rng = random.Random(16)
    db = tmp_path / "r.db"
    json_out, csv_out = tmp_path / "rows.json", tmp_path / "rows.csv"
    ResultStore(db).close()
    for _ in range(2):
        procs = [
            _start(_SWEEP.format(db=str(db), grid=GRID)),
            _start(_EXPORT.format(db=str(db), json_out=str(json_out), csv_out=str(csv_out))),
        ]
        # 1. Wait until both are writing, then kill each at its own random moment.
        start, deadline = _rows(db), time.monotonic() + 120
        while _rows(db) < start + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        for proc in rng.sample(procs, 2):
            time.sleep(rng.uniform(0.0, 0.4))
            proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=60)
        # 2. The store is healthy and every export that exists is whole.
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        conn.close()
        if json_out.exists():
            assert all("kind" in row for row in json.loads(json_out.read_text()))
        if csv_out.exists():
            with csv_out.open(newline="", encoding="utf-8") as handle:
                table = list(csv.reader(handle))
            assert table and all(len(row) == len(table[0]) for row in table)
    # 3. The sweep resumes and counts every cell exactly once.
    monkeypatch.setattr(
        cells,
        "run_cell",
        lambda config, cancel=None: [
            {
                "kind": {"speed": "layer-speed"}.get(config["cell"], config["cell"]),
                "config": config,
                "metrics": {"accuracy": 0.5},
            }
        ],
    )
    result = sweep("digits-mlp", db=db, progress=False, **GRID)
    assert result.already_done + result.ran == result.total
    with ResultStore(db) as store:
        keys = Counter(r.cell_key for r in store.query(sweep_id=result.sweep_id))
    expected = {c.key for c in SweepConfig.make("digits-mlp", **GRID).cells()}
    assert set(keys) == expected and set(keys.values()) == {1}
