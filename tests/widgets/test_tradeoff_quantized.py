"""The trade-off plot draws int8, int4 and FP8 points by precision, a colour and a legend each."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.results.quantized_points import PRECISION_COLOURS, QuantizedPoint
from explorer.results.quantized_speed import quantized_speed_row
from explorer.results.store import ResultStore
from explorer.results.tradeoff import TradeoffPoint
from explorer.widgets import TradeoffPlot
from explorer.widgets.tradeoff import NO_DATA, SPEED_MARKERS

FP8, INT4 = "float8_e4m3fn", "int4"


def _plot() -> TradeoffPlot:
    plot = TradeoffPlot("accuracy")
    plot.add(TradeoffPoint("dense", 1.0, 0.97, speed_source="baseline"))
    plot.add(TradeoffPoint("wanda 2:4 all", 1.3, 0.95, speed_source="measured-model"))
    measured = {"speed_source": "measured-model", "tokens": 4096, "mode": "graphs"}
    plot.add(QuantizedPoint("FP8 dense", 1.24, 0.965, pattern="dense", precision=FP8, **measured))
    plot.add(
        QuantizedPoint(
            "FP8 2:4 wanda", 1.25, 0.94, pattern="2:4", precision=FP8, speedup_same=1.01, **measured
        )
    )
    plot.add(QuantizedPoint("int4 2:4 sparsegpt joint", None, 0.93, pattern="2:4", precision=INT4))
    return plot


def test_quantized_points_get_a_trace_per_precision_and_pattern_after_the_sources():
    plot = _plot()
    traces = plot.kind_traces()
    assert [t["name"] for t in traces] == [
        SPEED_MARKERS["baseline"][0],
        SPEED_MARKERS["measured-model"][0],
        "int4: no speed data (drawn apart)",
        "FP8 dense, measured on the whole model",
        "FP8 2:4, measured on the whole model",
    ]
    # the unquantized measured trace keeps only its own point
    assert traces[1]["customdata"] == [1] and traces[1]["marker"]["color"] == "#0969da"
    int4, fp8_dense, fp8_sparse = traces[2:]
    assert int4["x"] == [NO_DATA] and int4["xaxis"] == "x2" and int4["customdata"] == [4]
    assert int4["marker"] == {"size": 11, "symbol": "x", "color": PRECISION_COLOURS[INT4]}
    assert fp8_dense["x"] == [1.24] and fp8_dense["marker"]["symbol"] == "square"
    assert fp8_sparse["x"] == [1.25] and fp8_sparse["marker"]["symbol"] == "circle"
    assert fp8_dense["marker"]["color"] == fp8_sparse["marker"]["color"] == PRECISION_COLOURS[FP8]
    assert PRECISION_COLOURS[FP8] != PRECISION_COLOURS[INT4]
    assert "xaxis" not in fp8_sparse and fp8_sparse["text"] == ["FP8 2:4 wanda"]
    assert fp8_sparse["hovertext"][0].startswith("<b>FP8 2:4 wanda</b>")
    assert plot.click(3).label == "FP8 2:4 wanda"


def test_the_note_explains_the_precision_colours_and_the_strip():
    plot = _plot()
    note = plot.note()
    assert "<b>Quantized</b>" in note and ">FP8</span>" in note and ">int4</span>" in note
    assert "over bf16 dense" in note and "strip" in note
    assert "<b>Quantized</b>" not in TradeoffPlot().note()
    # the frontier takes every point with a speed-up, quantized or not
    assert [p.label for p in plot.frontier()] == ["dense", "FP8 dense", "wanda 2:4 all"]


def test_the_figure_draws_the_precisions_and_their_legend():
    pytest.importorskip("plotly")
    pytest.importorskip("ipywidgets")
    from explorer.widgets.views import tradeoff_figure

    plot = _plot()
    fig = tradeoff_figure(plot)
    names = [t.name for t in fig.data]
    assert names[-1] == "Pareto frontier" and "FP8 2:4, measured on the whole model" in names
    fp8 = fig.data[names.index("FP8 2:4, measured on the whole model")]
    assert fp8.marker.color == PRECISION_COLOURS[FP8] and fp8.showlegend is not False
    int4 = fig.data[names.index("int4: no speed data (drawn apart)")]
    assert int4.xaxis == "x2" and fig.layout.xaxis2.visible is True


def _store_with_quantized(tmp_path, model: str) -> ResultStore:
    store = ResultStore(tmp_path / "q.db")
    acc = {"metric": "score", "higher_is_better": True}
    config = {"model": model, "method": "magnitude", "pattern": "2:4", "dtype": "bfloat16"}
    store.record("prune", {**config, "quant": "fp8"}, {**acc, "score": 0.5})
    store.record(
        "dense", {"model": model, "dtype": "bfloat16", "quant": "fp8"}, {**acc, "score": 0.6}
    )
    row = quantized_speed_row(
        model, FP8, "dense", 1, 1024, "graphs", {"ms": 1.0, "speedup_over_bf16": 1.2}
    )
    store.record(**row, provenance={"gpu": "NVIDIA H100"})
    return store


def test_the_dashboard_draws_the_stores_quantized_points_of_its_model(tmp_path):
    from explorer.widgets import Dashboard

    torch.manual_seed(0)
    with _store_with_quantized(tmp_path, "Sequential") as store:
        dash = Dashboard(nn.Sequential(nn.Linear(16, 16)), tokens=1024, store=store)
        points = {p.label: p for p in dash.tradeoff.points}
        assert set(points) == {"dense", "FP8 dense", "FP8 2:4 magnitude"}
        # measured on this model at the page's 1024 tokens in CUDA graphs; 2:4 was not timed
        assert points["FP8 dense"].speedup == 1.2 and points["FP8 dense"].mode == "graphs"
        assert points["FP8 2:4 magnitude"].speedup is None
        # a recorded point has nothing to load; the page says so and stays as it is
        dash.tradeoff.click(dash.tradeoff.points.index(points["FP8 dense"]))
        assert dash.status.level == "info" and "nothing to load" in dash.status.text
        # another page's token count: no measurement at it, so the strip
        other = Dashboard(nn.Sequential(nn.Linear(16, 16)), tokens=16, store=store)
        assert all(p.speedup is None for p in other.tradeoff.points if p.label != "dense")


def test_a_dashboard_without_a_store_adds_no_quantized_point():
    from explorer.widgets import Dashboard

    dash = Dashboard(nn.Sequential(nn.Linear(16, 16)))
    assert [p.label for p in dash.tradeoff.points] == ["dense"]
