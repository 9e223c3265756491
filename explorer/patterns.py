"""Sparsity patterns: what may stay nonzero in a weight matrix.

A :class:`Pattern` is a small frozen value parsed from a string:

============================  ==============================================================
``"2:4"``, ``"4:8"``, ``"N:M"``  at most N nonzeros in every group of M consecutive inputs of a row
``"unstructured:0.5"``         50% zeros anywhere in the layer
``"unstructured-row:0.5"``     50% zeros in every output row
``"block16:0.5"``              50% of the 16 x 16 blocks entirely zero
``"rows:0.25"``                25% of the output rows entirely zero
============================  ==============================================================

Weights are laid out as PyTorch stores them: ``(out_features, in_features)``; N:M groups run
along the input dimension (the last one), which is what sparse tensor cores accelerate.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass

__all__ = ["KINDS", "Pattern", "as_pattern"]

KINDS = ("nm", "unstructured", "block", "rows")

_NM = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
_UNSTRUCTURED = re.compile(r"^\s*unstructured(-row)?\s*:\s*(\S*)\s*$")
_BLOCK = re.compile(r"^\s*block\s*(\d+)(?:x(\d+))?\s*:\s*(\S*)\s*$")
_ROWS = re.compile(r"^\s*rows\s*:\s*(\S*)\s*$")

_EXAMPLES = '"2:4", "4:8", "unstructured:0.5", "unstructured-row:0.5", "block16:0.5", "rows:0.25"'


def _sparsity(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value < 1.0:
        raise ValueError(
            f"pattern {spec!r}: sparsity {text!r} must be a fraction of zeros in [0, 1), "
            f'e.g. "unstructured:0.5" for half the weights zero'
        )
    return value


@dataclass(frozen=True)
class Pattern:
    """A sparsity pattern; build one with :meth:`Pattern.parse`.

    Parameters
    ----------
    kind : {"nm", "unstructured", "block", "rows"}
        Which family the pattern belongs to.
    n, m : int, optional
        For ``kind="nm"``: keep at most ``n`` of every ``m`` consecutive inputs.
    sparsity : float, optional
        For the other kinds: the fraction of weights (or blocks, or rows) that are zero.
    block : int, optional
        For ``kind="block"``: the side of the square block.
    per_row : bool
        For ``kind="unstructured"``: apply the sparsity to each output row separately.

    Examples
    --------
    >>> p = Pattern.parse("2:4")
    >>> p
    Pattern('2:4')
    >>> p.density
    0.5
    >>> Pattern.parse("block16:0.75").block
    16
    """

    kind: str
    n: int | None = None
    m: int | None = None
    sparsity: float | None = None
    block: int | None = None
    per_row: bool = False

    @classmethod
    def parse(cls, spec: str | Pattern) -> Pattern:
        """Parse a pattern string (or return a :class:`Pattern` unchanged).

        Parameters
        ----------
        spec : str or Pattern
            One of ``"N:M"``, ``"unstructured:S"``, ``"unstructured-row:S"``, ``"blockB:S"``
            or ``"rows:S"`` with ``S`` the fraction of zeros.

        Returns
        -------
        Pattern

        Raises
        ------
        ValueError
            If the string is not a known pattern or its numbers are out of range.
        TypeError
            If ``spec`` is neither a string nor a Pattern.

        Examples
        --------
        >>> Pattern.parse("4:8").explain()
        'Keep at most 4 of every 8 consecutive weights along each row (50% zeros).'
        """
        if isinstance(spec, Pattern):
            return spec
        if not isinstance(spec, str):
            raise TypeError(
                f"pattern must be a string or Pattern, got {type(spec).__name__} {spec!r}; "
                f"use one of {_EXAMPLES}"
            )
        if match := _NM.match(spec):
            n, m = int(match.group(1)), int(match.group(2))
            if not 1 <= n < m:
                raise ValueError(
                    f"pattern {spec!r}: N:M needs 1 <= N < M (keep N of every M weights), "
                    f'got N={n}, M={m}; e.g. "2:4" or "4:8"'
                )
            if m > 32:
                raise ValueError(f"pattern {spec!r}: group size M={m} is above the supported 32")
            return cls(kind="nm", n=n, m=m)
        if match := _UNSTRUCTURED.match(spec):
            per_row = match.group(1) is not None
            return cls(
                kind="unstructured", sparsity=_sparsity(match.group(2), spec), per_row=per_row
            )
        if match := _BLOCK.match(spec):
            side, other = int(match.group(1)), match.group(2)
            if other is not None and int(other) != side:
                raise ValueError(
                    f'pattern {spec!r}: only square blocks are supported, e.g. "block{side}:0.5"'
                )
            if side < 1:
                raise ValueError(f"pattern {spec!r}: block side must be at least 1")
            return cls(kind="block", block=side, sparsity=_sparsity(match.group(3), spec))
        if match := _ROWS.match(spec):
            return cls(kind="rows", sparsity=_sparsity(match.group(1), spec))
        raise ValueError(f"unknown sparsity pattern {spec!r}; expected one of {_EXAMPLES}")

    # ------------------------------------------------------------------ views
    @property
    def is_nm(self) -> bool:
        """True for N:M patterns."""
        return self.kind == "nm"

    @property
    def is_24(self) -> bool:
        """True for the 2:4 pattern that sparse tensor cores accelerate."""
        return self.kind == "nm" and self.n == 2 and self.m == 4

    @property
    def density(self) -> float:
        """The fraction of weights kept when a full-density weight is pruned to this pattern."""
        if self.kind == "nm":
            return self.n / self.m
        return 1.0 - self.sparsity

    @property
    def name(self) -> str:
        """The canonical string, which :meth:`parse` reads back."""
        if self.kind == "nm":
            return f"{self.n}:{self.m}"
        s = f"{self.sparsity:g}"
        if self.kind == "unstructured":
            return f"unstructured{'-row' if self.per_row else ''}:{s}"
        if self.kind == "block":
            return f"block{self.block}:{s}"
        return f"rows:{s}"

    def explain(self) -> str:
        """One sentence saying what the pattern keeps, for teaching.

        Examples
        --------
        >>> Pattern.parse("rows:0.25").explain()
        'Zero out 25% of whole output rows (the lowest-scoring ones), keeping the rest dense.'
        """
        pct = f"{(1 - self.density) * 100:g}%"
        if self.kind == "nm":
            extra = (
                " - the pattern NVIDIA sparse tensor cores run at up to 2x" if self.is_24 else ""
            )
            return (
                f"Keep at most {self.n} of every {self.m} consecutive weights along each row "
                f"({pct} zeros){extra}."
            )
        if self.kind == "unstructured":
            where = "in every output row" if self.per_row else "anywhere in the layer"
            return f"Zero out the {pct} lowest-scoring weights {where}, with no structure."
        if self.kind == "block":
            b = self.block
            return f"Zero out {pct} of the {b} x {b} blocks of weights, keeping the rest dense."
        return f"Zero out {pct} of whole output rows (the lowest-scoring ones), keeping the rest dense."

    def to_json(self) -> str:
        """JSON text of the fields; :meth:`from_json` reads it back."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Pattern:
        """Inverse of :meth:`to_json`."""
        return cls(**json.loads(text))

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Pattern({self.name!r})"

    def _repr_html_(self) -> str:
        return f"<b>{self.name}</b>: {self.explain()}"


def as_pattern(pattern: str | Pattern) -> Pattern:
    """Shorthand for :meth:`Pattern.parse`."""
    return Pattern.parse(pattern)
