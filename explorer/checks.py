"""Check whether a weight (or a mask) follows a sparsity pattern, and describe how.

For N:M patterns a group of M consecutive inputs in a row is *valid* when it holds at most N
nonzeros: the same rule as the per-group nonzero count TensorRT users write. The report adds the
coordinates of the first violations, a histogram of the keep-patterns (the 6 legal ones for 2:4),
whether the transpose also follows the pattern, and the density.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from . import _html
from ._threads import fair_cpu_threads
from ._validate import check_matrix, chunk_rows
from .patterns import Pattern

__all__ = ["PatternReport", "check_pattern", "keep_patterns"]

MAX_LISTED_VIOLATIONS = 10
_HISTOGRAM_MAX_M = 8  # above this, C(M, N) keep-patterns are too many to list
SPARSER = "sparser"
TOO_DENSE = "too dense"

# int64 lane arithmetic for four 16-bit floats at once (see _nm_counts_16bit).
_LOW15 = 0x7FFF7FFF7FFF7FFF
_LANE_BITS = 0x0001000100010001
_CODE_MUL = (1 << 48) + (1 << 33) + (1 << 18) + (1 << 3)
_BYTE_TOPS = 0x80808080 - (1 << 32)  # bit 7 of each byte of an int32, as a signed value


def keep_patterns(n: int, m: int) -> list[str]:
    """The legal keep-patterns of an N:M group as strings of 1 (kept) and 0, first input first.

    Parameters
    ----------
    n : int
        Weights kept in each group.
    m : int
        Group size.

    Returns
    -------
    list of str
        Every way to keep ``n`` of ``m`` positions, as ``m`` characters each, in the order of
        :func:`itertools.combinations` over the kept positions.

    Examples
    --------
    >>> keep_patterns(2, 4)
    ['1100', '1010', '1001', '0110', '0101', '0011']
    """
    names = []
    for kept in itertools.combinations(range(m), n):
        names.append("".join("1" if i in kept else "0" for i in range(m)))
    return names


@dataclass(frozen=True)
class PatternReport:
    """What :func:`check_pattern` found; see the attributes.

    Attributes
    ----------
    pattern : Pattern
        The pattern checked against.
    shape : tuple of int
        The checked tensor's shape.
    valid : bool
        True if every group (row, block, layer) follows the pattern.
    groups : int
        How many groups were checked (N:M groups, rows, blocks or 1 for a whole layer).
    violations : int
        How many groups break the pattern (for block and row patterns: how many blocks or rows
        are nonzero beyond the allowed number).
    first_violations : tuple of (int, int)
        ``(row, column)`` of the first element of the first breaking groups, in row-major order.
    histogram : dict of str to int
        For N:M with M <= 8: the count of groups with each legal keep-pattern (e.g. ``"1100"``),
        plus ``"sparser"`` (fewer than N nonzeros, still valid) and ``"too dense"``. Sums to
        ``groups``.
    transpose_valid : bool or None
        For N:M: whether the transpose also follows the pattern (None when the row count is not
        divisible by M).
    density : float
        Fraction of nonzero entries.
    row_violations : torch.Tensor or None
        For N:M and per-row patterns: the number of breaking groups in each row.
    """

    pattern: Pattern
    shape: tuple[int, ...]
    valid: bool
    groups: int
    violations: int
    first_violations: tuple[tuple[int, int], ...]
    histogram: dict[str, int]
    transpose_valid: bool | None
    density: float
    row_violations: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def valid_fraction(self) -> float:
        """Fraction of groups that follow the pattern."""
        return 1.0 - self.violations / self.groups if self.groups else 1.0

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape))
        verdict = (
            "valid"
            if self.valid
            else f"INVALID: {self.violations:,} of {self.groups:,} groups break it"
        )
        parts = [f"{self.pattern.name} on {shape}", verdict, f"density {self.density:.3f}"]
        if self.transpose_valid is not None:
            parts.append(f"transpose {'also valid' if self.transpose_valid else 'not valid'}")
        return f"PatternReport({', '.join(parts)})"

    def _repr_html_(self) -> str:
        level = "ok" if self.valid else "error"
        rows = [
            ("pattern", self.pattern.name),
            ("shape", " x ".join(map(str, self.shape))),
            ("verdict", _html.badge("valid" if self.valid else "invalid", level)),
            ("valid groups", f"{self.valid_fraction:.2%} of {self.groups:,}"),
            ("violations", f"{self.violations:,}"),
            ("density", f"{self.density:.4f}"),
        ]
        if self.transpose_valid is not None:
            rows.append(("transpose valid", str(self.transpose_valid)))
        if self.first_violations:
            rows.append(("first violations", ", ".join(map(str, self.first_violations))))
        table = _html.table(
            ("", ""), [(k, v) for k, v in rows], caption="Pattern check", raw_columns=(1,)
        )
        if self.histogram:
            total = max(sum(self.histogram.values()), 1)
            hist = _html.table(
                ("keep-pattern", "groups", "share"),
                [(k, f"{v:,}", f"{v / total:.1%}") for k, v in self.histogram.items()],
                caption="Histogram",
            )
            table += hist
        return table


def check_pattern(tensor: torch.Tensor, pattern: str | Pattern = "2:4") -> PatternReport:
    """Check a weight or a bool mask against a sparsity pattern.

    Parameters
    ----------
    tensor : torch.Tensor
        2-D weight ``(out_features, in_features)`` or bool mask; entries that are not zero
        (NaN included) count as kept.
    pattern : str or Pattern
        The pattern to check, ``"2:4"`` by default.

    Returns
    -------
    PatternReport

    Raises
    ------
    ValueError
        A tensor that is not 2-D, empty or meta, or whose width the pattern cannot divide.

    Examples
    --------
    >>> import torch
    >>> report = check_pattern(torch.tensor([[0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 5.0, 0.0]]))
    >>> report.valid, report.violations, report.first_violations
    (False, 1, ((0, 4),))
    >>> report.histogram["0110"]
    1
    """
    tensor = check_matrix(tensor, "tensor")
    pattern = Pattern.parse(pattern)
    # Threads capped at the free cores: with another process busy, torch's two threads were
    # 5-16x slower than the cap (docs/performance.md).
    with fair_cpu_threads(tensor.device, tensor.numel()):
        return _check(tensor, pattern)


def _check(tensor: torch.Tensor, pattern: Pattern) -> PatternReport:
    cols = tensor.shape[1]
    if pattern.kind == "nm":
        if cols % pattern.m:
            raise ValueError(
                f"pattern {pattern.name!r} groups {pattern.m} inputs, but the tensor has "
                f"{cols} columns (shape {tuple(tensor.shape)}), not divisible by {pattern.m}; "
                f"such a layer cannot hold the pattern: skip it or pad its inputs"
            )
        return _check_nm(tensor, pattern)
    nonzero = _nonzero(tensor)
    density = float(nonzero.float().mean())
    if pattern.kind == "unstructured":
        return _check_unstructured(nonzero, pattern, density)
    if pattern.kind == "block":
        return _check_blocks(nonzero, pattern, density)
    return _check_rows(nonzero, pattern, density)


def _nonzero(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dtype == torch.bool:
        return tensor
    if tensor.dtype in (torch.float16, torch.bfloat16) and tensor.is_contiguous():
        return (tensor.view(torch.int16) & 0x7FFF) != 0  # -0.0 is zero, NaN is not
    return tensor != 0


# --------------------------------------------------------------------------- N:M
def _check_nm(tensor: torch.Tensor, pattern: Pattern) -> PatternReport:
    rows, cols = tensor.shape
    n, m = pattern.n, pattern.m
    groups_per_row = cols // m
    lane_path = None
    if m == 4 and tensor.is_contiguous() and tensor.device.type == "cpu":
        if tensor.dtype in (torch.float16, torch.bfloat16):
            lane_path = _nm_counts_16bit
        elif tensor.dtype == torch.bool:
            lane_path = _nm_counts_bool
    with_histogram = m <= _HISTOGRAM_MAX_M
    code_counts = torch.zeros(1 << m if with_histogram else 1, dtype=torch.int64)
    row_violations = torch.empty(rows, dtype=torch.int32)
    first: list[tuple[int, int]] = []
    nonzeros = 0
    transpose_ok = rows % m == 0
    step = chunk_rows(rows, cols)
    if transpose_ok:
        step = max(m, step - step % m)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        chunk = tensor[start:stop]
        # 1. per group: the number of nonzeros and, for the histogram, which positions.
        if lane_path is not None:
            counts, codes, lanes = lane_path(chunk)
        else:
            nz = _nonzero(chunk).reshape(-1, m)
            counts = nz.sum(dim=1, dtype=torch.int16)
            codes = _codes(nz, m) if with_histogram else None
            lanes = None
        if codes is not None:
            code_counts += torch.bincount(codes, minlength=1 << m).cpu()
        else:
            nonzeros += int(counts.sum())
        # 2. groups with more than n nonzeros break the pattern.
        bad = (counts > n).view(stop - start, groups_per_row)
        row_violations[start:stop] = bad.sum(dim=1, dtype=torch.int32).cpu()
        if len(first) < MAX_LISTED_VIOLATIONS and bool(bad.any()):
            where = bad.nonzero()[: MAX_LISTED_VIOLATIONS - len(first)].tolist()
            first.extend((start + r, g * m) for r, g in where)
        # 3. the transpose: groups of m consecutive rows in each column.
        if transpose_ok:
            transpose_ok = _transpose_chunk_ok(chunk, lanes, n, m)
    violations = int(row_violations.sum())
    if with_histogram:  # every group's nonzeros, from how often each position code occurred
        nonzeros = sum(
            bin(code).count("1") * count for code, count in enumerate(code_counts.tolist())
        )
    histogram = _histogram(code_counts, n, m) if with_histogram else {}
    if not with_histogram:
        histogram = {}
    return PatternReport(
        pattern=pattern,
        shape=(rows, cols),
        valid=violations == 0,
        groups=rows * groups_per_row,
        violations=violations,
        first_violations=tuple(first),
        histogram=histogram,
        transpose_valid=transpose_ok if rows % m == 0 else None,
        density=nonzeros / (rows * cols),
        row_violations=row_violations,
    )


def _nm_counts_16bit(chunk: torch.Tensor):
    """Nonzero counts and position codes of 4-wide groups of 16-bit floats, four lanes per int64.

    Each group of four fp16/bf16 values is one int64 word. Clearing the sign bits and adding
    0x7FFF to every 16-bit lane sets a lane's top bit exactly when the lane was nonzero, with no
    carry between lanes. One multiplication then gathers the four bits into a 4-bit code and
    another adds them into a count.
    """
    words = chunk.reshape(-1).view(torch.int64)
    lanes = words & _LOW15
    lanes += _LOW15
    lanes >>= 15
    lanes &= _LANE_BITS  # 1 in each nonzero lane
    codes = lanes * _CODE_MUL
    codes >>= 48
    codes &= 0xF
    counts = lanes * _LANE_BITS
    counts >>= 48
    counts &= 0x7
    return counts, codes, lanes


def _nm_counts_bool(chunk: torch.Tensor):
    """The same for a bool mask: each group of four bytes is one int32 word, one byte a lane."""
    words = chunk.reshape(-1).view(torch.int32)
    codes = (words | words >> 7 | words >> 14 | words >> 21) & 0xF
    counts = (words * 0x01010101) >> 24
    return counts, codes, words


def _codes(nz: torch.Tensor, m: int) -> torch.Tensor:
    weights = (1 << torch.arange(m, device=nz.device)).to(torch.int32)
    return (nz.to(torch.int32) * weights).sum(dim=1)


def _transpose_chunk_ok(chunk: torch.Tensor, lanes, n: int, m: int) -> bool:
    rows, cols = chunk.shape
    if lanes is not None and lanes.dtype == torch.int32:
        # bool masks: byte lanes; counts over m consecutive rows stay below 128, never carry.
        per_column = lanes.view(rows // m, m, cols // 4).sum(dim=1, dtype=torch.int32)
        return not bool(((per_column + (0x7F - n) * 0x01010101) & _BYTE_TOPS).any())
    if lanes is not None:
        # Per-lane counts over m consecutive rows stay below 16, so lanes never carry.
        per_column = lanes.view(rows // m, m, cols // 4).sum(dim=1)
        over = (per_column + (0x7FFF - n) * _LANE_BITS) >> 15 & _LANE_BITS
        return not bool(over.any())
    nz = _nonzero(chunk).view(rows // m, m, cols)
    return not bool((nz.sum(dim=1, dtype=torch.int16) > n).any())


def _histogram(code_counts: torch.Tensor, n: int, m: int) -> dict[str, int]:
    counts = code_counts.tolist()
    histogram = {name: 0 for name in keep_patterns(n, m)}
    sparser = too_dense = 0
    for code, count in enumerate(counts):
        if not count:
            continue
        kept = bin(code).count("1")
        if kept == n:
            name = "".join("1" if code >> i & 1 else "0" for i in range(m))
            histogram[name] += count
        elif kept < n:
            sparser += count
        else:
            too_dense += count
    histogram[SPARSER] = sparser
    histogram[TOO_DENSE] = too_dense
    return histogram


# ------------------------------------------------------------------ other kinds
def _report(pattern, shape, groups, violations, first, density, row_violations=None):
    return PatternReport(
        pattern=pattern,
        shape=tuple(shape),
        valid=violations == 0,
        groups=groups,
        violations=violations,
        first_violations=tuple(first),
        histogram={},
        transpose_valid=None,
        density=density,
        row_violations=row_violations,
    )


def _check_unstructured(nonzero: torch.Tensor, pattern: Pattern, density: float) -> PatternReport:
    rows, cols = nonzero.shape
    if pattern.per_row:
        allowed = round(pattern.density * cols)
        excess = (nonzero.sum(dim=1) > allowed).to(torch.int32).cpu()
        first = [(int(r), 0) for r in excess.nonzero()[:MAX_LISTED_VIOLATIONS, 0]]
        return _report(pattern, nonzero.shape, rows, int(excess.sum()), first, density, excess)
    allowed = round(pattern.density * nonzero.numel())
    broken = int(nonzero.sum()) > allowed
    return _report(pattern, nonzero.shape, 1, int(broken), [(0, 0)] if broken else [], density)


def _check_blocks(nonzero: torch.Tensor, pattern: Pattern, density: float) -> PatternReport:
    rows, cols = nonzero.shape
    b = pattern.block
    if rows % b or cols % b:
        raise ValueError(
            f"pattern {pattern.name!r} tiles the weight with {b} x {b} blocks, but its shape "
            f"{(rows, cols)} is not divisible by {b}; choose a block size that divides both sides"
        )
    blocks = nonzero.view(rows // b, b, cols // b, b).any(dim=3).any(dim=1)
    allowed = round(pattern.density * blocks.numel())
    excess = max(0, int(blocks.sum()) - allowed)
    return _report(pattern, nonzero.shape, blocks.numel(), excess, [], density)


def _check_rows(nonzero: torch.Tensor, pattern: Pattern, density: float) -> PatternReport:
    rows = nonzero.shape[0]
    allowed = round(pattern.density * rows)
    excess = max(0, int(nonzero.any(dim=1).sum()) - allowed)
    return _report(pattern, nonzero.shape, rows, excess, [], density)
