"""``--help`` answers without importing torch, for the command and every verb."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERBS = ["dashboard", "doctor", "sweep", "report", "store", "save", "export", "check"]
VERBS += ["bench", "tune"]

# Run the module as `python -m explorer.cli ...` does, then report what was imported.
PROBE = """
import runpy, sys
sys.argv = ["sparsity-explorer", *sys.argv[1:]]
try:
    runpy.run_module("explorer.cli", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted(m for m in ("torch", "numpy", "plotly", "ipywidgets") if m in sys.modules)
print("IMPORTED", code, ",".join(heavy) or "-", file=sys.stderr)
"""


def help_run(*argv: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    line = [ln for ln in done.stderr.splitlines() if ln.startswith("IMPORTED")]
    assert line, done.stderr
    _, code, heavy = line[-1].split()
    return int(code or 0), heavy, done.stdout


def test_top_level_help_imports_no_torch():
    code, heavy, out = help_run("--help")
    assert (code, heavy) == (0, "-")
    assert out.startswith("usage: sparsity-explorer")


@pytest.mark.parametrize("verb", VERBS)
def test_verb_help_imports_no_torch(verb):
    code, heavy, out = help_run(verb, "--help")
    assert (code, heavy) == (0, "-"), f"{verb} --help imported {heavy}"
    assert out.startswith(f"usage: sparsity-explorer {verb}"), out[:200]


def test_a_command_that_runs_does_import_torch(tmp_path):
    # The probe can see torch: running a verb for real loads it.
    code, heavy, _ = help_run("doctor", "digits-mlp", "--device", "sm_999")
    assert code == 2 and "torch" in heavy
