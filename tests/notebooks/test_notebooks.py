"""Every notebook runs top to bottom (nbclient), in a kernel of this Python.

Each notebook runs with small parameters as committed: the workshop's exercises unanswered, whose
check cells must then say "not yet" rather than fail. The workshop notebooks also run with their
solutions filled in (``notebooks/solutions/``) and the parameters they ship with, as a participant
runs them, and every check cell must then say "right".
"""

from __future__ import annotations

import json
import os
import sys
import time
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
        "model": "digits-mlp",
        "methods": ["random", "magnitude"],
        "patterns": ["2:4"],
        "calibration": 16,
        "finetune_steps": 5,
    },
    "03_cusparselt_step_by_step.ipynb": {"out_features": 64, "in_features": 128, "tokens": 16},
    "04_accuracy_vs_speedup.ipynb": {
        "methods": ["magnitude"],
        "patterns": ["2:4"],
        "calibration": 16,
        "tokens": 1024,
    },
    "dashboard.ipynb": {"model": "digits-mlp"},
}
#: The workshop, in order; each has its solutions in ``notebooks/solutions/<stem>.py``.
WORKSHOP = sorted(name for name in SMALL if name[:2].isdigit())


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory, monkeypatch_module, jupyter_dirs):
    """A kernelspec that runs this interpreter (CI's fresh venv), found through JUPYTER_PATH.

    IPython's and Jupyter's own folders go under the temporary folder too (``jupyter_dirs``).
    """
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
    for var, folder in jupyter_dirs.items():
        monkeypatch_module.setenv(var, folder)
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


def execute(nb, kernel_name):
    """Run ``nb`` in place; fail on any error output. Returns the seconds it took."""
    client = nbclient.NotebookClient(
        nb,
        kernel_name=kernel_name,
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    start = time.perf_counter()
    client.execute()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", out
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                assert "Traceback" not in out.get("text", ""), out["text"]
    return time.perf_counter() - start


def check_outputs(nb) -> list[str]:
    """The text every check cell displayed, one string per check cell."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type == "code" and "check" in cell.metadata.get("tags", []):
            shown = [o.get("data", {}).get("text/plain", "") for o in cell.outputs]
            texts.append(" ".join(shown))
    return texts


@pytest.mark.parametrize("name", sorted(SMALL))
def test_notebook_runs(name, kernel_name):
    nb = with_parameters(nbformat.read(NOTEBOOKS / name, as_version=4), SMALL[name])
    execute(nb, kernel_name)
    if name in WORKSHOP:
        said = check_outputs(nb)
        assert said, "a workshop notebook without check cells"
        for text in said:
            assert ": not yet. " in text and "Hint:" in text, text


@pytest.mark.parametrize("name", WORKSHOP)
def test_workshop_notebook_runs_solved(name, kernel_name):
    from explorer.workshop.solutions import fill, read_solutions, solutions_path

    path = NOTEBOOKS / name
    answers = read_solutions(solutions_path(path).read_text())
    solved = nbformat.from_dict(fill(nbformat.read(path, as_version=4), answers))
    seconds = execute(solved, kernel_name)
    said = check_outputs(solved)
    assert said and all(": right." in text for text in said), said
    print(f"{name} with its solutions ran in {seconds:.1f} s")
