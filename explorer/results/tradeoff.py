"""The accuracy-versus-speed trade-off: one :class:`TradeoffPoint` a configuration, the Pareto front.

The HTML report (:mod:`explorer.results.html`) and the dashboard's plot
(:class:`explorer.widgets.TradeoffPlot`) draw the same points. Each point says where its
speed-up came from (:attr:`TradeoffPoint.speed_source`, one of :data:`SPEED_SOURCES`), so a
view can draw measured and estimated points differently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from explorer import _html
from explorer.results.speedup import model_speedups

__all__ = ["SPEED_SOURCES", "TradeoffPoint", "pareto_front", "pareto_points", "tradeoff_points"]

#: Where a point's speed-up came from, each with the short label a view shows.
SPEED_SOURCES = {
    "measured-model": "measured on the whole model",
    "estimate-layers": "estimate from per-layer speed-ups",
    "baseline": "dense baseline (1.0x by definition)",
    "none": "no speed-up measured",
}


@dataclass(frozen=True)
class TradeoffPoint:
    """One configuration's result: its speed-up over dense and its score.

    Attributes
    ----------
    label : str
        e.g. ``"wanda 2:4 all float16"``.
    speedup : float or None
        Speed-up over dense (1.0 = none); None when nothing was measured.
    score : float
        The model's metric (accuracy, cosine to dense, perplexity ...).
    config : str
        The configuration as JSON (:meth:`MethodConfig.to_json`), loaded again on click.
    details : dict
        Extra hover lines (e.g. how the speedup was obtained).
    speed_source : str
        One of :data:`SPEED_SOURCES`. Left empty, it is ``"none"`` without a speed-up and
        ``"estimate-layers"`` with one: a speed-up is an estimate unless it says otherwise.
    speed_from : str
        Whose measurements: ``"local"``, ``"reference (GPU, date)"`` or ``""``.
    model, method, pattern, dtype : str
        What was pruned, how, and in which dtype (the report's grouping).
    metric : str
        The score's name.
    dense : float or None
        The dense baseline's score at the same dtype.
    tokens : int or None
        Token count of the speed measurement.
    higher_is_better : bool
        Direction of the score.

    Examples
    --------
    >>> TradeoffPoint("wanda 2:4", 1.3, 0.95)
    TradeoffPoint('wanda 2:4', 1.30x estimate from per-layer speed-ups, score 0.95)
    >>> TradeoffPoint("dense", 1.0, 0.97, speed_source="baseline").speed_label
    'dense baseline (1.0x by definition)'
    """

    label: str
    speedup: float | None
    score: float
    config: str = "{}"
    details: dict = field(default_factory=dict, compare=False)
    speed_source: str = ""
    speed_from: str = ""
    model: str = ""
    method: str = ""
    pattern: str = ""
    metric: str = ""
    dense: float | None = None
    tokens: int | None = None
    higher_is_better: bool = True
    dtype: str = ""

    def __post_init__(self) -> None:
        if not self.speed_source:
            source = "none" if self.speedup is None else "estimate-layers"
            object.__setattr__(self, "speed_source", source)
        if self.speed_source not in SPEED_SOURCES:
            raise ValueError(
                f"speed_source {self.speed_source!r} unknown; expected one of "
                f"{', '.join(SPEED_SOURCES)}"
            )

    @property
    def speed_label(self) -> str:
        """Where the speed-up came from, in a few words."""
        return SPEED_SOURCES[self.speed_source]

    def hover(self) -> str:
        """Hover text: label, both numbers, where the speed-up came from and the details."""
        speed = "no speedup" if self.speedup is None else f"speedup {self.speedup:.3f}x"
        lines = [
            f"<b>{_html.escape(self.label)}</b>",
            f"{speed} ({_html.escape(self.speed_label)})",
            f"score {self.score:.4g}",
        ]
        lines += [f"{_html.escape(k)}: {_html.escape(v)}" for k, v in self.details.items()]
        return "<br>".join(lines)

    def __repr__(self) -> str:
        speed = "no speedup" if self.speedup is None else f"{self.speedup:.2f}x"
        return f"TradeoffPoint({self.label!r}, {speed} {self.speed_label}, score {self.score:.4g})"

    def _repr_html_(self) -> str:
        return _html.table(["", ""], [[k, v] for k, v in self._rows()], caption=self.label)

    def _rows(self) -> list[tuple[str, str]]:
        speed = "" if self.speedup is None else f"{self.speedup:.2f}x"
        return [
            ("speedup", speed),
            ("speed from", self.speed_label),
            ("score", f"{self.score:.4g}"),
        ]


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


def pareto_points(points: Sequence[TradeoffPoint]) -> list[TradeoffPoint]:
    """The points no other point beats on both speed-up and score, fastest first.

    Points without a speed-up are left out; the direction is the first point's
    ``higher_is_better``. See :func:`pareto_front` for the rule.

    Examples
    --------
    >>> p = lambda s, v: TradeoffPoint("", s, v)
    >>> [(q.speedup, q.score) for q in pareto_points([p(1.2, 0.9), p(1.1, 0.8), p(1.0, 0.95)])]
    [(1.2, 0.9), (1.0, 0.95)]
    """
    measured = [p for p in points if p.speedup is not None]
    if not measured:
        return []
    indices = pareto_front([(p.speedup, p.score) for p in measured], measured[0].higher_is_better)
    return [measured[i] for i in reversed(indices)]


def tradeoff_points(rows) -> list[TradeoffPoint]:
    """The report's points: every ok prune row of a results table, at each token count measured.

    A point's speed-up is the estimate :func:`explorer.results.speedup.model_speedups` makes
    from the layer speed rows of the same model, pattern, layers and dtype. Local speed rows win
    over reference ones for the same key; a configuration without any speed row gets one point
    with ``speedup=None``. Each model with a point that has a speed-up also gets its dense
    baseline at 1.0x (method ``"dense"``), the frontier's slow end.

    Parameters
    ----------
    rows : explorer.results.store.ResultTable
        The rows to draw (local and reference).

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> tradeoff_points(ResultStore(":memory:").query())
    []
    """
    speed_rows = rows.where(kind="layer-speed")
    local = model_speedups(r for r in speed_rows if r.source == "local")
    reference = model_speedups(r for r in speed_rows if r.source != "local")
    dense: dict[tuple, float] = {}
    for row in rows.where(kind="dense", status="ok", source="local"):
        name = row.metrics.get("metric")
        if isinstance(row.metrics.get(name), (int, float)):
            dense[(row.model, row.config.get("dtype"))] = float(row.metrics[name])
    points = []
    for row in rows.where(kind="prune", status="ok", source="local"):
        name = row.metrics.get("metric")
        value = row.metrics.get(name)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        c = row.config
        base = (c.get("model"), c.get("pattern"), c.get("layers"), c.get("dtype"))
        speeds = {k[4]: v for k, v in local.items() if k[:4] == base}
        for k, v in reference.items():
            if k[:4] == base:
                speeds.setdefault(k[4], v)
        label = " ".join(str(c.get(k)) for k in ("method", "pattern", "layers", "dtype"))
        common = {
            "label": label,
            "score": float(value),
            "model": str(c.get("model")),
            "method": str(c.get("method")),
            "pattern": str(c.get("pattern")),
            "metric": str(name),
            "dense": dense.get((c.get("model"), c.get("dtype"))),
            "higher_is_better": bool(row.metrics.get("higher_is_better", True)),
            "dtype": str(c.get("dtype")),
        }
        if not speeds:
            points.append(TradeoffPoint(**common, speedup=None, speed_source="none"))
        for tokens, (speedup, source) in sorted(speeds.items(), key=lambda kv: kv[0] or 0):
            points.append(
                TradeoffPoint(
                    **common,
                    speedup=speedup,
                    tokens=tokens,
                    speed_source="estimate-layers",
                    speed_from=source,
                )
            )
    baselines = []
    for model, dtype in sorted({(p.model, p.dtype) for p in points if p.speedup}):
        value = dense.get((model, dtype))
        same = next(p for p in points if p.model == model and p.speedup)
        if value is not None:
            baselines.append(
                TradeoffPoint(
                    f"dense {dtype}",
                    1.0,
                    value,
                    speed_source="baseline",
                    speed_from="by definition",
                    model=model,
                    method="dense",
                    pattern="dense",
                    metric=same.metric,
                    dense=value,
                    higher_is_better=same.higher_is_better,
                    dtype=dtype,
                )
            )
    return baselines + points
