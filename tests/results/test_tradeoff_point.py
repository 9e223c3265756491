"""One TradeoffPoint for the report and the dashboard: where its speed-up came from."""

import math

import pytest

from explorer.results.tradeoff import SPEED_SOURCES, TradeoffPoint, pareto_points


def test_speed_source_defaults_to_an_estimate_or_none():
    assert TradeoffPoint("a", 1.2, 0.9).speed_source == "estimate-layers"
    assert TradeoffPoint("a", None, 0.9).speed_source == "none"
    point = TradeoffPoint("a", 1.4, 0.9, speed_source="measured-model", speed_from="local")
    assert point.speed_label == SPEED_SOURCES["measured-model"]
    assert (
        "estimate" not in point.speed_label and "estimate" in TradeoffPoint("a", 1, 0).speed_label
    )


def test_unknown_speed_source_names_the_choices():
    with pytest.raises(ValueError, match=r"speed_source 'guess' unknown; expected one of measured"):
        TradeoffPoint("a", 1.0, 0.9, speed_source="guess")


def test_repr_and_hover_say_where_the_speedup_came_from():
    point = TradeoffPoint("wanda 2:4", 1.25, 0.93, details={"gpu": "H100"})
    assert repr(point) == (
        "TradeoffPoint('wanda 2:4', 1.25x estimate from per-layer speed-ups, score 0.93)"
    )
    assert "estimate from per-layer speed-ups" in point.hover() and "gpu: H100" in point.hover()
    assert "no speedup" in TradeoffPoint("x", None, math.nan).hover()
    assert "speed from" in point._repr_html_()


def test_pareto_points_leave_out_points_without_a_speedup():
    pts = [TradeoffPoint("a", None, 1.0), TradeoffPoint("b", 1.0, 0.5)]
    assert [p.label for p in pareto_points(pts)] == ["b"]
