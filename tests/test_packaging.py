"""The wheel ships the CUDA C sources that explorer.gpu loads at run time, and its license.

The wheel is built from a copy of the source tree under ``tmp_path``: setuptools writes
``build/`` and ``*.egg-info/`` beside the sources it builds, and none of that may land in the
checkout (the session guard of the root ``conftest.py`` fails the run if it does).
"""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Build outputs, caches and local state that are no part of the source tree.
NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".whl",
    ".device",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "*.db-wal",
    "*.db-shm",
)


@pytest.mark.slow
def test_wheel_ships_the_kernels(tmp_path):
    kinds = (".cu", ".cuh", ".cpp")  # CUDA sources, their headers, the C++ operator
    sources = sorted(p.name for p in (ROOT / "kernels").iterdir() if p.suffix in kinds)
    assert sources, "kernels/ holds no CUDA sources"
    tree = tmp_path / "src"
    shutil.copytree(ROOT, tree, ignore=NOT_SOURCES, symlinks=True)
    out = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(tree),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = out.glob("sparsity_explorer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.split("/")[-1] for n in names if n.startswith("explorer/_kernels/"))
    assert shipped == sources
    assert "explorer/checks.py" in names
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "notebooks/")) for n in names)
    assert (tree / "tests").is_dir() and (tree / "notebooks").is_dir()  # present, not shipped
