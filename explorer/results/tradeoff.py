"""The accuracy-versus-speed trade-off: one :class:`TradeoffPoint` a configuration, the Pareto front.

The HTML report (:mod:`explorer.results.html`) and the dashboard's plot
(:class:`explorer.widgets.TradeoffPlot`) draw the same points. Each point says where its
speed-up came from (:attr:`TradeoffPoint.speed_source`, one of :data:`SPEED_SOURCES`), so a
view can draw measured and estimated points differently. :func:`choose_speed` is the one rule
that picks a configuration's speed-up and its source: the configuration's own model timed
whole (a ``model-speed`` row, :mod:`explorer.results.model_speed`), else a whole-model
measurement of the same model, else an estimate from measured layers, else no data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from explorer import _html
from explorer.results.model_speed import MODEL_SPEED, MeasuredSpeed, measured_speed
from explorer.results.speedup import ESTIMATE_FORMULA, model_speed_entry, model_speedups

__all__ = [
    "SPEED_SOURCES",
    "SpeedChoice",
    "TradeoffPoint",
    "choose_speed",
    "pareto_front",
    "pareto_points",
    "tradeoff_points",
]

#: Where a point's speed-up came from, each with the short label a view shows.
SPEED_SOURCES = {
    "measured-model": "measured on the whole model",
    "estimate-layers": "estimate from per-layer speed-ups",
    "bound": "upper bound, pruned layers at 2x (estimate, nothing measured)",
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
    speed_note : str
        How a measured speed-up was measured, shown in place of the source's label
        (``"measured, graphs, 4096 tokens"``); empty otherwise.

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
    speed_note: str = ""

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
        """Hover text: label, both numbers, where the speed-up came from and the details.

        An estimate from per-layer speed-ups also shows its formula; a point without a
        speed-up says that it is drawn apart, not at 1.0x.
        """
        speed = "no speedup" if self.speedup is None else f"speedup {self.speedup:.3f}x"
        lines = [
            f"<b>{_html.escape(self.label)}</b>",
            f"{speed} ({_html.escape(self.speed_note or self.speed_label)})",
            f"score {self.score:.4g}",
        ]
        if self.speed_from and self.speed_source != "baseline":
            lines.append(f"measured by: {_html.escape(self.speed_from)}")
        if self.speed_source == "estimate-layers":
            lines.append(f"formula: {_html.escape(ESTIMATE_FORMULA)}")
        if self.speed_source == "none":
            lines.append("drawn in the no-data strip, not at 1.0x")
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


@dataclass(frozen=True)
class SpeedChoice:
    """A configuration's speed-up, where it came from and the hover lines that explain it.

    Attributes
    ----------
    speedup : float or None
        None when nothing was measured (:attr:`source` ``"none"``).
    source : str
        One of :data:`SPEED_SOURCES`.
    speed_from : str
        Who measured it: ``"local"``, the reference's GPU and date, or ``""``.
    details : dict
        Hover lines.
    note : str
        For the configuration's own model timed whole: ``"measured, <mode>, <tokens> tokens"``
        (pass it on as :attr:`TradeoffPoint.speed_note`).
    """

    speedup: float | None
    source: str
    speed_from: str = ""
    details: dict = field(default_factory=dict, compare=False)
    note: str = ""

    @property
    def label(self) -> str:
        """The source in a few words (:data:`SPEED_SOURCES`)."""
        return SPEED_SOURCES[self.source]

    def __repr__(self) -> str:
        speed = "no speedup" if self.speedup is None else f"{self.speedup:.2f}x"
        return f"SpeedChoice({speed}, {self.note or self.label})"


def choose_speed(
    measured=(),
    estimate=None,
    pattern: str = "2:4",
    whole_model: bool = True,
    model_speed: MeasuredSpeed | None = None,
) -> SpeedChoice:
    """The one rule for a configuration's speed-up: measured, else estimated, else no data.

    0. The configuration's own pruned model timed whole (``model_speed``, from its
       ``model-speed`` rows: :func:`explorer.results.model_speed.measured_speed`) wins over
       everything else; its note names the mode and the token count.
    1. A whole-model measurement of this model, dtype and token count
       (:func:`explorer.results.speedup.recorded_model_speed`) wins when the configuration is
       the one measured: 2:4 on every prunable layer. With several rows (batch shapes of the
       same token count) the lowest is used and each is listed.
    2. Else an estimate (:class:`explorer.results.speedup.SpeedEstimate`) that rests on at
       least one layer measured for its shape: ``"estimate-layers"``, combined by
       :func:`explorer.results.speedup.combine_speedups`.
    3. Else no data: ``speedup=None``. An estimate with no layer measured is only the 2x
       bound, and 1.0x for layers that cannot run sparse is an assumption, not a measurement.

    Parameters
    ----------
    measured : sequence of dict
        :func:`~explorer.results.speedup.recorded_model_speed` rows.
    model_speed : MeasuredSpeed, optional
        The configuration's own model, timed whole.
    estimate : SpeedEstimate, optional
        The per-layer estimate for the same configuration.
    pattern : str
        The configuration's pattern; only 2:4 runs on sparse tensor cores.
    whole_model : bool
        Whether every prunable layer was pruned (False: one layer or a subset).

    Examples
    --------
    >>> rows = [{"label": "m 4x1024", "speedup": 1.02, "gpu": "H100", "source": "local",
    ...          "commit": "", "tokens": 4096}]
    >>> choose_speed(rows)
    SpeedChoice(1.02x, measured on the whole model)
    >>> from explorer.results.speedup import SpeedEstimate
    >>> choose_speed(estimate=SpeedEstimate(1.3, 2, 0, 1, ("H100",), 1.6))
    SpeedChoice(1.30x, estimate from per-layer speed-ups)
    >>> choose_speed(estimate=SpeedEstimate(1.6, 0, 3, 0, (), 1.6))
    SpeedChoice(no speedup, no speed-up measured)
    >>> choose_speed(rows, pattern="4:8")
    SpeedChoice(no speedup, no speed-up measured)
    >>> choose_speed(rows, model_speed=MeasuredSpeed(1.18, "graphs", 4096, "H100"))
    SpeedChoice(1.18x, measured, graphs, 4096 tokens)
    """
    if model_speed is not None:
        # 0. this very configuration, timed whole: what the user's pruned model runs at.
        details = model_speed.details()
        if estimate is not None:
            details["per-layer estimate (not shown)"] = f"{estimate.speedup:.2f}x"
        return SpeedChoice(
            model_speed.speedup, "measured-model", model_speed.source, details, model_speed.label
        )
    measured = list(measured) if pattern == "2:4" and whole_model else []
    # the user's own measurements win over the shipped reference's
    measured = [r for r in measured if r.get("source") == "local"] or measured
    if measured:
        # 1. the whole model, measured: the lowest of the rows, each listed.
        low = min(measured, key=lambda r: r["speedup"])
        where = f"{low['gpu']}" + (f", commit {low['commit']}" if low.get("commit") else "")
        details = {
            "measured": "; ".join(f"{r['label']}: {r['speedup']:.2f}x" for r in measured),
            "on": where,
        }
        if len(measured) > 1:
            details["shown"] = "the lowest of these"
        if estimate is not None:
            details["per-layer estimate (not shown)"] = f"{estimate.speedup:.2f}x"
        return SpeedChoice(low["speedup"], "measured-model", low["source"], details)
    if pattern != "2:4":
        why = f"no sparse kernel runs {pattern}: only 2:4 runs on sparse tensor cores"
        return SpeedChoice(None, "none", "", {"why": why})
    if estimate is not None and estimate.measured > 0:
        # 2. an estimate that rests on measured layers.
        details = {
            "layers": estimate.source,
            "bound (every 2:4 layer at 2x)": f"{estimate.bound:.2f}x",
        }
        return SpeedChoice(estimate.speedup, "estimate-layers", ", ".join(estimate.gpus), details)
    # 3. nothing measured for this configuration.
    details = {"why": "no speed recorded for this model or for its pruned layers' shapes"}
    if estimate is not None:
        details["layers"] = estimate.source
        details["bound (every 2:4 layer at 2x)"] = f"{estimate.bound:.2f}x"
    return SpeedChoice(None, "none", "", details)


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

    Parameters
    ----------
    points : Sequence[TradeoffPoint]
        The points.

    Returns
    -------
    list[TradeoffPoint]

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


def _by_tokens(speedups: dict, base: tuple) -> dict:
    # {tokens: {gpu kind: (speedup, source)}} of the model_speedups keys that start with base.
    out: dict = {}
    for key, value in speedups.items():
        if key[:4] == base:
            out.setdefault(key[4], {})[key[5]] = value
    return out


def _times_config(timed, prune) -> bool:
    # A model-speed row of a sweep names its prune cell; any other must match its fields.
    of_cell = timed.config.get("of_cell")
    if of_cell and prune.cell_key:
        return of_cell == prune.cell_key.split("#")[0]
    fields = ("model", "method", "pattern", "layers", "dtype")
    return all(timed.config.get(k) == prune.config.get(k) for k in fields)


def tradeoff_points(rows) -> list[TradeoffPoint]:
    """The report's points: every ok prune row of a results table, at each token count measured.

    A configuration whose own pruned model was timed whole (``model-speed`` rows of its sweep
    cell, ``of_cell``, or of the same model, method, pattern, layers and dtype) gets that
    measurement at each token count timed, labelled with its mode and token count. Else a 2:4
    configuration of every layer whose model was measured end to end (``bench-models``
    rows of the same model, dtype and token count) gets that measurement (see
    :func:`choose_speed`). Otherwise a point's speed-up is the estimate
    :func:`explorer.results.speedup.model_speedups` makes from the layer speed rows of the same
    model, pattern, layers and dtype, one point per kind of GPU they were timed on (kinds are
    never mixed in one speed-up). Local speed rows win over reference ones for the same key;
    a configuration without any speed row gets one point with ``speedup=None``. Each model with a point that has a speed-up also gets its dense
    baseline at 1.0x (method ``"dense"``), the frontier's slow end. Rows with a ``quant`` are
    :func:`explorer.results.quantized_points.quantized_points`'s points, placed last; a model
    with one measured gets its bfloat16 dense baseline.

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
    whole: dict[tuple, list[dict]] = {}
    for row in rows.where(kind="bench-models", status="ok", precision=None):
        entry = model_speed_entry(row)
        if entry is not None:
            whole.setdefault((entry["model"], entry["dtype"], entry["tokens"]), []).append(entry)
    timed = list(rows.where(kind=MODEL_SPEED, status="ok"))
    dense: dict[tuple, float] = {}
    for row in rows.where(kind="dense", status="ok", source="local", quant=None):
        name = row.metrics.get("metric")
        if isinstance(row.metrics.get(name), (int, float)):
            dense[(row.model, row.config.get("dtype"))] = float(row.metrics[name])
    points = []
    for row in rows.where(kind="prune", status="ok", source="local", quant=None):
        name = row.metrics.get("metric")
        value = row.metrics.get(name)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        c = row.config
        base = (c.get("model"), c.get("pattern"), c.get("layers"), c.get("dtype"))
        # {tokens: {gpu kind: (speedup, source)}}: one estimate per kind of GPU, never mixed;
        # local rows at a token count win over the reference's.
        speeds = _by_tokens(local, base)
        for tokens, kinds in _by_tokens(reference, base).items():
            speeds.setdefault(tokens, kinds)
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
        measured = {}
        if c.get("pattern") == "2:4" and c.get("layers") == "all":
            for (model, dtype, tokens), entries in whole.items():
                if model == c.get("model") and dtype == c.get("dtype"):
                    measured[tokens] = sorted(entries, key=lambda e: e["source"] != "local")
        own = [r for r in timed if _times_config(r, row)]
        own_tokens = {r.config["tokens"] for r in own}
        if not speeds and not measured and not own_tokens:
            points.append(TradeoffPoint(**common, speedup=None, speed_source="none"))
        for tokens in sorted(set(speeds) | set(measured) | own_tokens, key=lambda t: t or 0):
            if tokens in measured or tokens in own_tokens:
                mine = measured_speed(own, tokens=tokens) if tokens in own_tokens else None
                choice = choose_speed(measured.get(tokens, ()), model_speed=mine)
                points.append(
                    TradeoffPoint(
                        **common,
                        speedup=choice.speedup,
                        tokens=tokens,
                        details=choice.details,
                        speed_source=choice.source,
                        speed_from=choice.speed_from,
                        speed_note=choice.note,
                    )
                )
                continue
            for gpu, (speedup, source) in sorted(speeds[tokens].items()):
                points.append(
                    TradeoffPoint(
                        **common,
                        speedup=speedup,
                        tokens=tokens,
                        speed_source="estimate-layers",
                        speed_from=source if gpu in source else f"{source} ({gpu})",
                    )
                )
    from explorer.results.quantized_points import quantized_points  # it imports this module

    quantized = quantized_points(rows)
    timed = {(p.model, p.dtype) for p in points if p.speedup}
    timed |= {(p.model, "bfloat16") for p in quantized if p.speedup}
    baselines = []
    for model, dtype in sorted(timed):
        value = dense.get((model, dtype))
        same = next(p for p in points + quantized if p.model == model and p.speedup)
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
    return baselines + points + quantized
