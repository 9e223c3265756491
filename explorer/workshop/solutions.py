r"""Fill a workshop notebook's exercise cells with the solutions kept beside it.

A notebook marks each exercise cell with a tag ``exercise-N.M``; its solutions live in
``notebooks/solutions/<notebook name>.py``, one cell per exercise, each opened by a line
``# %% exercise N.M`` (the percent format editors and jupytext read as cells). CI runs every
notebook with its solutions filled in; an instructor can write a solved copy:

    python -m explorer.workshop.solutions notebooks/01_what_is_2to4.ipynb solved.ipynb

Works on the notebook's JSON with the standard library only.

Examples
--------
>>> text = "# %% exercise 1.1\nanswer = 6\n"
>>> read_solutions(text)
{'1.1': 'answer = 6'}
>>> nb = {"cells": [{"cell_type": "code", "metadata": {"tags": ["exercise-1.1"]},
...                  "source": "answer = ...", "outputs": []}]}
>>> fill(nb, {"1.1": "answer = 6"})["cells"][0]["source"]
'answer = 6'
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["exercise_ids", "fill", "fill_file", "read_solutions", "solutions_path"]

_MARKER = re.compile(r"^# %% exercise (\d+\.\d+)\s*$")
TAG_PREFIX = "exercise-"


def read_solutions(text: str) -> dict[str, str]:
    """Exercise number -> solution source, from a percent-format solutions file's text.

    Lines before the first marker (a docstring, imports for editors) are ignored.

    Parameters
    ----------
    text : str
        The solutions file's text.

    Returns
    -------
    dict of str to str
        ``{"N.M": source}``, each source without leading or trailing blank lines.

    Raises
    ------
    ValueError
        An exercise that appears twice.
    """
    solutions: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _MARKER.match(line)
        if match:
            number = match.group(1)
            if number in solutions:
                raise ValueError(f"exercise {number} has two solutions; keep one")
            current = solutions[number] = []
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v).strip("\n") for k, v in solutions.items()}


def exercise_ids(nb: dict[str, Any]) -> list[str]:
    """The exercise numbers tagged in a notebook, in cell order.

    Parameters
    ----------
    nb : dict
        The notebook's JSON.

    Returns
    -------
    list of str
        ``"N.M"`` of every ``exercise-N.M`` tag.
    """
    ids = []
    for cell in nb["cells"]:
        for tag in cell.get("metadata", {}).get("tags", []):
            if tag.startswith(TAG_PREFIX):
                ids.append(tag.removeprefix(TAG_PREFIX))
    return ids


def fill(nb: dict[str, Any], solutions: dict[str, str]) -> dict[str, Any]:
    """A copy of ``nb`` with every exercise cell's source replaced by its solution.

    Parameters
    ----------
    nb : dict
        The notebook's JSON (not changed).
    solutions : dict of str to str
        ``{"N.M": source}``, as :func:`read_solutions` returns.

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        An exercise without a solution, or a solution for an exercise the notebook lacks.
    """
    ids = exercise_ids(nb)
    missing = [i for i in ids if i not in solutions]
    extra = sorted(set(solutions) - set(ids))
    if missing or extra:
        raise ValueError(
            f"solutions do not match the notebook: no solution for {missing}, "
            f"solutions for exercises it lacks: {extra}"
        )
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        for tag in cell.get("metadata", {}).get("tags", []):
            if tag.startswith(TAG_PREFIX):
                cell["source"] = solutions[tag.removeprefix(TAG_PREFIX)]
    return out


def solutions_path(notebook: str | Path) -> Path:
    """Where a notebook's solutions live: ``solutions/<stem>.py`` beside it.

    Parameters
    ----------
    notebook : str or Path
        The notebook's path.

    Returns
    -------
    Path
    """
    notebook = Path(notebook)
    return notebook.parent / "solutions" / f"{notebook.stem}.py"


def fill_file(notebook: str | Path, dest: str | Path) -> Path:
    """Write ``notebook`` with its solutions filled in to ``dest`` (never over the original).

    Parameters
    ----------
    notebook : str or Path
        The workshop notebook; its solutions are read from :func:`solutions_path`.
    dest : str or Path
        Where the solved copy is written (replaced if it exists).

    Returns
    -------
    Path
        ``dest``.

    Raises
    ------
    ValueError
        ``dest`` is the notebook itself, or the solutions do not match it (see :func:`fill`).
    """
    notebook, dest = Path(notebook), Path(dest)
    if dest.resolve() == notebook.resolve():
        raise ValueError(f"{dest} is the workshop notebook itself; write the solved copy elsewhere")
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    solved = fill(nb, read_solutions(solutions_path(notebook).read_text(encoding="utf-8")))
    dest.write_text(json.dumps(solved, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> int:
    """``python -m explorer.workshop.solutions NOTEBOOK DEST``.

    Parameters
    ----------
    argv : list of str, optional
        ``[NOTEBOOK, DEST]`` (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, or 2 on a wrong number of arguments.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m explorer.workshop.solutions NOTEBOOK DEST", file=sys.stderr)
        return 2
    print(fill_file(*args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
