"""Wanda: prune by weight magnitude times input activation norm.

Sun et al., "A Simple and Effective Pruning Approach for Large Language Models" (2023). The
score of ``W_ij`` is ``|W_ij| * ||X_j||_2``, where ``X_j`` is input column ``j`` over every
calibration token the layer saw. Weights are only masked, never updated. For unstructured
sparsity the scores are compared within each output row, as the paper does (a per-layer
comparison is much worse for language models); N:M groups are compared within each group.
"""

from __future__ import annotations

import dataclasses

import torch

from ..masks import make_mask
from ..patterns import Pattern
from .calibration import InputStats

__all__ = ["wanda_mask", "wanda_scores"]


def wanda_scores(weight: torch.Tensor, stats: InputStats) -> torch.Tensor:
    """``|W| * ||X_j||_2`` in float32 (input column norms broadcast over rows).

    Parameters
    ----------
    weight : torch.Tensor
        ``(out_features, in_features)`` weight.
    stats : InputStats
        The layer's recorded inputs.

    Returns
    -------
    torch.Tensor

    Examples
    --------
    >>> s = InputStats(2, torch.device("cpu"))
    >>> s.add(torch.tensor([[3.0, 0.0], [4.0, 1.0]]))
    >>> wanda_scores(torch.tensor([[1.0, -2.0]]), s).tolist()
    [[5.0, 2.0]]
    """
    norms = stats.col_norms_sq.clamp_min(0).sqrt().to(weight.device)
    return weight.detach().abs().float() * norms.reshape(1, -1)


def wanda_mask(weight: torch.Tensor, pattern: Pattern, stats: InputStats) -> torch.Tensor:
    """Wanda's keep-mask for one layer.

    Parameters
    ----------
    weight : torch.Tensor
        ``(out_features, in_features)`` weight.
    pattern : Pattern
        ``nm`` or ``unstructured`` (compared per output row).
    stats : InputStats
        The layer's recorded inputs.

    Returns
    -------
    torch.Tensor
        Bool mask, True where kept.

    Examples
    --------
    >>> s = InputStats(4, torch.device("cpu"))
    >>> s.add(torch.tensor([[10.0, 1.0, 1.0, 1.0]]))
    >>> wanda_mask(torch.tensor([[0.2, 0.9, 0.5, 0.1]]), Pattern.parse("2:4"), s).tolist()
    [[True, True, False, False]]
    """
    if pattern.kind == "unstructured" and not pattern.per_row:
        pattern = dataclasses.replace(pattern, per_row=True)
    return make_mask(weight.detach(), pattern, scores=wanda_scores(weight, stats))
