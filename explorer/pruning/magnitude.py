"""Magnitude pruning: keep the largest weights the pattern allows.

The classic baseline: no data, one pass over each weight. Groups of N:M keep their N largest
``|w|``; unstructured keeps the largest per layer (or per row); blocks and rows are ranked by
the L2 norm of their entries.
"""

from __future__ import annotations

import torch

from ..masks import make_mask
from ..patterns import Pattern

__all__ = ["magnitude_mask"]


def magnitude_mask(weight: torch.Tensor, pattern: Pattern) -> torch.Tensor:
    """The keep-mask of the largest ``|w|`` under ``pattern``.

    Parameters
    ----------
    weight : torch.Tensor
        ``(out_features, in_features)`` weight.
    pattern : Pattern
        Any pattern kind.

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
    return make_mask(weight.detach(), pattern, scores=weight.detach().abs().float())
