"""README.md is a front page: short, the two commands on its first screen, a picture of the
dashboard, a first example that runs, and one link per row of its table into the docs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_CHARS = 8_000
COMMANDS = ("./dev dashboard", "./dev test")
PICTURE = "docs/dashboard.png"


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_short(readme):
    assert len(readme) <= MAX_CHARS, f"README.md has {len(readme)} characters; at most {MAX_CHARS}"


def test_the_two_commands_are_on_the_first_screen(readme):
    first = readme.splitlines()[:40]
    for command in COMMANDS:
        assert any(line.startswith(command + " ") for line in first), command


def test_the_test_command_is_the_one_ci_runs(readme):
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"(?m)^\./dev test$", ci), ci
    assert re.search(r"(?m)^\./dev test\s+# ", readme), (
        "the README's test command is not ./dev test"
    )


def test_the_picture_of_the_dashboard_is_a_small_png(readme):
    assert f"]({PICTURE})" in readme.split("## Two commands")[0], "no picture above the commands"
    data = (ROOT / PICTURE).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{PICTURE} is not a PNG"
    assert len(data) < 300_000, f"{PICTURE} has {len(data)} bytes"


def test_every_row_of_what_it_does_links_to_one_docs_page(readme):
    table = readme.split("## What it does")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) >= 7, rows
    for row in rows[1:]:  # the first is the header
        links = re.findall(r"\]\((docs/[^)#]+\.md)\)", row)
        assert len(links) == 1, row


def test_the_first_example_runs(readme, tmp_path):
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    assert 8 <= len(code.strip().splitlines()) <= 14, code
    env = dict(os.environ, SPARSITY_EXPLORER_CACHE=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
