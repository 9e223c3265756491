"""Every speed figure the README quotes is a measured row of the shipped reference database.

A figure such as ``1.18x`` must equal (to the digits quoted) a speedup recorded in
``explorer/data/reference.db`` by a row that names the commit it was measured on, and the
README must name that commit and that GPU, so a reader can tell where the number comes from.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

import pytest

from explorer.results.store.location import reference_path

README = Path(__file__).resolve().parents[1] / "README.md"
#: A speed ratio as prose writes it: 1.18x, 0.80x, 1.2×.
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)\s?[x×](?!\w)")


def readme_figures(text: str) -> list[str]:
    """The speed figures quoted in ``text``, as written.

    Examples
    --------
    >>> readme_figures("1.02x / 1.18x, a 2x bound, 4x1024 tokens, 0.8× here")
    ['1.02', '1.18', '0.8']
    """
    return FIGURE.findall(text)


def measured_speedups(db: Path) -> list[dict]:
    """Every speedup recorded in ``db``: value, metric, commit, GPU and the row's label."""
    found = []
    # immutable: SQLite writes no -wal/-shm files beside the shipped database
    con = sqlite3.connect(f"file:{quote(str(Path(db).resolve()))}?mode=ro&immutable=1", uri=True)
    try:
        rows = con.execute(
            "SELECT id, kind, config, metrics, provenance, gpu FROM results WHERE status = 'ok'"
        ).fetchall()
    finally:
        con.close()
    for row_id, kind, config, metrics, provenance, gpu in rows:
        metrics, provenance = json.loads(metrics or "{}"), json.loads(provenance or "{}")
        label = json.loads(config or "{}").get("label", kind)
        for key, value in metrics.items():
            if "speedup" in key and isinstance(value, int | float):
                found.append(
                    {
                        "id": row_id,
                        "value": float(value),
                        "metric": key,
                        "commit": provenance.get("commit"),
                        "gpu": gpu or provenance.get("gpu") or "",
                        "label": label,
                    }
                )
    return found


def _gpu_named(gpu: str, text: str) -> bool:
    """Whether ``text`` names the GPU by its model (``H100`` for "NVIDIA H100 80GB HBM3")."""
    models = re.findall(r"\b[A-Z]\d{2,4}[A-Za-z]*\b", gpu)
    return any(m in text for m in models)


def test_the_pattern_finds_ratios_only():
    assert readme_figures("4 x 1024 tokens, 2x bound, 1.34x and 0.80 x") == ["1.34", "0.80"]


@pytest.fixture(scope="module")
def speedups():
    db = reference_path()
    if db is None:
        pytest.fail("explorer/data/reference.db is missing; it ships with the package")
    return measured_speedups(db)


def test_every_readme_speed_figure_is_a_measured_row(speedups):
    text = README.read_text(encoding="utf-8")
    figures = readme_figures(text)
    assert figures, "the README quotes no speed figure; update this test if that is intended"
    problems = []
    for figure in figures:
        digits = len(figure.split(".")[1])
        close = [s for s in speedups if abs(s["value"] - float(figure)) <= 0.5 * 10**-digits]
        labelled = [
            s for s in close if s["commit"] and s["commit"] in text and _gpu_named(s["gpu"], text)
        ]
        if not close:
            problems.append(f"{figure}x: no speedup in the reference database rounds to it")
        elif not labelled:
            rows = ", ".join(
                f"#{s['id']} {s['label']} ({s['commit'] or 'no commit'})" for s in close
            )
            problems.append(
                f"{figure}x: matches {rows}, but none is named with its commit and GPU in the README"
            )
    assert not problems, "\n".join(problems)
