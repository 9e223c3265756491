"""The HTML report's quantized parts: int8, int4 and FP8 on its plot, and their two tables.

:func:`quantized_traces` draws the :class:`~explorer.results.quantized_points.QuantizedPoint` s
of one model the way the dashboard does (:func:`~explorer.results.quantized_points.precision_groups`:
a colour per precision, a square for dense, a circle for 2:4, an x in the no-data strip).
:func:`quantized_tables` lists those points with both speed-ups, and every quantized
whole-model measurement (the benchmark's rows, :mod:`explorer.results.quantized_speed`) with
its times, whichever model it was measured on.
"""

from __future__ import annotations

from collections.abc import Sequence

from explorer import _html
from explorer.results.markdown import fmt
from explorer.results.quantized_points import QuantizedPoint, precision_groups
from explorer.results.quantized_speed import KIND, PRECISIONS
from explorer.results.tradeoff import TradeoffPoint

__all__ = ["NO_DATA", "quantized_tables", "quantized_traces"]

#: The category of the no-data strip on the report's plot.
NO_DATA = "no data"


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _hover(point: QuantizedPoint) -> str:
    lines = [f"<b>{_html.escape(point.label)}</b>", f"{point.metric} {point.score:.4g}"]
    if point.speedup is None:
        lines.append("no speed-up: drawn in the no-data strip, not at 1.0x")
    else:
        lines.append(f"{_x(point.speedup)} over bf16 dense")
        lines.append(f"{_x(point.speedup_same)} over {point.short} dense")
        lines.append(_html.escape(point.speed_note))
    lines += [f"{_html.escape(k)}: {_html.escape(v)}" for k, v in point.details.items()]
    return "<br>".join(lines)


def quantized_traces(points: Sequence[TradeoffPoint]) -> list[dict]:
    """Plotly ``Scatter`` arguments for the quantized points among ``points``.

    Points with a speed-up sit at it (over bf16 dense); those without go to the no-data
    strip, ``xaxis="x2"`` at x = :data:`NO_DATA`. Other points are left to the caller.

    Parameters
    ----------
    points : sequence of TradeoffPoint
        One model's points.

    Returns
    -------
    list of dict
        One per :func:`~explorer.results.quantized_points.precision_groups` group, each with
        its legend name and marker.

    Examples
    --------
    >>> pts = [QuantizedPoint("int4 2:4 sparsegpt joint", None, 64.4, precision="int4")]
    >>> [(t["name"], t["x"], t["xaxis"]) for t in quantized_traces(pts)]
    [('int4: no speed data (drawn apart)', ['no data'], 'x2')]
    """
    traces = []
    for name, marker, idx, strip in precision_groups(points):
        group = [points[i] for i in idx]
        traces.append(
            {
                "x": [NO_DATA if strip else p.speedup for p in group],
                "y": [p.score for p in group],
                "mode": "markers",
                "name": name,
                "text": [_hover(p) for p in group],
                "hovertemplate": "%{text}<extra></extra>",
                "marker": {"size": 11, **marker},
                **({"xaxis": "x2"} if strip else {}),
            }
        )
    return traces


def quantized_tables(rows, points: Sequence[TradeoffPoint], front: set[int]) -> str:
    """The report's two quantized tables, as HTML ("" when there is nothing quantized).

    The quantized configurations (accuracy, the speed-up over bf16 dense and over the same
    precision dense, where and how measured), then every quantized whole-model measurement
    of the rows, on any model: the benchmark's speed results beside bf16 and the same
    precision, whether or not a model with accuracy rows matches them.

    Parameters
    ----------
    rows : explorer.results.store.ResultTable
        The report's rows.
    points : sequence of TradeoffPoint
        The report's points (the quantized ones are listed).
    front : set of int
        ``id()`` of the points on a Pareto frontier.

    Returns
    -------
    str

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> quantized_tables(ResultStore(":memory:").query(), [], set())
    ''
    """
    quantized = [p for p in points if isinstance(p, QuantizedPoint)]
    parts = []
    if quantized:
        header = ["model", "configuration", "precision", "metric", "value", "dense", "change"]
        header += ["over bf16 dense", "over same precision dense", "tokens", "mode"]
        header += ["speed from", "Pareto"]
        body = [
            [
                p.model,
                p.label,
                p.short,
                p.metric,
                fmt(p.score, ".4g", ""),
                fmt(p.dense, ".4g", ""),
                "" if p.dense is None else fmt(p.score - p.dense, ".4g", ""),
                _x(p.speedup),
                _x(p.speedup_same) + (" (it is that baseline)" if p.pattern == "dense" else "")
                if p.speedup is not None
                else "",
                fmt(p.tokens, ".4g", ""),
                p.mode,
                p.details.get("why", "")
                if p.speedup is None
                else f"{p.speed_note}: {p.speed_from}",
                "yes" if id(p) in front else "",
            ]
            for p in quantized
        ]
        caption = f"Quantized configurations: accuracy and whole-model speed ({len(body)} points)"
        parts.append(_html.table(header, body, caption=caption))
    timed = [r for r in rows.where(kind=KIND, status="ok") if r.config.get("precision")]
    if timed:
        header = ["source", "model", "run", "tokens", "mode", "configuration", "ms"]
        header += ["bf16 dense ms", "same precision dense ms", "over bf16 dense"]
        header += ["over same precision dense", "relerr", "gpu", "commit"]
        body = []
        for r in timed:
            c, m = r.config, r.metrics
            short = PRECISIONS.get(c.get("precision"), c.get("precision"))
            same = "1.0x (it is that baseline)" if c.get("pattern") == "dense" else ""
            name = f"{short} {c.get('pattern')}"
            if c.get("precision") == "bfloat16" and c.get("pattern") == "dense":
                name = "bf16 dense copy (A/A)"  # equal work timed beside bf16 dense: its noise
            body.append(
                [
                    r.source,
                    r.model,
                    c.get("label"),
                    c.get("tokens"),
                    c.get("mode"),
                    name,
                    fmt(m.get("ms"), ".4g", ""),
                    fmt(m.get("bf16_dense_ms"), ".4g", ""),
                    fmt(m.get("same_dense_ms"), ".4g", ""),
                    _x(m.get("speedup_over_bf16")),
                    _x(m.get("speedup_over_same")) or same,
                    fmt(m.get("relerr"), ".2g", ""),
                    r.gpu,
                    r.provenance.get("commit") or "",
                ]
            )
        caption = f"Quantized whole-model speed, measured ({len(body)} rows)"
        parts.append(_html.table(header, body, caption=caption))
    return "\n".join(parts)
