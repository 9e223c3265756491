"""Make a keep-mask for a weight under a sparsity pattern.

``make_mask`` keeps the highest-scored entries the pattern allows. Scores default to the weight's
magnitude. Ties are broken deterministically: among equal scores, the entry with the lower index
(earlier input column, then earlier row) is kept, so the same weight always gives the same mask.
"""

from __future__ import annotations

import torch

from ._threads import fair_cpu_threads
from ._validate import check_matrix, check_scores, chunk_rows, rankable
from .patterns import Pattern

__all__ = ["make_mask", "top_k_mask"]

_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def make_mask(
    weight: torch.Tensor,
    pattern: str | Pattern = "2:4",
    scores: torch.Tensor | None = None,
) -> torch.Tensor:
    """Keep the top-scored entries of ``weight`` that ``pattern`` allows.

    Parameters
    ----------
    weight : torch.Tensor
        A 2-D weight ``(out_features, in_features)``. fp8 weights (and scores) are ranked
        through a float32 copy, which holds every fp8 value exactly: the same order and ties,
        at 4 bytes per weight of extra memory.
    pattern : str or Pattern
        ``"2:4"`` (default), any ``"N:M"``, ``"unstructured:S"``, ``"unstructured-row:S"``,
        ``"blockB:S"`` or ``"rows:S"``; see :mod:`explorer.patterns`.
    scores : torch.Tensor, optional
        Importance of each entry, same shape as ``weight``; higher is kept first. Defaults to
        ``weight.abs()``. Blocks and rows are scored by the L2 norm of their entries' scores.

    Returns
    -------
    torch.Tensor
        A bool tensor shaped like ``weight``, on its device; True where the weight is kept.

    Raises
    ------
    ValueError
        A weight that is not 2-D, is empty or meta, has NaN/Inf, or whose width the pattern cannot
        divide; scores of another shape; a sparsity that keeps nothing of this layer (see
        :meth:`Pattern.keep_count`).
    TypeError
        Integer or bool weights without ``scores``, scores that are not numbers, or a
        storage-only dtype (packed fp4, sub-byte integers) that must be unpacked first.

    Examples
    --------
    >>> import torch
    >>> w = torch.arange(1.0, 9.0).reshape(1, 8)
    >>> make_mask(w, "2:4").int().tolist()
    [[0, 0, 1, 1, 0, 0, 1, 1]]
    """
    weight = check_matrix(weight, "weight")
    pattern = Pattern.parse(pattern)
    # Threads capped at the free cores: with another process busy, torch's two threads were
    # 5-16x slower than the cap (docs/performance.md).
    with fair_cpu_threads(weight.device, weight.numel()):
        return _make_mask(weight, pattern, scores)


def _make_mask(weight: torch.Tensor, pattern: Pattern, scores: torch.Tensor | None) -> torch.Tensor:
    if scores is None:
        if not weight.is_floating_point():
            raise TypeError(
                f"weight has dtype {weight.dtype}, which has no magnitude to rank by; "
                f"pass scores=... (e.g. weight.float().abs()) or a floating-point weight"
            )
        weight = rankable(weight)  # fp8 is scored in float32, which holds every fp8 value
        sixteen_bit = weight.dtype in _SIXTEEN_BIT and weight.is_contiguous()
        if pattern.kind == "nm" and pattern.m == 4 and sixteen_bit:
            _check_divides(weight.shape[1], 4, "in_features (columns)", pattern)
            return _top_of_four_16bit(weight, pattern.n)  # checks finiteness as it goes
        check_scores(weight, "weight")
        keys = _magnitude_keys(weight) if pattern.kind in ("nm", "unstructured") else None
        scores = keys if keys is not None else weight.abs()
    else:
        scores = check_matrix(scores, "scores")
        if scores.shape != weight.shape:
            raise ValueError(
                f"scores have shape {tuple(scores.shape)} but the weight has {tuple(weight.shape)}; "
                f"give one score per weight entry"
            )
        check_scores(scores)
        scores = rankable(scores)
        if scores.device != weight.device:
            scores = scores.to(weight.device)

    rows, cols = weight.shape
    if pattern.kind == "nm":
        _check_divides(cols, pattern.m, "in_features (columns)", pattern)
        if pattern.m == 4 and scores.dtype != torch.bool:
            return _top_of_four(lambda a, b: scores[a:b], (rows, cols), pattern.n, scores.device)
        return _nm_mask(scores, pattern.n, pattern.m)
    if pattern.kind == "unstructured":
        if pattern.per_row:
            return top_k_mask(scores, pattern.keep_count(cols, "weights of a row"), dim=1)
        kept = pattern.keep_count(rows * cols, "weights")
        return top_k_mask(scores.reshape(1, -1), kept, dim=1).view(rows, cols)
    if pattern.kind == "block":
        b = pattern.block
        _check_divides(rows, b, "out_features (rows)", pattern)
        _check_divides(cols, b, "in_features (columns)", pattern)
        norms = _float(scores).square().view(rows // b, b, cols // b, b).sum(dim=(1, 3))
        count = pattern.keep_count(norms.numel(), "blocks")
        kept = top_k_mask(norms.reshape(1, -1), count, dim=1)
        kept = kept.view(rows // b, cols // b)
        return kept.repeat_interleave(b, dim=0).repeat_interleave(b, dim=1)
    # rows
    norms = _float(scores).square().sum(dim=1).view(1, rows)
    kept = top_k_mask(norms, pattern.keep_count(rows, "rows"), dim=1).view(rows, 1)
    return kept.expand(rows, cols).contiguous()


def _float(scores: torch.Tensor) -> torch.Tensor:
    return scores if scores.dtype in (torch.float32, torch.float64) else scores.float()


def _check_divides(size: int, by: int, what: str, pattern: Pattern) -> None:
    if size % by:
        raise ValueError(
            f"pattern {pattern.name!r} needs {what} divisible by {by}, but the layer has {size}; "
            f"skip this layer (filter_fn) or choose a pattern whose group size divides {size}"
        )


def _magnitude_keys(weight: torch.Tensor) -> torch.Tensor | None:
    """Integer keys that order 16-bit floats by magnitude, without converting them.

    fp16 and bf16 store sign, exponent and mantissa in that order, so clearing the sign bit leaves
    an integer whose order is the order of ``|w|``; comparing int16 is much cheaper on the CPU than
    converting to float32 first.
    """
    if weight.dtype in _SIXTEEN_BIT and weight.is_contiguous():
        return weight.view(torch.int16) & 0x7FFF
    return None


def _nm_mask(scores: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """Top-n of every m along rows; ties go to the lower column. Chunked to stay in cache."""
    rows, cols = scores.shape
    mask = torch.empty((rows, cols), dtype=torch.bool, device=scores.device)
    step = chunk_rows(rows, cols)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        s = scores[start:stop].reshape(-1, m)
        # 1. rank[i] = how many entries of the group beat entry i (higher score, or equal and earlier).
        rank = torch.zeros(s.shape, dtype=torch.uint8, device=s.device)
        for j in range(m):
            col = s[:, j : j + 1]
            rank += col > s
            if j + 1 < m:
                rank[:, j + 1 :] += col == s[:, j + 1 :]
        # 2. keep the n best of each group.
        mask[start:stop] = (rank < n).view(stop - start, cols)
    return mask


# Magnitude bits at or above these are Inf or NaN (the exponent is all ones).
_NON_FINITE = {torch.float16: 0x7C00, torch.bfloat16: 0x7F80}


def _top_of_four_16bit(weight: torch.Tensor, n: int) -> torch.Tensor:
    """Top-n magnitudes of every group of 4 fp16/bf16 values, compared as int16.

    Clearing the sign bit leaves each 16-bit value an integer ordered like ``|w|``, so the four
    members of a group are compared without converting them.
    """
    keys16 = weight.view(torch.int16)
    non_finite = _NON_FINITE[weight.dtype]

    def keys(start: int, stop: int) -> torch.Tensor:
        magnitude = keys16[start:stop] & 0x7FFF
        if int(magnitude.max()) >= non_finite:
            check_scores(weight, "weight")  # raises, naming the first NaN or Inf
        return magnitude

    return _top_of_four(keys, weight.shape, n, weight.device)


def _top_of_four(keys, shape: tuple[int, int], n: int, device: torch.device) -> torch.Tensor:
    """Top-n of every group of 4 scores, from six pairwise comparisons per group.

    ``keys(start, stop)`` gives the scores of rows ``start:stop``. ``ab`` says that the first
    beats the second (ties go to the earlier one); a member is kept when it beats at least
    ``4 - n`` of the other three. Six comparisons replace the sixteen of :func:`_nm_mask`.
    """
    rows, cols = shape
    mask = torch.empty((rows, cols), dtype=torch.bool, device=device)
    need = 4 - n
    step = chunk_rows(rows, cols)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        a, b, c, d = keys(start, stop).reshape(-1, 4).unbind(dim=1)
        # 1. the six comparisons, as 0/1 int8 so they can be added.
        ab, ac, ad = (
            (a >= b).view(torch.int8),
            (a >= c).view(torch.int8),
            (a >= d).view(torch.int8),
        )
        bc, bd, cd = (
            (b >= c).view(torch.int8),
            (b >= d).view(torch.int8),
            (c >= d).view(torch.int8),
        )
        # 2. wins of each member: a beats ab + ac + ad, b beats (1 - ab) + bc + bd, and so on.
        keep = (
            (ab + ac + ad) >= need,
            (bc + bd - ab) >= need - 1,
            (cd - ac - bc) >= need - 2,
            (ad + bd + cd) <= 3 - need,
        )
        torch.stack(keep, dim=1, out=mask[start:stop].view(-1, 4))
    return mask


def top_k_mask(scores: torch.Tensor, k: int, dim: int = 1) -> torch.Tensor:
    """Keep the ``k`` highest scores along ``dim`` of a 2-D tensor, ties to the lower index.

    Parameters
    ----------
    scores : torch.Tensor
        2-D scores.
    k : int
        How many to keep in each slice along ``dim`` (clipped to ``[0, size]``).
    dim : int
        1 to choose within each row, 0 within each column.

    Returns
    -------
    torch.Tensor
        Bool mask shaped like ``scores``.

    Examples
    --------
    >>> import torch
    >>> top_k_mask(torch.tensor([[1.0, 3.0, 3.0, 2.0]]), 2).tolist()
    [[False, True, True, False]]
    """
    size = scores.shape[dim]
    k = max(0, min(int(k), size))
    if k == 0:
        return torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    if k == size:
        return torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    values = rankable(scores) if scores.dtype != torch.int16 else scores.to(torch.int32)
    # 1. the k-th largest value is the threshold; everything above it is kept.
    threshold = values.kthvalue(size - k + 1, dim=dim, keepdim=True).values
    above = values > threshold
    # 2. fill the remaining places with entries equal to the threshold, lowest index first.
    need = k - above.sum(dim=dim, keepdim=True)
    ties = values == threshold
    tie_rank = ties.cumsum(dim=dim)
    return above | (ties & (tie_rank <= need))
