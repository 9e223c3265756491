"""Pareto frontier on hand-made points, against brute force, and the plot's callbacks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from explorer.widgets import TradeoffPlot, TradeoffPoint, pareto_front


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
