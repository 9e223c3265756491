"""End-to-end speedup estimate of a pruned model from per-layer speedups.

Only the ``nn.Linear`` matmuls are counted (time proportional to ``out x in`` per token);
attention, norms and embeddings are left out, so the estimate is an upper bound for the
whole model. A 2:4-pruned layer uses the speedup recorded for its shape, token count and
dtype (:func:`explorer.widgets.kernel_runner.recorded_speed`) when there is one, else the
hardware bound of 2x; a layer the doctor marks "unsupported" (no sparse kernel runs it) or
"slow" (too small for a sparse kernel to pay off) counts as 1x unless a measurement says
otherwise, and so does every pattern other than 2:4.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["SpeedEstimate", "estimate_speedup"]

#: The speedup bound of sparse tensor cores (they double the math rate).
HARDWARE_BOUND = 2.0


@dataclass(frozen=True)
class SpeedEstimate:
    """An end-to-end speedup estimate and where its per-layer numbers came from."""

    speedup: float
    measured: int
    bounded: int
    unaccelerated: int
    gpus: tuple[str, ...] = ()
    bound: float = 1.0

    @property
    def source(self) -> str:
        """How the estimate was obtained, in words."""
        parts = []
        if self.measured:
            parts.append(f"{self.measured} layers recorded on {', '.join(self.gpus)}")
        if self.bounded:
            parts.append(f"{self.bounded} layers at the 2x bound (nothing recorded)")
        if self.unaccelerated:
            parts.append(f"{self.unaccelerated} layers at 1x (no speedup expected)")
        return "; ".join(parts) or "nothing pruned"

    def __repr__(self) -> str:
        return f"SpeedEstimate({self.speedup:.3f}x: {self.source})"


def estimate_speedup(
    shapes: Mapping[str, tuple[int, int]],
    pruned: Iterable[str],
    pattern: str = "2:4",
    tokens: int = 1024,
    dtype: str = "float16",
    verdicts: Mapping[str, str] | None = None,
    store=None,
    recorded: bool = True,
) -> SpeedEstimate:
    """Amdahl's law over the model's Linear layers.

    Parameters
    ----------
    shapes : mapping of str to (int, int)
        Every Linear layer's ``(out, in)``.
    pruned : iterable of str
        The layers that were pruned.
    pattern : str
        The pattern they were pruned to; only ``"2:4"`` is accelerated.
    verdicts : mapping of str to str, optional
        The doctor's verdicts for the pruned model; ``"unsupported"`` layers, and ``"slow"``
        ones without a recorded measurement, count as 1x.
    recorded : bool
        Look up recorded measurements (False: use the 2x bound for every accelerated layer).

    Examples
    --------
    >>> estimate_speedup({"a": (4, 4), "b": (4, 4)}, ["a"], recorded=False).speedup
    1.3333333333333333
    >>> estimate_speedup({"a": (4, 4)}, ["a"], pattern="4:8").speedup
    1.0
    >>> estimate_speedup({"a": (4, 4)}, ["a"], verdicts={"a": "slow"}, recorded=False).bound
    2.0
    """
    from explorer.widgets.kernel_runner import recorded_speed

    pruned = set(pruned)
    verdicts = verdicts or {}
    dense = sparse = ideal = 0.0
    measured = bounded = unaccelerated = 0
    gpus: list[str] = []
    for name, (out, inp) in shapes.items():
        cost = float(out) * float(inp)
        dense += cost
        if name not in pruned or pattern != "2:4":
            unaccelerated += name in pruned
            sparse += cost
            ideal += cost
            continue
        ideal += cost / HARDWARE_BOUND
        verdict = verdicts.get(name)
        rows = (
            []
            if verdict == "unsupported" or not recorded
            else recorded_speed((out, inp), tokens, dtype, store)
        )
        if verdict in ("unsupported", "slow") and not rows:
            unaccelerated += 1
            sparse += cost
        elif rows:
            measured += 1
            gpus += [rows[0]["gpu"]] if rows[0]["gpu"] not in gpus else []
            sparse += cost / rows[0]["speedup"]
        else:
            bounded += 1
            sparse += cost / HARDWARE_BOUND
    speedup = dense / sparse if sparse else 1.0
    bound = dense / ideal if ideal else 1.0
    return SpeedEstimate(speedup, measured, bounded, unaccelerated, tuple(gpus), bound)
