"""Tiny HTML builders shared by the result objects' ``_repr_html_``."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

__all__ = ["badge", "escape", "table"]

_STYLE = (
    "border-collapse:collapse;font-family:var(--jp-code-font-family,monospace);"
    "font-size:12px;margin:4px 0"
)
_CELL = "padding:2px 8px;border-bottom:1px solid #ddd;text-align:left"

_BADGE_COLOURS = {"ok": "#1a7f37", "warn": "#9a6700", "error": "#cf222e", "info": "#0969da"}


def escape(value: object) -> str:
    """HTML-escape ``str(value)``.

    Parameters
    ----------
    value : object
        The value.

    Returns
    -------
    str
    """
    return html.escape(str(value))


def badge(text: str, level: str = "info") -> str:
    """A small coloured label; ``level`` is one of ok, warn, error, info.

    Parameters
    ----------
    text : str
        The label.
    level : str, optional
        Its colour: ok, warn, error or info (anything else: info).

    Returns
    -------
    str
    """
    colour = _BADGE_COLOURS.get(level, _BADGE_COLOURS["info"])
    return (
        f'<span style="background:{colour};color:white;border-radius:3px;'
        f'padding:0 5px;font-size:11px">{escape(text)}</span>'
    )


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    caption: str | None = None,
    raw_columns: Iterable[int] = (),
) -> str:
    """An HTML table; cells are escaped except in the columns listed in ``raw_columns``.

    Parameters
    ----------
    header : Sequence[str]
        The column titles.
    rows : Iterable of Sequence[object]
        The rows of cells.
    caption : str or None, optional
        The caption.
    raw_columns : Iterable[int], optional
        Indices of columns whose cells are HTML already.

    Returns
    -------
    str
    """
    raw = set(raw_columns)
    head = "".join(f'<th style="{_CELL}">{escape(h)}</th>' for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td style="{_CELL}">{cell if i in raw else escape(cell)}</td>'
            for i, cell in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    cap = f"<caption style='text-align:left'><b>{escape(caption)}</b></caption>" if caption else ""
    return f'<table style="{_STYLE}">{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
