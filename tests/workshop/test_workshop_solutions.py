"""Solutions live beside the notebooks and fill exactly their exercise cells."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

from explorer.workshop import solutions
from explorer.workshop.solutions import exercise_ids, fill, fill_file, read_solutions
from explorer.workshop.verdict import EXERCISES

ROOT = Path(__file__).resolve().parents[2]
WORKSHOP = sorted((ROOT / "notebooks").glob("0*.ipynb"))


def _nb(*tags):
    return {
        "cells": [
            {"cell_type": "code", "metadata": {"tags": list(t)}, "source": "x = ...", "outputs": []}
            for t in tags
        ]
    }


def test_read_solutions_splits_on_markers_and_ignores_the_preamble():
    text = '"""doc"""\nimport math\n\n# %% exercise 1.1\na = 1\n\n# %% exercise 1.2\nb = 2\nc = 3\n'
    assert read_solutions(text) == {"1.1": "a = 1", "1.2": "b = 2\nc = 3"}
    with pytest.raises(ValueError, match=r"exercise 1\.1 has two solutions"):
        read_solutions("# %% exercise 1.1\na\n# %% exercise 1.1\nb\n")


def test_fill_replaces_only_exercise_cells_and_leaves_the_original():
    nb = _nb(["exercise-1.1"], ["check"], [])
    solved = fill(nb, {"1.1": "x = 6"})
    assert [c["source"] for c in solved["cells"]] == ["x = 6", "x = ...", "x = ..."]
    assert nb["cells"][0]["source"] == "x = ..."


def test_fill_refuses_solutions_that_do_not_match():
    with pytest.raises(ValueError, match=r"no solution for \['1.2'\]"):
        fill(_nb(["exercise-1.1"], ["exercise-1.2"]), {"1.1": "x = 6"})
    with pytest.raises(ValueError, match=r"exercises it lacks: \['9.9'\]"):
        fill(_nb(["exercise-1.1"]), {"1.1": "x = 6", "9.9": "y = 1"})


def test_fill_file_writes_a_solved_copy_never_over_the_notebook(tmp_path):
    dest = fill_file(WORKSHOP[0], tmp_path / "solved.ipynb")
    solved = json.loads(dest.read_text())
    assert exercise_ids(solved) == exercise_ids(json.loads(WORKSHOP[0].read_text()))
    with pytest.raises(ValueError, match="workshop notebook itself"):
        fill_file(WORKSHOP[0], WORKSHOP[0])
    assert solutions.main([]) == 2


def test_there_are_four_workshop_notebooks():
    assert [p.name[:3] for p in WORKSHOP] == ["01_", "02_", "03_", "04_"]


@pytest.mark.parametrize("path", WORKSHOP, ids=lambda p: p.name)
def test_each_exercise_has_a_solution_a_check_and_a_check_cell(path):
    nb = json.loads(path.read_text())
    ids = exercise_ids(nb)
    prefix = str(int(path.name[:2]))
    assert ids and all(i.split(".")[0] == prefix for i in ids)
    assert sorted(read_solutions(solutions.solutions_path(path).read_text())) == sorted(ids)
    assert all(i in EXERCISES for i in ids)
    cells = nb["cells"]
    for i, cell in enumerate(cells):
        if any(t.startswith("exercise-") for t in cell["metadata"].get("tags", [])):
            follow = cells[i + 1]
            assert "check" in follow["metadata"].get("tags", []), f"no check cell after {ids}"
            number = cell["metadata"]["tags"][0].removeprefix("exercise-")
            assert EXERCISES[number].__name__ in "".join(follow["source"])


def test_every_registered_exercise_is_in_a_notebook():
    used = {i for p in WORKSHOP for i in exercise_ids(json.loads(p.read_text()))}
    assert used == set(EXERCISES)


def test_module_examples_run():
    failures, tried = doctest.testmod(solutions)
    assert tried and not failures
