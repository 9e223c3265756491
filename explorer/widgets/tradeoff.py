"""The trade-off plot: :class:`~explorer.results.tradeoff.TradeoffPoint` s with their frontier.

The points and the frontier rule live in :mod:`explorer.results.tradeoff`; this module holds
the plot's state (points, metric, listeners) and hands it to the view.
"""

from __future__ import annotations

from collections.abc import Callable

from explorer.results.tradeoff import TradeoffPoint, pareto_front

__all__ = ["TradeoffPlot", "TradeoffPoint", "pareto_front"]


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
        """Call ``callback(plot)`` after points are added or cleared."""
        self._listeners.append(callback)

    def on_click(self, callback: Callable[[TradeoffPoint], None]) -> None:
        """Call ``callback(point)`` when a point is clicked."""
        self._click.append(callback)

    def _changed(self) -> None:
        for callback in list(self._listeners):
            callback(self)

    def add(self, point: TradeoffPoint) -> None:
        """Add a point; a point with the same label replaces the old one."""
        self.points = [p for p in self.points if p.label != point.label] + [point]
        self._changed()

    def clear(self, metric: str | None = None, higher_is_better: bool | None = None) -> None:
        """Remove every point (and optionally switch the metric)."""
        self.points = []
        self.metric = self.metric if metric is None else metric
        if higher_is_better is not None:
            self.higher_is_better = higher_is_better
        self._changed()

    def frontier(self) -> list[TradeoffPoint]:
        """The Pareto-optimal points by increasing speedup."""
        idx = pareto_front([(p.speedup, p.score) for p in self.points], self.higher_is_better)
        return [self.points[i] for i in idx]

    def click(self, index: int) -> TradeoffPoint:
        """Report a click on point ``index`` to the listeners and return the point."""
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
