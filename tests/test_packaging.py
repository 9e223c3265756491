"""The wheel ships the CUDA C sources that explorer.gpu loads at run time."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_the_kernels(tmp_path):
    sources = sorted(p.name for p in (ROOT / "kernels").glob("*.cu"))
    assert sources, "kernels/ holds no CUDA sources"
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
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("sparsity_explorer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.split("/")[-1] for n in names if n.startswith("explorer/_kernels/"))
    assert shipped == sources
    assert "explorer/checks.py" in names
    assert not any(n.startswith(("tests/", "notebooks/")) for n in names)
