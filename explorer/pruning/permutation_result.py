"""What :func:`explorer.pruning.permute_channels` returns."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from .. import _html
from ..patterns import Pattern

__all__ = ["PermutationResult", "PermutedLayer"]


@dataclass(frozen=True)
class PermutedLayer:
    """One reordered layer: its producers and the score an N:M mask keeps before and after.

    Attributes
    ----------
    name : str
        The consumer layer whose input channels were reordered.
    producers : tuple of str
        The layers whose output rows were reordered the same way.
    kind : str
        Which structure made it free (``"gated MLP"``, ``"attention heads"``, ...).
    kept_before, kept_after : float
        Score kept by the N:M mask in the original and in the new order.
    seconds : float
        Search time for this layer.

    Examples
    --------
    >>> PermutedLayer("fc2", ("fc1",), "sequential MLP", 10.0, 12.5, 0.1).gain
    0.25
    """

    name: str
    producers: tuple[str, ...]
    kind: str
    kept_before: float
    kept_after: float
    seconds: float

    @property
    def gain(self) -> float:
        """Relative gain in kept score, ``after / before - 1`` (NaN when nothing was kept)."""
        return self.kept_after / self.kept_before - 1 if self.kept_before > 0 else math.nan


@dataclass(frozen=True, eq=False)
class PermutationResult:
    """The outcome of a channel permutation.

    Attributes
    ----------
    pattern : Pattern
        The N:M pattern the order was searched for.
    permuted : dict of str to PermutedLayer
        The reordered layers.
    skipped : dict of str to str
        Candidate layers left in their order, with the reason.
    seconds : float
        Wall-clock time, calibration pass and output check included.
    orders : dict
        What was applied, by consumer (used to undo it).
    scored_by : str
        ``"|W|"`` or ``"|W| * ||X||"`` (with calibration).
    model : nn.Module or None
        The reordered model (the input model itself unless ``inplace=False``).

    Examples
    --------
    >>> r = PermutationResult(Pattern.parse("2:4"), {}, {"fc1": "no free producer"}, 0.0)
    >>> r
    PermutationResult(pattern='2:4', permuted=0, skipped=1, mean_gain=nan, seconds=0.00)
    """

    pattern: Pattern
    permuted: dict[str, PermutedLayer]
    skipped: dict[str, str]
    seconds: float
    orders: dict[str, Any] = field(default_factory=dict, repr=False)
    scored_by: str = "|W|"
    model: Any = field(default=None, repr=False)

    @property
    def mean_gain(self) -> float:
        """Mean relative gain in kept score over the reordered layers (NaN if none)."""
        gains = [p.gain for p in self.permuted.values() if math.isfinite(p.gain)]
        return sum(gains) / len(gains) if gains else math.nan

    @property
    def min_gain(self) -> float:
        """Smallest relative gain over the reordered layers (NaN if none)."""
        gains = [p.gain for p in self.permuted.values() if math.isfinite(p.gain)]
        return min(gains) if gains else math.nan

    def to_dict(self) -> dict:
        """A JSON-serialisable summary."""
        return {
            "pattern": self.pattern.name,
            "seconds": round(self.seconds, 4),
            "scored_by": self.scored_by,
            "mean_gain": None if math.isnan(self.mean_gain) else self.mean_gain,
            "permuted": {
                n: {"producers": list(p.producers), "kind": p.kind, "gain": p.gain}
                for n, p in self.permuted.items()
            },
            "skipped": dict(self.skipped),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def __repr__(self) -> str:
        return (
            f"PermutationResult(pattern={self.pattern.name!r}, permuted={len(self.permuted)}, "
            f"skipped={len(self.skipped)}, mean_gain={self.mean_gain:.4f}, "
            f"seconds={self.seconds:.2f})"
        )

    def _repr_html_(self) -> str:
        rows = [
            (n, p.kind, ", ".join(p.producers), f"{p.gain:+.2%}", f"{p.seconds:.2f}")
            for n, p in self.permuted.items()
        ]
        rows += [(n, "skipped", why, "-", "-") for n, why in self.skipped.items()]
        caption = (
            f"channel permutation for {self.pattern.name} (scored by {self.scored_by}): "
            f"{len(self.permuted)} layers reordered, mean gain in kept score "
            f"{self.mean_gain:+.2%}, {len(self.skipped)} skipped, {self.seconds:.2f} s"
        )
        return _html.table(
            ("layer", "kind", "producers / reason", "gain", "seconds"), rows, caption
        )
