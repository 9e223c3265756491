"""``./dev dashboard`` serves on 127.0.0.1 unless asked for another address.

The script runs from a copy in a temporary directory, against a stand-in ``.venv`` whose
``voila`` only records its arguments; ``PATH`` holds nothing but ``dirname``, so the script
finds no ``dpkg-query`` and installs no system package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash")
DIRNAME = shutil.which("dirname")

pytestmark = pytest.mark.skipif(
    BASH is None or DIRNAME is None, reason="needs bash and dirname to run the dev script"
)


def _stub(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "dev", root / "dev")
    (root / "pyproject.toml").write_text("")
    stamp = root / ".venv" / ".installed-all"
    stamp.write_text("")
    os.utime(root / "pyproject.toml", (1_000_000, 1_000_000))  # older than the stamp
    venv = root / ".venv" / "bin"
    _stub(venv / "python", "exit 0")
    _stub(venv / "voila", f'printf "%s\\n" "$@" > "{tmp_path}/voila-args"')
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "dirname").symlink_to(DIRNAME)
    for name in ("apt-get", "sudo", "pip"):  # never reached; would leave a mark if they were
        _stub(tools / name, f'touch "{tmp_path}/installed"; exit 1')
    return root


def _run(checkout: Path, *args: str, env: dict[str, str] | None = None):
    result = subprocess.run(
        [BASH, str(checkout / "dev"), "dashboard", *args],
        env={"PATH": str(checkout.parent / "tools"), "HOME": str(checkout.parent), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not (checkout.parent / "installed").exists()
    record = checkout.parent / "voila-args"
    voila = record.read_text().split() if record.exists() else None
    return result, voila


def test_the_dashboard_listens_on_this_machine_only_by_default(checkout):
    result, voila = _run(checkout)
    assert result.returncode == 0, result.stderr
    assert "--Voila.ip=127.0.0.1" in voila and "--Voila.ip=0.0.0.0" not in voila
    assert "this machine only" in result.stdout


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--ip", "0.0.0.0"), None),
        (("--ip=0.0.0.0",), None),
        ((), {"DASHBOARD_IP": "0.0.0.0"}),
        (("--ip", "0.0.0.0"), {"DASHBOARD_IP": "10.1.2.3"}),  # the option wins
    ],
)
def test_another_address_only_when_asked(checkout, args, env):
    result, voila = _run(checkout, *args, env=env)
    assert result.returncode == 0, result.stderr
    assert "--Voila.ip=0.0.0.0" in voila
    assert "no password" in result.stdout


@pytest.mark.parametrize("args", [("--ip",), ("--port", "80"), ("--ip=",)])
def test_a_bad_option_prints_the_usage_and_serves_nothing(checkout, args):
    result, voila = _run(checkout, *args)
    assert result.returncode == 2 and voila is None
    assert "usage: ./dev dashboard [--ip ADDRESS]" in result.stderr
    assert "DASHBOARD_IP=0.0.0.0" in result.stderr and "127.0.0.1" in result.stderr
