"""Pareto frontier on hand-made points, against brute force, and the plot's callbacks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from explorer.results.tradeoff import TradeoffPoint, pareto_front
from explorer.widgets import TradeoffPlot


def brute_force(points, higher=True):
    sign = 1 if higher else -1
    keep = []
    for i, (x, y) in enumerate(points):
        if math.isnan(x) or math.isnan(y):
            continue
        dominated = any(
            (x2 >= x and sign * y2 >= sign * y and (x2 > x or sign * y2 > sign * y))
            for j, (x2, y2) in enumerate(points)
            if j != i and not (math.isnan(x2) or math.isnan(y2))
        )
        if not dominated:
            keep.append(i)
    return keep


def test_hand_made_points():
    pts = [(1.0, 0.97), (1.3, 0.95), (1.3, 0.40), (1.1, 0.96), (1.05, 0.90), (1.6, 0.2)]
    assert pareto_front(pts) == [0, 3, 1, 5]
    assert pareto_front(pts, higher_is_better=False) == [5]  # fastest and lowest


def test_nan_and_empty():
    assert pareto_front([]) == []
    assert pareto_front([(float("nan"), 1.0), (1.0, 0.5)]) == [1]


@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=25),
    st.booleans(),
)
def test_matches_brute_force(raw, higher):
    pts = [(float(x), float(y)) for x, y in raw]
    front = pareto_front(pts, higher)
    expected = brute_force(pts, higher)
    # duplicates: one representative of each identical non-dominated point is kept
    assert sorted({pts[i] for i in front}) == sorted({pts[i] for i in expected})
    assert [pts[i][0] for i in front] == sorted(pts[i][0] for i in front)


def test_plot_add_replace_click_and_traces():
    plot = TradeoffPlot("accuracy")
    changes, clicked = [], []
    plot.on_change(lambda p: changes.append(len(p.points)))
    plot.on_click(clicked.append)
    plot.add(TradeoffPoint("dense", 1.0, 0.97))
    plot.add(TradeoffPoint("wanda 2:4 all float16", 1.4, 0.93, details={"speedup from": "H100"}))
    plot.add(TradeoffPoint("wanda 2:4 all float16", 1.4, 0.94))
    assert changes == [1, 2, 2]
    points, front = plot.traces()
    assert points["x"] == [1.0, 1.4] and points["y"] == [0.97, 0.94]
    assert front["x"] == [1.0, 1.4]
    assert plot.click(1).score == 0.94 and clicked[0].label.startswith("wanda")
    with pytest.raises(ValueError, match="no point 5"):
        plot.click(5)
    plot.clear("perplexity", higher_is_better=False)
    assert plot.points == [] and plot.metric == "perplexity"


def _mixed_plot():
    plot = TradeoffPlot("accuracy")
    plot.add(TradeoffPoint("dense", 1.0, 0.97, speed_source="baseline"))
    plot.add(TradeoffPoint("wanda 2:4 all", 1.3, 0.95, speed_source="measured-model"))
    plot.add(TradeoffPoint("magnitude 2:4 one", 1.1, 0.96, speed_source="estimate-layers"))
    plot.add(TradeoffPoint("magnitude 4:8 all", None, 0.965))
    return plot


def test_each_speed_source_is_its_own_trace_with_its_own_marker():
    from explorer.widgets.tradeoff import NO_DATA, SPEED_MARKERS

    plot = _mixed_plot()
    traces = plot.kind_traces()
    names = [t["name"] for t in traces]
    assert names == [SPEED_MARKERS[s][0] for s in ("baseline", "measured-model")] + [
        SPEED_MARKERS["estimate-layers"][0],
        SPEED_MARKERS["none"][0],
    ]
    symbols = [t["marker"]["symbol"] for t in traces]
    assert symbols == ["square", "circle", "diamond-open", "x"] and len(set(symbols)) == 4
    # the point without a speed-up sits in the no-data strip, not at 1.0x
    none = traces[-1]
    assert none["x"] == [NO_DATA] and none["xaxis"] == "x2" and none["customdata"] == [3]
    assert all("xaxis" not in t for t in traces[:-1])
    assert [t["customdata"] for t in traces[:-1]] == [[0], [1], [2]]
    # and off the frontier
    assert [p.label for p in plot.frontier()] == ["dense", "magnitude 2:4 one", "wanda 2:4 all"]
    assert "hollow diamond = <i>estimate</i>" in plot.note() and "Σ" in plot.note()


def test_labels_point_away_from_the_edges():
    plot = _mixed_plot()
    (xlo, xhi), (ylo, yhi) = plot.ranges()
    assert xlo < 1.0 and xhi > 1.3 and ylo < 0.95 and yhi > 0.97
    assert plot.text_positions() == ["top right", "top left", "top center", "middle left"]
    empty = TradeoffPlot()
    assert empty.ranges()[0][0] < 1.0 < empty.ranges()[0][1] and empty.text_positions() == []


def test_figure_draws_the_kinds_and_a_click_finds_the_right_point():
    pytest.importorskip("plotly")
    pytest.importorskip("ipywidgets")
    from explorer.widgets.views import tradeoff_figure

    plot = _mixed_plot()
    clicked = []
    plot.on_click(clicked.append)
    fig = tradeoff_figure(plot)
    assert [t.name for t in fig.data][-1] == "Pareto frontier"
    assert fig.data[1].marker.symbol == "circle" and fig.data[2].marker.symbol == "diamond-open"
    assert all(t.cliponaxis is False for t in fig.data[:-1])
    assert fig.layout.xaxis2.visible is True and fig.data[3].xaxis == "x2"
    assert fig.layout.xaxis.range[0] < 1.0
    # a click on the estimate trace's first marker loads point 2
    from plotly.callbacks import InputDeviceState, Points

    points = Points(point_inds=[0], xs=[1.1], ys=[0.96], trace_name="", trace_index=2)
    fig.data[2]._dispatch_on_click(points, InputDeviceState())
    assert clicked[-1].label == "magnitude 2:4 one"
    # without points lacking a speed-up, no strip
    plot.clear()
    plot.add(TradeoffPoint("dense", 1.0, 0.9, speed_source="baseline"))
    assert fig.layout.xaxis2.visible is False and len(fig.data) == 2
