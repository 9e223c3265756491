"""Magnitude pruning: keep the largest weights the pattern allows.

The classic baseline: no data, one pass over each weight. Groups of N:M keep their N largest
``|w|``; unstructured keeps the largest per layer (or per row); blocks and rows are ranked by
the L2 norm of their entries.
"""

from __future__ import annotations

import torch

from .._validate import check_scores
from ..masks import make_mask
from ..patterns import Pattern

__all__ = ["magnitude_mask"]


def magnitude_mask(weight: torch.Tensor, pattern: Pattern, name: str | None = None) -> torch.Tensor:
    """The keep-mask of the largest ``|w|`` under ``pattern``.

    Parameters
    ----------
    weight : torch.Tensor
        ``(out_features, in_features)`` weight.
    pattern : Pattern
        Any pattern kind.
    name : str, optional
        The layer's name, for the error a NaN or Inf weight gets.

    Returns
    -------
    torch.Tensor
        Bool mask, True where kept.

    Examples
    --------
    >>> w = torch.tensor([[0.1, -0.9, 0.5, 0.2]])
    >>> magnitude_mask(w, Pattern.parse("2:4")).tolist()
    [[False, True, True, False]]
    """
    check_scores(weight.detach(), f"the weight of layer {name!r}" if name else "weight")
    return make_mask(weight.detach(), pattern, scores=weight.detach().abs().float())
