"""The search for an input-channel order that keeps the most score under an N:M pattern.

An N:M mask keeps the ``N`` largest scores of every group of ``M`` consecutive input channels
in each row. Which channels share a group is therefore a choice: reordering the input channels
(and reordering the producing layer's outputs the same way, so the model computes the same
function) changes how much importance the mask can keep. NVIDIA's ASP searches for this order
with channel swaps and can run for hours; here the search is a sequence of assignment problems,
as in the channel permutation of RIA (Zhang et al., 2024):

1. Start from the current order (so the result is never worse than no permutation).
2. For each slot ``s`` of the ``M`` slots of every group, take the channel in slot ``s`` out of
   each group. Every group now holds ``M - 1`` channels; putting channel ``c`` back into group
   ``b`` keeps, per row, the group's ``N - 1`` largest scores plus ``max(t_b, v_c)``, where
   ``t_b`` is the group's ``N``-th largest remaining score and ``v_c`` the channel's score.
   That gives the kept score of every (group, channel) pair exactly.
3. Solve the assignment of removed channels to groups that maximises the total kept score
   (``scipy.optimize.linear_sum_assignment``); putting each channel back where it was is one
   of the choices, so a round never loses score.
4. Repeat over the slots until a full round gains nothing or the time budget is spent.
"""

from __future__ import annotations

import time

import torch

from ..errors import require

__all__ = ["kept_score", "search_permutation"]

#: Elements per chunk when the (group x channel x row) comparisons are evaluated.
_CHUNK_ELEMENTS = 1 << 24


def kept_score(scores: torch.Tensor, n: int, m: int, order: torch.Tensor | None = None) -> float:
    """Total score kept by the N:M mask of ``scores`` (rows x channels) in the given column order.

    Parameters
    ----------
    scores : torch.Tensor
        Non-negative importance scores, shape ``(rows, channels)``; ``channels % m == 0``.
    n, m : int
        Keep ``n`` of every ``m`` consecutive channels.
    order : torch.Tensor, optional
        Column order (a permutation of ``range(channels)``); default the identity.

    Returns
    -------
    float
        Sum over rows and groups of the ``n`` largest scores per group.

    Examples
    --------
    >>> s = torch.tensor([[5.0, 5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0]])
    >>> kept_score(s, 2, 4), kept_score(s, 2, 4, torch.tensor([0, 1, 4, 5, 2, 3, 6, 7]))
    (12.0, 20.0)
    """
    s = scores if order is None else scores[:, order]
    rows, cols = s.shape
    grouped = s.reshape(rows, cols // m, m).double()
    return float(grouped.topk(n, dim=-1).values.sum())


def _assignment_gain(thr: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """``out[b, c] = sum_r max(thr[r, b], vals[r, c])`` in float64, in memory-bounded chunks."""
    rows, groups = thr.shape
    out = torch.empty((groups, vals.shape[1]), dtype=torch.float64)
    step = max(1, _CHUNK_ELEMENTS // max(1, rows * vals.shape[1]))
    for b0 in range(0, groups, step):
        b1 = min(groups, b0 + step)
        both = torch.maximum(thr[:, b0:b1, None], vals[:, None, :])
        out[b0:b1] = both.sum(0, dtype=torch.float64)
    return out


def search_permutation(
    scores: torch.Tensor, n: int, m: int, seconds: float, max_rounds: int = 50
) -> tuple[torch.Tensor, float, float, int]:
    """An input-channel order that raises the score kept by an N:M mask.

    Parameters
    ----------
    scores : torch.Tensor
        Non-negative importance scores ``(rows, channels)`` (e.g. ``|W|`` or Wanda's
        ``|W| * ||X||``); rows may stack several layers or heads that must share one order.
    n, m : int
        The N:M pattern; ``channels`` must be a multiple of ``m``.
    seconds : float
        Time budget; checked between assignment problems (the first one always runs).
    max_rounds : int
        At most this many rounds over the ``m`` slots.

    Returns
    -------
    tuple
        ``(order, kept_before, kept_after, rounds)``: ``order`` is a permutation of the
        channels (new position ``i`` holds old channel ``order[i]``); the kept scores are in the
        identity order and in ``order``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> s = torch.rand(16, 32, generator=g)
    >>> order, before, after, rounds = search_permutation(s, 2, 4, seconds=5.0)
    >>> after >= before, sorted(order.tolist()) == list(range(32))
    (True, True)
    """
    linear_sum_assignment = require("scipy.optimize", "models").linear_sum_assignment
    cols = scores.shape[1]
    if cols % m:
        raise ValueError(f"{cols} channels are not a multiple of M={m}; pad or skip the layer")
    s = scores.detach().to("cpu", torch.float32)
    groups = cols // m
    order = torch.arange(cols)
    before = kept_score(s, n, m)
    current = before
    if groups < 2:
        return order, before, before, 0
    deadline = time.perf_counter() + seconds
    rounds = 0
    for rounds in range(1, max_rounds + 1):
        gained = False
        for slot in range(m):
            if rounds > 1 or slot > 0:
                if time.perf_counter() >= deadline:
                    return order, before, current, rounds
            layout = order.view(groups, m)
            others = [k for k in range(m) if k != slot]
            removed = layout[:, slot].clone()
            # 1. what each group keeps without its channel in this slot.
            rest = s[:, layout[:, others]].sort(dim=-1, descending=True).values
            base = rest[..., : n - 1].sum(dim=(0, 2), dtype=torch.float64)
            thr = rest[..., n - 1]
            # 2. kept score of every (group, returning channel) pair; 3. the best assignment.
            gain = _assignment_gain(thr, s[:, removed]) + base[:, None]
            rows_idx, cols_idx = linear_sum_assignment(gain.numpy(), maximize=True)
            total = float(gain.numpy()[rows_idx, cols_idx].sum())
            stay = float(gain.diagonal().sum())
            if total > stay * (1 + 1e-9) + 1e-12:
                layout[torch.as_tensor(rows_idx), slot] = removed[torch.as_tensor(cols_idx)]
                current = kept_score(s, n, m, order)
                gained = True
        if not gained:
            break
    return order, before, current, rounds
