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

import dataclasses
import json
import re
from dataclasses import asdict, dataclass, replace

__all__ = ["KINDS", "Pattern", "as_pattern"]

KINDS = ("nm", "unstructured", "block", "rows")

# ASCII only: with Unicode matching, \d and int() or float() also read full-width and other
# scripts' digits ("２:４"), which no pattern string written by this package contains.
_NM = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$", re.ASCII)
_UNSTRUCTURED = re.compile(r"^\s*unstructured(-row)?\s*:\s*(\S*)\s*$", re.ASCII)
_BLOCK = re.compile(r"^\s*block\s*(\d+)(?:x(\d+))?\s*:\s*(\S*)\s*$", re.ASCII)
_ROWS = re.compile(r"^\s*rows\s*:\s*(\S*)\s*$", re.ASCII)
_DECIMAL = re.compile(r"^(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$", re.ASCII)

_EXAMPLES = '"2:4", "4:8", "unstructured:0.5", "unstructured-row:0.5", "block16:0.5", "rows:0.25"'


def _sparsity(text: str, spec: str) -> float:
    # float() alone would also take "nan", "1_0" and non-ASCII digits.
    if not _DECIMAL.match(text):
        raise ValueError(
            f"pattern {spec!r}: sparsity {text!r} must be a fraction of zeros in [0, 1) written "
            f'with ASCII digits, e.g. "unstructured:0.5" for half the weights zero'
        )
    return float(text)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_fields(p: Pattern) -> None:
    # The one validation path: parse, the constructor and from_json all end here.
    if p.kind not in KINDS:
        raise ValueError(f"kind={p.kind!r}: expected one of {', '.join(map(repr, KINDS))}")
    if not isinstance(p.per_row, bool) or not isinstance(p.allow_empty, bool):
        raise ValueError(
            f"per_row={p.per_row!r}, allow_empty={p.allow_empty!r}: expected True or False"
        )
    if p.kind == "nm":
        if not (_is_int(p.n) and _is_int(p.m)):
            raise ValueError(f"N:M needs whole numbers N and M, got n={p.n!r}, m={p.m!r}")
        if not 1 <= p.n < p.m:
            raise ValueError(
                f"N:M needs 1 <= N < M (keep N of every M weights), got N={p.n}, M={p.m}; "
                'e.g. "2:4" or "4:8"'
            )
        if p.m > 32 or p.m & (p.m - 1):
            raise ValueError(
                f"group size M={p.m} must be a power of two up to 32 (2, 4, 8, 16 or 32), the "
                'group sizes sparse kernels and the literature use; e.g. "2:4" or "4:8"'
            )
        extra = {"sparsity": p.sparsity, "block": p.block, "per_row": p.per_row or None}
    else:
        if isinstance(p.sparsity, bool) or not isinstance(p.sparsity, (int, float)):
            raise ValueError(
                f"sparsity={p.sparsity!r}: a {p.kind} pattern needs a fraction of zeros in "
                "[0, 1), e.g. 0.5"
            )
        if not 0.0 <= p.sparsity < 1.0:
            raise ValueError(
                f"sparsity {p.sparsity!r} must be a fraction of zeros in [0, 1), "
                'e.g. "unstructured:0.5" for half the weights zero'
            )
        if p.kind == "block" and (not _is_int(p.block) or p.block < 1):
            raise ValueError(f"block side must be a whole number of at least 1, got {p.block!r}")
        extra = {"n": p.n, "m": p.m}
        if p.kind != "block":
            extra["block"] = p.block
        if p.kind != "unstructured":
            extra["per_row"] = p.per_row or None
    given = {k: v for k, v in extra.items() if v is not None}
    if given:
        raise ValueError(
            f"a {p.kind!r} pattern takes no {', '.join(f'{k}={v!r}' for k, v in given.items())}; "
            "build patterns with Pattern.parse, e.g. Pattern.parse('2:4')"
        )


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
    allow_empty : bool
        Let a sparsity so high that it keeps nothing of a small layer empty it. By default
        :meth:`keep_count` refuses, because a layer pruned to nothing is almost always a typo.

    Raises
    ------
    ValueError
        Any field out of range: every way of building a pattern (:meth:`parse`, the constructor,
        :meth:`from_json`) goes through the same checks.

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
    allow_empty: bool = False

    def __post_init__(self) -> None:
        _check_fields(self)
        if self.kind != "nm":
            object.__setattr__(self, "sparsity", float(self.sparsity))

    @classmethod
    def parse(cls, spec: str | Pattern, *, allow_empty: bool = False) -> Pattern:
        """Parse a pattern string (or return a :class:`Pattern` unchanged).

        Parameters
        ----------
        spec : str or Pattern
            One of ``"N:M"``, ``"unstructured:S"``, ``"unstructured-row:S"``, ``"blockB:S"``
            or ``"rows:S"`` with ``S`` the fraction of zeros.
        allow_empty : bool, optional
            See :class:`Pattern`; a Pattern passed in keeps its own setting unless this is True.

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
            return replace(spec, allow_empty=True) if allow_empty else spec
        if not isinstance(spec, str):
            raise TypeError(
                f"pattern must be a string or Pattern, got {type(spec).__name__} {spec!r}; "
                f"use one of {_EXAMPLES}"
            )
        fields: dict = {"allow_empty": allow_empty}
        if match := _NM.match(spec):
            fields.update(kind="nm", n=int(match.group(1)), m=int(match.group(2)))
        elif match := _UNSTRUCTURED.match(spec):
            sparsity = _sparsity(match.group(2), spec)
            fields.update(kind="unstructured", sparsity=sparsity, per_row=bool(match.group(1)))
        elif match := _BLOCK.match(spec):
            side, other = int(match.group(1)), match.group(2)
            if other is not None and int(other) != side:
                raise ValueError(
                    f'pattern {spec!r}: only square blocks are supported, e.g. "block{side}:0.5"'
                )
            fields.update(kind="block", block=side, sparsity=_sparsity(match.group(3), spec))
        elif match := _ROWS.match(spec):
            fields.update(kind="rows", sparsity=_sparsity(match.group(1), spec))
        elif not spec.isascii():
            raise ValueError(
                f"sparsity pattern {spec!r} holds characters outside ASCII (full-width digits or "
                f"spaces?); type it with ASCII digits, e.g. {_EXAMPLES}"
            )
        else:
            raise ValueError(f"unknown sparsity pattern {spec!r}; expected one of {_EXAMPLES}")
        try:
            return cls(**fields)
        except ValueError as exc:
            raise ValueError(f"pattern {spec!r}: {exc}") from None

    def keep_count(self, total: int, what: str = "weights") -> int:
        """How many of ``total`` weights (or rows, or blocks) a mask under this pattern keeps.

        Parameters
        ----------
        total : int
            The number of units the sparsity applies to.
        what : str, optional
            What they are, for the error message (``"weights"``, ``"rows"``, ``"blocks"``).

        Returns
        -------
        int
            ``round(density * total)``.

        Raises
        ------
        ValueError
            When that rounds to 0 of a non-empty layer (every weight would be zero) and the
            pattern was not built with ``allow_empty=True``.

        Examples
        --------
        >>> Pattern.parse("rows:0.25").keep_count(8, "rows")
        6
        >>> Pattern.parse("rows:0.99", allow_empty=True).keep_count(8, "rows")
        0
        """
        kept = round(self.density * total)
        if kept == 0 and total > 0 and not self.allow_empty:
            most = 1.0 - 0.5 / total
            raise ValueError(
                f"pattern {self.name!r} keeps {self.density:.3g} x {total} {what} = 0 once "
                f"rounded: it would zero the whole layer; use a sparsity below {most:.4g} for "
                f"{total} {what}, skip the layer (filter_fn), or build the pattern with "
                f"Pattern.parse({self.name!r}, allow_empty=True) to empty it on purpose"
            )
        return kept

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
        """Inverse of :meth:`to_json`; the fields are checked as :meth:`parse` checks them.

        Parameters
        ----------
        text : str
            JSON written by :meth:`to_json`.

        Returns
        -------
        Pattern

        Examples
        --------
        >>> Pattern.from_json('{"kind": "nm", "n": 2, "m": 4}')
        Pattern('2:4')
        """
        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"pattern JSON {text!r} cannot be read ({exc}); expected the text of "
                'Pattern.to_json(), e.g. \'{"kind": "nm", "n": 2, "m": 4}\''
            ) from None
        known = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or "kind" not in data or set(data) - known:
            extra = sorted(set(data) - known) if isinstance(data, dict) else []
            raise ValueError(
                f"pattern JSON {text!r}: expected an object with 'kind' and some of "
                f"{', '.join(sorted(known - {'kind'}))}"
                + (f"; unknown keys {', '.join(map(repr, extra))}" if extra else "")
            )
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"pattern JSON {text!r}: {exc}") from None

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Pattern({self.name!r})"

    def _repr_html_(self) -> str:
        return f"<b>{self.name}</b>: {self.explain()}"


def as_pattern(pattern: str | Pattern) -> Pattern:
    """Shorthand for :meth:`Pattern.parse`.

    Parameters
    ----------
    pattern : str or Pattern
        A pattern or its name.

    Returns
    -------
    Pattern
    """
    return Pattern.parse(pattern)
