"""Every notebook runs top to bottom (nbclient) with small parameters, in a kernel of this Python."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"

#: Small parameters per notebook (injected after the cell tagged ``parameters``).
SMALL = {
    "01_what_is_2to4.ipynb": {"rows": 8, "cols": 16, "big_rows": 256, "big_cols": 512},
    "02_pruning_real_models.ipynb": {
        "models": ["digits-mlp"],
        "methods": ["random", "magnitude", "wanda"],
        "calibration": 8,
    },
    "03_cusparselt_step_by_step.ipynb": {"out_features": 64, "in_features": 128, "tokens": 16},
    "04_accuracy_vs_speedup.ipynb": {"model": "digits-mlp", "tokens": 1024},
    "dashboard.ipynb": {"model": "digits-mlp"},
}


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory, monkeypatch_module):
    """A kernelspec that runs this interpreter (CI's fresh venv), found through JUPYTER_PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "explorer-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "explorer tests",
                "language": "python",
            }
        )
    )
    monkeypatch_module.setenv("JUPYTER_PATH", str(root))
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch_module.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    if "SPARSITY_EXPLORER_CACHE" not in os.environ:
        monkeypatch_module.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.mktemp("cache")))
    return "explorer-test"


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def with_parameters(nb, values: dict):
    """Insert a cell setting ``values`` right after the cell tagged ``parameters``."""
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    source = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(index + 1, cell)
    return nb


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_notebook_is_committed_clean(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "strip the outputs"
    assert any("parameters" in c.metadata.get("tags", []) for c in code)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_notebook_runs(name, kernel_name, tmp_path):
    nb = with_parameters(nbformat.read(NOTEBOOKS / name, as_version=4), SMALL[name])
    client = nbclient.NotebookClient(
        nb,
        kernel_name=kernel_name,
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", out
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                assert "Traceback" not in out.get("text", ""), out["text"]
