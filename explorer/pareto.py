"""The Pareto frontier of (speedup, score) points: the configurations worth shipping."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["pareto_front"]


def pareto_front(points: Sequence[tuple[float, float]], higher_is_better: bool = True) -> list[int]:
    """Indices of the points no other point beats on both speedup and score, by speedup.

    A point ``(speedup, score)`` is dominated when another is at least as fast and at least
    as good, and strictly better in one of the two. NaN points are never on the frontier.

    Parameters
    ----------
    points : sequence of (float, float)
        ``(speedup, score)`` pairs.
    higher_is_better : bool
        Whether a larger score is better (accuracy) or a smaller one (perplexity).

    Returns
    -------
    list of int
        Frontier indices ordered by increasing speedup.

    Examples
    --------
    >>> pareto_front([(1.0, 0.9), (1.2, 0.8), (1.1, 0.7), (1.2, 0.85)])
    [0, 3]
    >>> pareto_front([(1.0, 5.0), (1.5, 9.0)], higher_is_better=False)
    [0, 1]
    """
    sign = 1.0 if higher_is_better else -1.0
    finite = [
        (float(x), sign * float(y), i)
        for i, (x, y) in enumerate(points)
        if not (math.isnan(float(x)) or math.isnan(float(y)))
    ]
    # 1. sort by speedup descending, then score descending;
    # 2. sweep, keeping a point when its score beats every faster point's score.
    finite.sort(key=lambda p: (-p[0], -p[1]))
    front, best = [], -math.inf
    for _x, y, i in finite:
        if y > best:
            front.append(i)
            best = y
    front.reverse()
    return front
