"""The sparsity-explorer command line: --help for every verb, one-line errors, real runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer import cli
from explorer.store import ResultStore

ROOT = Path(__file__).resolve().parents[1]


def run(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("verb", ["dashboard", "doctor", "bench", "sweep", "report"])
def test_every_verb_has_help(verb, capsys):
    code, out, _ = run([verb, "--help"], capsys)
    assert code == 0 and "usage:" in out and verb in out


def test_top_level_help_lists_the_verbs(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for verb in ("dashboard", "doctor", "bench", "sweep", "report"):
        assert verb in out


def test_errors_are_one_line_with_status_2(capsys, tmp_path):
    code, _, err = run(["sweep", "--patterns", "3:x", "--db", str(tmp_path / "r.db")], capsys)
    assert code == 2 and err.count("\n") == 1 and "'3:x'" in err and "Traceback" not in err
    code, _, err = run(["sweep", "--nope"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--nope" in err
    bad = tmp_path / "notes.db"
    bad.write_text("not a database")
    code, _, err = run(["report", "--db", str(bad), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 2 and err.count("\n") == 1 and str(bad) in err and "new path" in err
    code, _, err = run(["doctor", "resnet"], capsys)
    assert code == 2 and "resnet" in err


def test_dashboard_without_voila_names_the_install(capsys, monkeypatch, tmp_path):
    notebook = tmp_path / "dash.ipynb"
    notebook.write_text("{}")
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda n: None if n == "voila" else real(n)
    )
    code, _, err = run(["dashboard", "--notebook", str(notebook)], capsys)
    assert code == 2 and 'pip install "sparsity-explorer[widgets]"' in err
    code, _, err = run(["dashboard", "--notebook", str(tmp_path / "missing.ipynb")], capsys)
    assert code == 2 and "missing.ipynb" in err


def test_doctor_prints_the_report(capsys):
    code, out, _ = run(["doctor", "digits-mlp", "--capability", "9.0", "--tokens", "64"], capsys)
    assert code == 0 and "DoctorReport" in out and "sm_90" in out


def test_report_verb_writes_html_and_exports(capsys, tmp_path):
    db = tmp_path / "r.db"
    with ResultStore(db) as store:
        store.record(
            "prune",
            {"model": "m", "method": "magnitude", "pattern": "2:4"},
            {"metric": "accuracy", "accuracy": 0.9},
        )
    out = tmp_path / "r.html"
    code, text, _ = run(
        [
            "report",
            "--db",
            str(db),
            "--out",
            str(out),
            "--csv",
            str(tmp_path / "r.csv"),
            "--json",
            str(tmp_path / "r.json"),
        ],
        capsys,
    )
    assert code == 0 and "wrote" in text
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "r.csv").exists() and (tmp_path / "r.json").exists()


def test_tiny_real_sweep_via_python_dash_m(tmp_path):
    db = tmp_path / "results.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [
        sys.executable,
        "-m",
        "explorer",
        "sweep",
        "--model",
        "digits-mlp",
        "--methods",
        "magnitude,random",
        "--patterns",
        "2:4,4:8",
        "--db",
        str(db),
        "--no-progress",
    ]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "6 cells" in first.stdout and "0 failed" in first.stdout
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    # the speed cell was skipped (no GPU here) and is tried again; the rest is not rerun
    assert "5 already done, 1 ran" in again.stdout and "1 skipped" in again.stdout
    with ResultStore(db) as store:
        assert len(store.query("prune", status="ok")) == 4
        assert len(store.query("dense")) == 1
