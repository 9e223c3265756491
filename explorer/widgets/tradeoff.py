"""The trade-off plot: :class:`~explorer.results.tradeoff.TradeoffPoint` s with their frontier.

The points, where their speed-ups come from and the frontier rule live in
:mod:`explorer.results.tradeoff`; this module holds the plot's state (points, metric,
listeners), groups the points by speed source with a marker for each, and hands that to the
view. Quantized configurations (:class:`~explorer.results.quantized_points.QuantizedPoint`:
int8, int4, FP8) are grouped by precision instead, a colour each
(:func:`~explorer.results.quantized_points.precision_groups`). Points without a speed-up are
drawn in a strip of their own, never at 1.0x.
"""

from __future__ import annotations

from collections.abc import Callable

from explorer import _html
from explorer.results.quantized_points import (
    PRECISION_COLOURS,
    QuantizedPoint,
    precision_groups,
)
from explorer.results.quantized_speed import PRECISIONS
from explorer.results.speedup import ESTIMATE_FORMULA
from explorer.results.tradeoff import TradeoffPoint, pareto_front

__all__ = ["SPEED_MARKERS", "TradeoffPlot"]

#: How each speed source is drawn: legend name and plotly marker (symbol, fill, colour).
#: Filled = measured, hollow = estimated, grey x = no data.
SPEED_MARKERS = {
    "baseline": ("dense: 1.0x by definition", {"symbol": "square", "color": "#24292f"}),
    "measured-model": (
        "speed measured on the whole model",
        {"symbol": "circle", "color": "#0969da"},
    ),
    "estimate-layers": (
        "estimate from measured layers",
        {"symbol": "diamond-open", "color": "#bc4c00", "line": {"width": 2}},
    ),
    "bound": (
        "upper bound, nothing measured (estimate)",
        {"symbol": "triangle-up-open", "color": "#8250df", "line": {"width": 2}},
    ),
    "none": ("no speed data (drawn apart)", {"symbol": "x", "color": "#8c959f"}),
}
#: Where the points without a speed-up sit: a category axis of its own.
NO_DATA = "no data"


class TradeoffPlot:
    """Points of (speedup, score) with their Pareto frontier; clicking a point calls back.

    Parameters
    ----------
    metric : str
        Name of the score axis.
    higher_is_better : bool
        Direction of the score.
    speedup_label : str
        Title of the speedup axis (says whether speedups are measured or estimated).

    Examples
    --------
    >>> plot = TradeoffPlot("accuracy")
    >>> plot.add(TradeoffPoint("dense", 1.0, 0.97))
    >>> plot.add(TradeoffPoint("magnitude 2:4 all float16", 1.3, 0.95))
    >>> plot.add(TradeoffPoint("random 2:4 all float16", 1.3, 0.40))
    >>> [p.label for p in plot.frontier()]
    ['dense', 'magnitude 2:4 all float16']
    """

    def __init__(
        self,
        metric: str = "score",
        higher_is_better: bool = True,
        speedup_label: str = "speedup over dense",
    ) -> None:
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.speedup_label = speedup_label
        self.points: list[TradeoffPoint] = []
        self._listeners: list[Callable[[TradeoffPlot], None]] = []
        self._click: list[Callable[[TradeoffPoint], None]] = []

    def on_change(self, callback: Callable[[TradeoffPlot], None]) -> None:
        """Call ``callback(plot)`` after points are added or cleared.

        Parameters
        ----------
        callback : callable
            Called with the plot.
        """
        self._listeners.append(callback)

    def on_click(self, callback: Callable[[TradeoffPoint], None]) -> None:
        """Call ``callback(point)`` when a point is clicked.

        Parameters
        ----------
        callback : callable
            Called with the clicked point.
        """
        self._click.append(callback)

    def _changed(self) -> None:
        for callback in list(self._listeners):
            callback(self)

    def add(self, point: TradeoffPoint) -> None:
        """Add a point; a point with the same label replaces the old one.

        Parameters
        ----------
        point : TradeoffPoint
            The point.
        """
        self.points = [p for p in self.points if p.label != point.label] + [point]
        self._changed()

    def clear(self, metric: str | None = None, higher_is_better: bool | None = None) -> None:
        """Remove every point (and optionally switch the metric).

        Parameters
        ----------
        metric : str or None, optional
            The new metric; None keeps the current one.
        higher_is_better : bool or None, optional
            The new metric's direction; None keeps the current one.
        """
        self.points = []
        self.metric = self.metric if metric is None else metric
        if higher_is_better is not None:
            self.higher_is_better = higher_is_better
        self._changed()

    def frontier(self) -> list[TradeoffPoint]:
        """The Pareto-optimal points by increasing speedup (points without one are left out)."""
        timed = [p for p in self.points if p.speedup is not None]
        idx = pareto_front([(p.speedup, p.score) for p in timed], self.higher_is_better)
        return [timed[i] for i in idx]

    def groups(self) -> list[tuple[str, list[int]]]:
        """``(speed source, point indices)`` for each source present, in legend order.

        Quantized points are left out: :meth:`kind_traces` draws them by precision.
        """
        found = []
        for source in SPEED_MARKERS:
            idx = [
                i
                for i, p in enumerate(self.points)
                if p.speed_source == source and not isinstance(p, QuantizedPoint)
            ]
            if idx:
                found.append((source, idx))
        return found

    def ranges(self) -> tuple[list[float], list[float]]:
        """The speed-up and score axis ranges, padded so that markers and labels fit inside."""
        xs = [p.speedup for p in self.points if p.speedup is not None]
        ys = [p.score for p in self.points if p.score == p.score]
        lo, hi = (min(xs), max(xs)) if xs else (1.0, 1.0)
        span = max(hi - lo, 0.1)
        ylo, yhi = (min(ys), max(ys)) if ys else (0.0, 1.0)
        yspan = max(yhi - ylo, abs(yhi) * 0.01, 1e-3)
        return [lo - 0.12 * span, hi + 0.12 * span], [ylo - 0.12 * yspan, yhi + 0.25 * yspan]

    def text_positions(self) -> list[str]:
        """Where each point's label goes: away from the plot's edges, so it is never clipped."""
        (lo, hi), _ = self.ranges()
        out = []
        for p in self.points:
            if p.speedup is None:
                out.append("middle left")
                continue
            where = (p.speedup - lo) / (hi - lo)
            out.append(
                "top right" if where < 0.35 else "top left" if where > 0.65 else "top center"
            )
        return out

    def note(self) -> str:
        """What the speed axis means, as a short HTML note for under the plot."""
        present = {p.speed_source for p in self.points}
        parts = [
            "<b>Speed axis</b>: filled circle = measured on the whole model (this model, dtype "
            "and token count, on a GPU); hollow diamond = <i>estimate</i> from layers measured "
            f"for their shape, {_html.escape(ESTIMATE_FORMULA)}, layers without a measurement "
            "at the 2x bound or 1x where the doctor expects no gain; grey x = no speed data, "
            "drawn in the strip on the right, not at 1.0x."
        ]
        if "bound" in present:
            parts.append("Hollow triangle = upper bound with pruned layers at 2x (estimate).")
        quantized = {p.precision for p in self.points if isinstance(p, QuantizedPoint)}
        if quantized:
            colours = ", ".join(
                f"<span style='color:{colour}'>{PRECISIONS[name]}</span>"
                for name, colour in PRECISION_COLOURS.items()
                if name in quantized
            )
            parts.append(
                f"<b>Quantized</b> ({colours}): square = that precision run dense, circle = 2:4 "
                "at it, both measured on the whole model and placed at their speed-up over bf16 "
                "dense (the hover gives the one over the same precision dense); an x = its "
                "accuracy with no whole-model speed of this model, in the strip."
            )
        return " ".join(parts)

    def kind_traces(self) -> list[dict]:
        """One plotly ``Scatter`` argument dict per speed source present, in legend order.

        Then one per quantized precision and pattern, and per precision without a speed-up
        (:func:`~explorer.results.quantized_points.precision_groups`). Points without a
        speed-up go to the no-data strip (``xaxis="x2"``, x = ``"no data"``). ``customdata``
        holds each marker's index in :attr:`points`, for the click.
        """
        positions = self.text_positions()
        groups = [(*SPEED_MARKERS[source], idx, source == "none") for source, idx in self.groups()]
        out = []
        for name, marker, idx, strip in groups + precision_groups(self.points):
            pts = [self.points[i] for i in idx]
            out.append(
                {
                    "x": [NO_DATA if strip else p.speedup for p in pts],
                    "y": [p.score for p in pts],
                    # the strip is too narrow for labels: its points name themselves on hover
                    "text": ["" if strip else p.label for p in pts],
                    "hovertext": [p.hover() for p in pts],
                    "textposition": [positions[i] for i in idx],
                    "customdata": idx,
                    "name": name,
                    "marker": {"size": 11, **marker},
                    **({"xaxis": "x2"} if strip else {}),
                }
            )
        return out

    def click(self, index: int) -> TradeoffPoint:
        """Report a click on point ``index`` to the listeners and return the point.

        Parameters
        ----------
        index : int
            The point's index in :attr:`points`.

        Returns
        -------
        TradeoffPoint
        """
        if not 0 <= index < len(self.points):
            raise ValueError(f"no point {index}; the plot has {len(self.points)} points")
        point = self.points[index]
        for callback in list(self._click):
            callback(point)
        return point

    def traces(self) -> tuple[dict, dict]:
        """Arguments for the points' and the frontier's plotly ``Scatter`` traces."""
        front = self.frontier()
        direction = "higher" if self.higher_is_better else "lower"
        return (
            {
                "x": [p.speedup for p in self.points],
                "y": [p.score for p in self.points],
                "text": [p.label for p in self.points],
                "hovertext": [p.hover() for p in self.points],
                "name": f"configurations ({self.metric}, {direction} is better)",
            },
            {
                "x": [p.speedup for p in front],
                "y": [p.score for p in front],
                "name": "Pareto frontier",
            },
        )

    def view(self):
        """The plotly ``FigureWidget``, built lazily."""
        from explorer.widgets.views import tradeoff_figure

        return tradeoff_figure(self)

    def _repr_mimebundle_(self, **kwargs):
        return self.view()._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return (
            f"TradeoffPlot({len(self.points)} points, {len(self.frontier())} on the frontier, "
            f"metric={self.metric!r})"
        )
