"""SparseGPT: one-shot pruning with the optimal brain surgeon update.

Frantar and Alistarh, "SparseGPT: Massive Language Models Can Be Accurately Pruned in One-Shot"
(2023). The layer's input statistics give the Hessian of the squared reconstruction error,
``H = 2 X X^T``. Columns are pruned left to right; when a weight is removed, the error it
causes is pushed onto the not-yet-pruned columns through the inverse Hessian, so the remaining
weights compensate. This follows the reference implementation (``fasterprune``): lazy column
blocks of 128, 1% damping of the mean diagonal, the upper Cholesky factor of ``H^-1``, N:M
masks chosen every M columns by ``w^2 / d^2`` and unstructured masks by the same score within
each block of 128 columns. Inputs that were always zero (diagonal 0) are marked dead: their
weights are set to zero, as the reference does.
"""

from __future__ import annotations

import torch

from .._threads import one_cpu_thread, steady_cpu_threads
from .._validate import check_scores
from ..groupquant import Quantization, round_to_grid
from ..masks import make_mask
from ..patterns import Pattern
from .calibration import check_finite_inputs

__all__ = ["CLIP_FACTORS", "importance_order", "sparsegpt_prune", "sparsegpt_quantize_prune"]


def _inverse_cholesky(h: torch.Tensor, percdamp: float) -> torch.Tensor:
    """Upper Cholesky factor of ``(H + damp I)^-1``, retrying in float64 and with more damping."""
    mean_diag = float(torch.diagonal(h).mean())
    last: Exception | None = None
    for dtype, factor in ((torch.float32, 1.0), (torch.float64, 1.0), (torch.float64, 10.0)):
        for extra in (1.0, 10.0, 100.0):
            damp = percdamp * factor * extra * mean_diag
            hd = h.to(dtype).clone()
            hd.diagonal().add_(damp)
            try:
                # The reference computes chol(H), H^-1 from it, then chol(H^-1, upper). The same
                # factor U (H^-1 = U^T U) costs one Cholesky and one triangular inverse: with J
                # the reversal permutation, J H J = L L^T gives U = J L^-1 J.
                flipped = torch.linalg.cholesky(hd.flip(0, 1))
                eye = torch.eye(len(hd), dtype=dtype, device=hd.device)
                upper = torch.linalg.solve_triangular(flipped, eye, upper=False).flip(0, 1)
            except RuntimeError as exc:  # torch.linalg.LinAlgError is a RuntimeError
                last = exc
                continue
            if torch.isfinite(upper).all():
                return upper.to(torch.float32)
    raise ValueError(
        f"the calibration Hessian could not be factorised even with extra damping ({last}); "
        "pass more (or more varied) calibration data"
    )


def sparsegpt_prune(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    pattern: Pattern,
    blocksize: int = 128,
    percdamp: float = 0.01,
    act_order: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prune ``weight`` with SparseGPT and return the updated weight and its keep-mask.

    Parameters
    ----------
    weight : torch.Tensor
        ``(out_features, in_features)`` weight; not modified.
    hessian : torch.Tensor
        ``(in, in)`` matrix proportional to ``X X^T`` of the layer's inputs.
    pattern : Pattern
        ``nm`` (chosen every M columns) or ``unstructured`` (within each block of columns,
        per layer or per row).
    blocksize : int
        Lazy-update block width (128 in the reference).
    percdamp : float
        Damping as a fraction of the mean Hessian diagonal.
    act_order : bool, default False
        Take the columns in :func:`importance_order` (the layer as one group) instead of left to
        right, as the joint loop does (:func:`sparsegpt_quantize_prune`); the default is the
        reference's order, which ``prune`` uses. Meant for N:M patterns: with an unstructured
        one, whose masks are chosen a block of columns at a time, it can do worse (1.17x the
        output error of the left-to-right order on a random 16x128 layer).

    Returns
    -------
    tuple of torch.Tensor
        The new weight (zeros in place, dtype of ``weight``) and the bool keep-mask.

    Raises
    ------
    ValueError
        The weight or the Hessian holds NaN or Inf (for the Hessian: the calibration inputs
        did), or the Hessian cannot be factorised even with extra damping.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(64, 8, generator=g)
    >>> w = torch.randn(3, 8, generator=g)
    >>> new, mask = sparsegpt_prune(w, x.T @ x, Pattern.parse("2:4"))
    >>> mask.sum().item(), bool((new[~mask] == 0).all())
    (12, True)
    """
    if not act_order:
        return _fasterprune(weight, hessian, pattern, blocksize, percdamp, None)[:2]
    new, mask, _ = _in_order(weight, hessian, pattern, blocksize, percdamp, None)
    return new, mask


def sparsegpt_quantize_prune(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    pattern: Pattern,
    quant: Quantization,
    blocksize: int = 128,
    percdamp: float = 0.01,
    act_order: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prune and quantize jointly: SparseGPT with GPTQ-style error feedback of the rounding.

    Each column, once pruned, has its kept weights rounded to their group's grid
    (:mod:`explorer.groupquant`), and the whole error (pruned weights and rounding) is pushed
    onto the later columns through the inverse Hessian, as in SparseGPT's joint
    sparsification and quantization. A group's scales (``max|kept| / qmax`` per row) are set
    when the loop enters the group's first column, from the group's current, already updated
    weights, taking as "kept" the entries the ``w^2 / d^2`` score would keep at that moment
    (N:M patterns; all weights otherwise). Later entries beyond ``qmax * scale`` are clipped.

    With ``act_order`` the columns go through the loop in :func:`importance_order`: the
    quantization groups whose inputs carry the most energy first, and within each group its N:M
    groups likewise, as GPTQ's act-order does column by column. The groups stay whole, so the
    layer keeps its 2:4 groups and its contiguous scale groups (it compresses as without); the
    results come back in the layer's own column order.

    Parameters
    ----------
    weight, hessian, pattern, blocksize, percdamp
        As :func:`sparsegpt_prune`.
    quant : Quantization
        The integer format and group size (which must divide ``in_features``).
    act_order : bool, default True
        Order the columns by :func:`importance_order`; False keeps the left-to-right order.

    Returns
    -------
    tuple of torch.Tensor
        The dequantized weight (exactly ``q * scale`` in float32, then cast to the weight's
        dtype; zeros in place), the bool keep-mask and the float32 scales
        ``[out_features, in_features / group_size]``.

    Examples
    --------
    >>> from explorer.groupquant import Quantization
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(64, 8, generator=g)
    >>> w = torch.randn(3, 8, generator=g)
    >>> new, mask, scales = sparsegpt_quantize_prune(
    ...     w, x.T @ x, Pattern.parse("2:4"), Quantization("int4", 4)
    ... )
    >>> scales.shape, bool((new / scales.repeat_interleave(4, 1)).round().abs().max() <= 7)
    (torch.Size([3, 2]), True)
    """
    quant.check_width(weight.shape[1], "the layer")
    if not act_order:
        return _fasterprune(weight, hessian, pattern, blocksize, percdamp, quant)
    return _in_order(weight, hessian, pattern, blocksize, percdamp, quant)


def _in_order(weight, hessian, pattern, blocksize, percdamp, quant):
    """:func:`_fasterprune` on the columns in :func:`importance_order`, put back in place.

    Weight, mask and scales (None without ``quant``) come back in the layer's own order.
    """
    size = weight.shape[1] if quant is None else quant.group_size
    order = importance_order(torch.diagonal(hessian), pattern, size)
    h = hessian[order[:, None], order]
    new, mask, scales = _fasterprune(
        weight[:, order.to(weight.device)], h, pattern, blocksize, percdamp, quant
    )
    back = torch.argsort(order).to(new.device)
    if scales is not None:  # the loop's k-th group is the layer's group order[k * size] // size
        scales = scales[:, torch.argsort(order[::size] // size).to(scales.device)]
    return new[:, back], mask[:, back], scales


def importance_order(diagonal: torch.Tensor, pattern: Pattern, group_size: int) -> torch.Tensor:
    """The joint loop's column order: GPTQ's act-order, in whole scale and N:M groups.

    GPTQ quantizes the columns whose inputs carry the most energy (the largest diagonal entries
    of ``H = X^T X``) first, while the most later columns remain to absorb their error. Here the
    quantization groups go in decreasing order of their summed diagonal, and within each group
    its N:M groups (single columns for other patterns) likewise. Groups stay whole and
    contiguous, so the mask keeps its N:M groups and each scale its own ``group_size`` columns.
    Ties keep their order: a diagonal that already falls from left to right gives the identity.

    Parameters
    ----------
    diagonal : torch.Tensor
        The Hessian's diagonal, ``(in_features,)``.
    pattern : Pattern
        The sparsity pattern (its ``m`` columns move together for N:M).
    group_size : int
        Columns per scale group (a multiple of ``m``, dividing ``in_features``); the whole
        width orders the N:M groups across the layer.

    Returns
    -------
    torch.Tensor
        int64 column indexes, a permutation of ``range(in_features)``, on ``diagonal``'s device.

    Examples
    --------
    >>> d = torch.tensor([1.0, 1, 1, 1, 3, 3, 0, 0] + [2.0] * 8)  # two groups of 8 columns
    >>> importance_order(d, Pattern.parse("2:4"), 8).tolist()
    [8, 9, 10, 11, 12, 13, 14, 15, 4, 5, 6, 7, 0, 1, 2, 3]
    >>> importance_order(d, Pattern.parse("2:4"), 16).tolist()  # one group: N:M groups only
    [8, 9, 10, 11, 12, 13, 14, 15, 4, 5, 6, 7, 0, 1, 2, 3]
    >>> importance_order(d.sort(descending=True).values, Pattern.parse("2:4"), 8).tolist() == list(
    ...     range(16)
    ... )
    True
    """
    d = diagonal.detach().double()
    unit = pattern.m if pattern.kind == "nm" else 1
    groups = torch.argsort(d.view(-1, group_size).sum(dim=1), descending=True, stable=True)
    units = d.view(-1, group_size // unit, unit).sum(dim=2)[groups]  # (groups, units per group)
    inside = torch.argsort(units, descending=True, stable=True)
    starts = groups[:, None] * group_size + inside * unit  # each unit's first column, loop order
    return (starts[:, :, None] + torch.arange(unit, device=d.device)).reshape(-1)


#: Shrink factors of a group's absmax scale tried by the joint loop's clip search (1 first).
CLIP_FACTORS = tuple(1.0 - 0.025 * i for i in range(17))  # 1.0 down to 0.6


def _group_entry_scales(
    w_group: torch.Tensor, d_group: torch.Tensor, pattern: Pattern, quant: Quantization
) -> torch.Tensor:
    """Scales ``[rows]`` of one group from its current weights ``w_group`` ``[G, rows]``."""
    keep = torch.ones_like(w_group, dtype=torch.bool)
    if pattern.kind == "nm":
        score = (w_group.square() / d_group.square()).reshape(-1, pattern.m, w_group.shape[1])
        drop = torch.topk(score, pattern.m - pattern.n, dim=1, largest=False).indices
        keep = keep.reshape(score.shape).scatter_(1, drop, False).reshape(w_group.shape)
    kept = w_group * keep
    amax = kept.abs().amax(dim=0)
    base = torch.where(amax > 0, amax / quant.qmax, torch.ones_like(amax))
    # Clip search: of the scales base * f (f from 1 down to CLIP_FLOOR), each row takes the one
    # whose rounding costs its kept weights least in the loss the OBS update sees,
    # sum((w - q)^2 / d^2); f = 1 (no clipping) is among them, so this never does worse.
    weight = (1.0 / d_group.square()).expand_as(kept) * keep
    best, best_err = base, None
    for f in CLIP_FACTORS:
        s = base * f
        err = ((round_to_grid(kept, s, quant.qmax) * s - kept).square() * weight).sum(dim=0)
        if best_err is None:
            best_err = err
            continue
        better = err < best_err
        best = torch.where(better, s, best)
        best_err = torch.where(better, err, best_err)
    return best


def _enter_group(
    wt: torch.Tensor,
    scales_t: torch.Tensor,
    hdiag: torch.Tensor,
    c: int,
    pattern: Pattern,
    quant: Quantization,
) -> torch.Tensor:
    """Column ``c``'s scales ``[rows]``.

    At the first column of a group (3b), first set them from the group's current weights (the
    columns of this block are up to date; a group starting here never reaches past a stale block).
    """
    g, size = divmod(c, quant.group_size)
    if size == 0:
        wg = wt[c : c + quant.group_size]
        scales_t[g] = _group_entry_scales(wg, hdiag[c : c + quant.group_size, None], pattern, quant)
    return scales_t[g]


def _fasterprune(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    pattern: Pattern,
    blocksize: int,
    percdamp: float,
    quant: Quantization | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    if pattern.kind == "nm" and blocksize % pattern.m:
        blocksize = max(pattern.m, blocksize - blocksize % pattern.m)
    if quant is not None and blocksize % quant.group_size and quant.group_size % blocksize:
        blocksize = quant.group_size  # a group never straddles a block edge (see step 3b)
    check_scores(weight.detach(), "weight")  # NaN weights would spread through the updates
    w = weight.detach().to(torch.float32).clone()
    h = hessian.to(w.device, torch.float32).clone()
    check_finite_inputs(h)  # NaN inputs are not "too little data": say so before factorising
    rows, cols = w.shape
    # 1. dead inputs: never active in calibration; give them a unit diagonal and zero weights.
    dead = torch.diagonal(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    # a thread count set by this machine, not its load: the factor's last bits depend on it
    with steady_cpu_threads(w.device):
        hinv = _inverse_cholesky(h, percdamp)
    del h
    with one_cpu_thread(w.device):
        # Work on W^T so that each weight column is a contiguous row (much faster updates).
        wt = w.T.contiguous()
        del w
        pruned_t = torch.zeros((cols, rows), dtype=torch.bool, device=wt.device)
        scales_t = None
        if quant is not None:
            scales_t = torch.ones((cols // quant.group_size, rows), device=wt.device)
            hdiag = torch.diagonal(hinv)
        for i1 in range(0, cols, blocksize):
            i2 = min(i1 + blocksize, cols)
            count = i2 - i1
            w1 = wt[i1:i2]  # updated in place: each row ends as its pruned column
            err1 = torch.empty((count, rows), dtype=torch.float32, device=wt.device)
            hinv1 = hinv[i1:i2, i1:i2]
            d1 = torch.diagonal(hinv1).reshape(-1, 1)
            # 2. unstructured: choose the whole block's mask up front by w^2 / d^2.
            if pattern.kind == "unstructured":
                scores = (w1.square() / d1.square()).T
                mask1 = ~make_mask(w1.T, pattern, scores=scores).T
            else:
                mask1 = torch.zeros((count, rows), dtype=torch.bool, device=wt.device)
            # Columns go in small groups (one N:M group, or 16 columns): updates inside a group
            # are applied column by column, the rest of the block is updated once per group.
            step = pattern.m if pattern.kind == "nm" else min(16, count)
            for j1 in range(0, count, step):
                j2 = min(j1 + step, count)
                # 3. N:M: at the start of each group choose its M-N smallest w^2 / d^2 to prune.
                if pattern.kind == "nm":
                    tmp = w1[j1:j2].square() / d1[j1:j2].square()
                    if quant is not None:
                        # 3q. joint: keeping a weight costs its rounding error instead, so drop
                        #     the M-N whose pruning costs least beyond what rounding would
                        #     (a quantization group starts with an N:M group: G is a multiple
                        #     of M, so its scales are set here first)
                        s = _enter_group(wt, scales_t, hdiag, i1 + j1, pattern, quant)
                        rounded = round_to_grid(w1[j1:j2], s, quant.qmax).mul_(s)
                        tmp -= (rounded - w1[j1:j2]).square_() / d1[j1:j2].square()
                    drop = torch.topk(tmp, pattern.m - pattern.n, dim=0, largest=False).indices
                    mask1[j1:j2].scatter_(0, drop, True)
                for i in range(j1, j2):
                    if quant is None:
                        # 4. OBS update: the removed weights' error, spread over the later
                        #    columns (the column itself becomes its pruned version, q).
                        err = (w1[i] * mask1[i]).div_(hinv1[i, i])
                        w1[i:j2].addr_(hinv1[i, i:j2], err, alpha=-1.0)
                        err1[i] = err
                        continue
                    c = i1 + i
                    if pattern.kind != "nm":
                        _enter_group(wt, scales_t, hdiag, c, pattern, quant)
                    # 4q. prune, round the kept weights to the grid, push the whole error on.
                    s = scales_t[c // quant.group_size]
                    q = round_to_grid(w1[i].masked_fill(mask1[i], 0.0), s, quant.qmax).mul_(s)
                    err = (w1[i] - q).div_(hinv1[i, i])
                    w1[i + 1 : j2].addr_(hinv1[i, i + 1 : j2], err, alpha=-1.0)
                    w1[i] = q
                    err1[i] = err
                if j2 < count:
                    w1[j2:].sub_(hinv1[j1:j2, j2:].T @ err1[j1:j2])
            pruned_t[i1:i2] = mask1
            # 5. lazy update of every column right of the block.
            if i2 < cols:
                wt[i2:].sub_(hinv[i1:i2, i2:].T @ err1)
        wt.masked_fill_(pruned_t, 0.0)
        scales = None if scales_t is None else scales_t.T.contiguous()
        return wt.T.contiguous().to(weight.dtype), ~pruned_t.T.contiguous(), scales
