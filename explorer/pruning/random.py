"""Random pruning: the floor every other method must beat.

Scores are uniform random numbers from a generator seeded by ``seed`` and the layer's name, so a
layer gets the same mask whichever other layers are pruned with it.
"""

from __future__ import annotations

import zlib

import torch

from .._validate import check_matrix, check_scores
from ..masks import make_mask
from ..patterns import Pattern

__all__ = ["random_mask"]


def random_mask(
    weight: torch.Tensor, pattern: Pattern, seed: int = 0, name: str = ""
) -> torch.Tensor:
    """A keep-mask chosen at random under ``pattern``, reproducible from ``seed`` and ``name``.

    Parameters
    ----------
    weight : torch.Tensor
        ``(out_features, in_features)`` weight. Only its shape and device choose the mask, but a
        weight holding NaN or Inf is refused, as every other method refuses it: a random mask
        would keep some of them and hide that the layer diverged.
    pattern : Pattern
        Any pattern kind.
    seed : int
        Base seed.
    name : str
        The layer's name, mixed into the seed.

    Returns
    -------
    torch.Tensor
        Bool mask, True where kept.

    Raises
    ------
    ValueError
        The weight holds NaN or Inf (the message names the layer and the first one).

    Examples
    --------
    >>> m = random_mask(torch.ones(2, 8), Pattern.parse("2:4"), seed=0, name="fc")
    >>> m.sum().item()
    8
    >>> torch.equal(m, random_mask(torch.ones(2, 8), Pattern.parse("2:4"), seed=0, name="fc"))
    True
    """
    weight = check_matrix(weight, "weight").detach()
    check_scores(weight, f"the weight of layer {name!r}" if name else "weight")
    gen = torch.Generator().manual_seed((int(seed) * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
    scores = torch.rand(weight.shape, generator=gen).to(weight.device)
    return make_mask(weight, pattern, scores=scores)
