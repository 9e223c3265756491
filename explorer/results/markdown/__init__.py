"""Markdown: the one table writer and number format, and the pages built from them.

- :mod:`explorer.results.markdown.bench`: the benchmark's tables and page.
- :mod:`explorer.results.markdown.models`: the benchmark's whole-model table.
- :mod:`explorer.results.markdown.serving`: the benchmark's ``generate()`` and host-cost tables.
- :mod:`explorer.results.markdown.accuracy`: the accuracy experiment's tables.

Examples
--------
>>> print(markdown(["a", "b"], [[1, 2.5]]))
| a | b |
| --- | --- |
| 1 | 2.500 |
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["fmt", "markdown", "speedup_cell"]


def fmt(value: object, spec: str = ".3f", missing: str = "-") -> str:
    """A table cell: a float in ``spec``, ``missing`` for None or NaN, anything else as text.

    Parameters
    ----------
    value : object
        The cell's value.
    spec : str
        The :func:`format` spec of a float.
    missing : str
        The text of None or NaN.

    Returns
    -------
    str

    Examples
    --------
    >>> fmt(2.5), fmt(None), fmt(float("nan"), missing="n/a"), fmt(12345.6, ".4g"), fmt("x")
    ('2.500', '-', 'n/a', '1.235e+04', 'x')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def markdown(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table from a header and rows of cells (each cell through :func:`fmt`).

    Parameters
    ----------
    header : sequence of str
        The column titles.
    rows : iterable of sequences
        The cells of each row, in the header's order.

    Returns
    -------
    str
        The table's lines, header and separator first, joined by newlines (no final newline).

    Examples
    --------
    >>> print(markdown(["a", "b"], [[1, 0.5]]))
    | a | b |
    | --- | --- |
    | 1 | 0.500 |
    """
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def speedup_cell(value: float | None, control: float | None = None) -> str:
    """A speed-up cell: ``"1.23x"``, or ``"-"`` where nothing was measured.

    Parameters
    ----------
    value : float or None
        The ratio over the baseline.
    control : float or None, optional
        The A/A ratio measured beside it (an unchanged copy of the baseline), shown after it.

    Returns
    -------
    str

    Examples
    --------
    >>> speedup_cell(1.234), speedup_cell(None), speedup_cell(1.01, control=0.984)
    ('1.23x', '-', '1.01x (A/A 0.98x)')
    """
    cell = "-" if value is None else f"{value:.2f}x"
    return cell if not control else f"{cell} (A/A {control:.2f}x)"
