"""The pattern panel: is a layer's mask N:M valid, which 2:4 patterns occur, which rows break it."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from explorer import _html

__all__ = ["PatternPanel", "row_validity"]


def row_validity(mask: torch.Tensor, n: int = 2, m: int = 4, max_rows: int = 256) -> np.ndarray:
    """Fraction of valid N:M groups per row, averaged over buckets of rows (at most ``max_rows``).

    A group is valid when at most ``n`` of its ``m`` entries are kept. Columns past the last
    whole group are ignored.

    Parameters
    ----------
    mask : torch.Tensor
        2-D mask, bool or a weight whose zeros count as pruned.
    n, m : int
        The N:M pattern.
    max_rows : int
        The most values returned: rows are averaged in buckets of ``ceil(rows / max_rows)``.

    Returns
    -------
    numpy.ndarray
        float32 fractions, one per bucket of rows (empty when there is no whole group).

    Examples
    --------
    >>> import torch
    >>> mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    >>> row_validity(mask).tolist()
    [1.0, 0.0]
    """
    mask = mask if mask.dtype == torch.bool else mask != 0
    rows, cols = mask.shape
    groups = cols // m
    if groups == 0 or rows == 0:
        return np.ones(0, np.float32)
    kept = mask[:, : groups * m].reshape(rows, groups, m).sum(-1, dtype=torch.int16)
    per_row = (kept <= n).float().mean(1)
    bucket = math.ceil(rows / max_rows)
    pad = (-rows) % bucket
    if pad:
        per_row = torch.cat([per_row, per_row[-1:].expand(pad)])
    return per_row.reshape(-1, bucket).mean(1).cpu().numpy().astype(np.float32)


def _strip_svg(values: np.ndarray, width: int = 512, height: int = 14) -> str:
    """An inline SVG strip, one rectangle per bucket, green (valid) to red (invalid)."""
    if len(values) == 0:
        return ""
    step = width / len(values)
    rects = []
    for i, v in enumerate(values):
        red, green = int(207 * (1 - v) + 26 * v), int(34 * (1 - v) + 127 * v)
        rects.append(
            f'<rect x="{i * step:.2f}" y="0" width="{step + 0.05:.2f}" height="{height}" '
            f'fill="rgb({red},{green},55)"/>'
        )
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="per-row validity">{"".join(rects)}</svg>'
    )


class PatternPanel:
    """Pattern checks for one layer, from :func:`explorer.checks.check_pattern`.

    Examples
    --------
    >>> import torch
    >>> panel = PatternPanel()
    >>> panel.update(torch.tensor([[1.0, 0.0, 2.0, 0.0]] * 4), "2:4", name="fc")
    >>> panel.summary()["valid"]
    True
    """

    def __init__(self) -> None:
        self.name = ""
        self.pattern = "2:4"
        self.report = None
        self.rows = np.ones(0, np.float32)
        self.message = "no layer selected"

    def update(self, tensor: torch.Tensor, pattern: str = "2:4", name: str = "") -> None:
        """Check ``tensor`` (a mask or a weight with zeros in place) against ``pattern``.

        Parameters
        ----------
        tensor : torch.Tensor
            A mask, or a weight with zeros in place.
        pattern : str, optional
            The pattern's name.
        name : str, optional
            The layer's name.
        """
        self.name, self.pattern, self.report = name, str(pattern), None
        try:
            from explorer.checks import check_pattern
        except ImportError:
            self.message = "pattern checks are not available in this installation yet"
            return
        try:
            self.report = check_pattern(tensor, pattern)
        except ValueError as exc:
            self.message = str(exc)
            return
        pat = getattr(self.report, "pattern", None)
        if getattr(pat, "kind", None) == "nm" and tensor.dim() == 2:
            self.rows = row_validity(tensor, pat.n, pat.m)
        else:
            self.rows = np.ones(0, np.float32)
        self.message = ""

    def summary(self) -> dict:
        """Validity, transposed validity, density and the pattern histogram as plain values."""
        r = self.report
        if r is None:
            return {"message": self.message}
        histogram = getattr(r, "histogram", None)
        if isinstance(histogram, Mapping):
            histogram = {str(k): int(v) for k, v in histogram.items()}
        elif histogram is not None:
            histogram = [int(v) for v in np.asarray(histogram).ravel()]
        return {
            "valid": bool(r.valid),
            "valid_fraction": float(r.valid_fraction),
            "transpose_valid": _maybe_bool(getattr(r, "transpose_valid", None)),
            "density": float(r.density),
            "histogram": histogram,
            "violations": _count(getattr(r, "violations", None)),
        }

    def html(self) -> str:
        """The panel as HTML: badges, a table and the per-row validity strip."""
        if self.report is None:
            return f"<div><b>{_html.escape(self.name)}</b> {_html.escape(self.message)}</div>"
        s = self.summary()
        level = "ok" if s["valid"] else "error"
        verdict = "valid" if s["valid"] else "breaks the pattern"
        tv = s["transpose_valid"]
        rows = [
            ["pattern", _html.escape(self.pattern)],
            ["status", _html.badge(verdict, level)],
            ["valid groups", f"{s['valid_fraction']:.1%}"],
            ["transposed", "-" if tv is None else _html.badge(str(tv), "ok" if tv else "warn")],
            ["density", f"{s['density']:.1%}"],
        ]
        if s["violations"] is not None:
            rows.append(["violating groups", f"{s['violations']:,}"])
        hist = s["histogram"]
        if isinstance(hist, dict) and hist:
            total = sum(hist.values()) or 1
            cells = " ".join(
                f"<code>{_html.escape(k)}</code>&nbsp;{v / total:.0%}" for k, v in hist.items()
            )
            rows.append(["2:4 patterns", cells])
        elif isinstance(hist, list) and hist:
            rows.append(["2:4 patterns", _html.escape(hist)])
        table = _html.table(["", ""], rows, caption=self.name, raw_columns=(1,))
        strip = _strip_svg(self.rows)
        return (
            f"<div class='pattern-panel'>{table}<div style='font-size:11px'>per-row validity "
            f"(top to bottom, green = every group valid)</div>{strip}</div>"
        )

    def __repr__(self) -> str:
        if self.report is None:
            return f"PatternPanel({self.name!r}: {self.message})"
        s = self.summary()
        return (
            f"PatternPanel({self.name!r} {self.pattern}: valid={s['valid']}, "
            f"{s['valid_fraction']:.1%} groups valid, density {s['density']:.1%})"
        )

    def _repr_html_(self) -> str:
        return self.html()


def _maybe_bool(value) -> bool | None:
    return None if value is None else bool(value)


def _count(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return int(value.sum()) if value.dtype == torch.bool else int(value.numel())
    if isinstance(value, int):
        return value
    try:
        return len(value)
    except TypeError:
        return None
