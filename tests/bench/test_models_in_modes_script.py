"""``benchmarks/models_in_modes.py`` keeps every row reached, on a CPU (the benchmark a stand-in)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "models_in_modes.py"


def test_a_run_stopped_mid_model_keeps_the_rows_it_reached(tmp_path, monkeypatch):
    out = tmp_path / "rows.json"
    calls = []

    def stand_in(name, dtype, runs, log, on_row):
        calls.append(name)
        rows = [{"model": name, "label": f"{name} {b}x{s}"} for b, s in runs]
        for i, row in enumerate(rows):
            if name == "second" and i == 1:
                raise KeyboardInterrupt  # what a time limit does to the process
            on_row(row)
        rows[0]["timings"] = "added after the last run"
        return rows

    import explorer.bench as bench
    import explorer.bench.models as models

    monkeypatch.setattr(models, "bench_whole_model", stand_in)
    monkeypatch.setattr(bench, "environment", lambda: {"device": "stand-in"})
    argv = ["models_in_modes.py", "--models", "first,second", "--runs", "4x8,1x1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(out)])
    with pytest.raises(KeyboardInterrupt):
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert calls == ["first", "second"]
    written = json.loads(out.read_text())
    assert written["env"] == {"device": "stand-in"}
    # the command a page made from these rows names (bench --from-json)
    assert written["command"] == (
        f"python benchmarks/models_in_modes.py --models first,second --runs 4x8,1x1 --json {out}"
    )
    labels = [row["label"] for row in written["rows"]]
    assert labels == ["first 4x8", "first 1x1", "second 4x8"]
    assert written["rows"][0]["timings"] == "added after the last run"  # completed rows rewritten
