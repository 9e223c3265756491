"""The HTML report places int8, int4 and FP8 beside bf16 and lists both speed-ups."""

from __future__ import annotations

import pytest

from explorer.results.html import write_report
from explorer.results.quantized_points import QuantizedPoint
from explorer.results.quantized_report import quantized_tables, quantized_traces
from explorer.results.quantized_speed import quantized_speed_row
from explorer.results.store import ResultStore
from explorer.results.tradeoff import tradeoff_points

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "commit": "abc1234", "time": "2026-01-02T03:04:05+00:00"}
ACC = {"metric": "accuracy", "higher_is_better": True}


def _fill(store: ResultStore) -> None:
    """A model with bf16, FP8 and int4 accuracy, FP8 timed on it; int4 timed on llama-8b only."""
    bf16 = {"model": "tiny", "dtype": "bfloat16", "layers": "all"}
    prune = {**bf16, "method": "wanda", "pattern": "2:4"}
    store.record("dense", {**bf16, "cell": "dense"}, {**ACC, "accuracy": 0.97})
    store.record("dense", {**bf16, "cell": "dense", "quant": "fp8"}, {**ACC, "accuracy": 0.965})
    store.record("prune", prune, {**ACC, "accuracy": 0.95})
    store.record("prune", {**prune, "quant": "fp8"}, {**ACC, "accuracy": 0.945})
    store.record("prune", {**prune, "quant": "int4"}, {**ACC, "accuracy": 0.93})
    timed = [
        ("tiny", "float8_e4m3fn", "dense", 1.18, {}),
        ("tiny", "float8_e4m3fn", "2:4", 1.24, {"speedup_over_same": 1.05, "same_dense_ms": 8.5}),
        ("llama-8b", "int4", "2:4", 1.24, {"speedup_over_same": 1.54, "same_dense_ms": 2.5}),
    ]
    for model, precision, pattern, over_bf16, more in timed:
        metrics = {"ms": 8.0, "bf16_dense_ms": 10.0, "speedup_over_bf16": over_bf16, **more}
        row = quantized_speed_row(model, precision, pattern, 4, 1024, "eager", metrics)
        store.record(**row, provenance=H100)


def test_the_report_draws_each_precision_with_a_legend_and_lists_both_speedups(tmp_path):
    pytest.importorskip("plotly")
    db = tmp_path / "r.db"
    with ResultStore(db) as store:
        _fill(store)
    html = write_report(db, tmp_path / "report.html", include_reference=False).read_text()
    # the legend: one entry per precision and pattern measured, one for the no-data strip
    assert "FP8 dense, measured on the whole model" in html
    assert "FP8 2:4, measured on the whole model" in html
    assert "int4: no speed data (drawn apart)" in html
    assert '"xaxis":"x2"' in html.replace(" ", "")  # the strip, never at 1.0x
    # the table of configurations: both speed-ups, the mode and the token count
    assert "Quantized configurations: accuracy and whole-model speed (3 points)" in html
    assert "FP8 2:4 wanda" in html and "1.24x" in html and "1.05x" in html
    assert "measured on the whole model, eager, 4096 tokens" in html
    assert "no whole-model int4 2:4 speed of tiny recorded" in html
    # the benchmark's speed of another model is in the speed table, not on the plot
    assert "Quantized whole-model speed, measured (3 rows)" in html
    assert "llama-8b 4x1024" in html and "1.54x" in html and "abc1234" in html
    # the unquantized configuration is still in its own table
    assert "Pruned models" in html and "wanda 2:4 all bfloat16" in html


def test_without_plotly_the_tables_remain(tmp_path, without_plotly):
    with ResultStore(tmp_path / "r.db") as store:
        _fill(store)
        html = write_report(store, tmp_path / "r.html", include_reference=False).read_text()
    assert "pip install plotly" in html and "Quantized configurations" in html


def test_quantized_points_without_any_speed_still_get_a_plot(tmp_path):
    pytest.importorskip("plotly")
    with ResultStore(tmp_path / "r.db") as store:
        config = {"model": "tiny", "method": "wanda", "pattern": "2:4", "quant": "int8"}
        store.record("prune", config, {**ACC, "accuracy": 0.9})
        html = write_report(store, tmp_path / "r.html", include_reference=False).read_text()
    assert "int8: no speed data (drawn apart)" in html and "No speed rows" not in html


def test_traces_and_tables_are_plain_data(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        _fill(store)
        rows = store.query(include_reference=False)
    points = tradeoff_points(rows)
    traces = quantized_traces(points)
    assert [t["name"] for t in traces] == [
        "int4: no speed data (drawn apart)",
        "FP8 dense, measured on the whole model",
        "FP8 2:4, measured on the whole model",
    ]
    fp8 = traces[2]
    assert fp8["x"] == [1.24] and "1.05x over FP8 dense" in fp8["text"][0]
    html = quantized_tables(rows, points, set())
    assert html.count("<table") == 2 and "1.0x (it is that baseline)" in html
    only = [p for p in points if isinstance(p, QuantizedPoint)]
    assert all(p.model == "tiny" for p in only)


def test_bf16_rows_list_their_copy_as_the_a_a_and_add_no_point(tmp_path):
    db = tmp_path / "r.db"
    with ResultStore(db) as store:
        _fill(store)
        for pattern, over_bf16, more in (
            ("dense", 0.997, {}),
            ("2:4", 1.39, {"speedup_over_same": 1.4, "same_dense_ms": 7.12}),
        ):
            metrics = {"ms": 5.12, "bf16_dense_ms": 7.1, "speedup_over_bf16": over_bf16, **more}
            row = quantized_speed_row("llama-8b", "bfloat16", pattern, 1, 1, "graphs", metrics)
            store.record(**row, provenance=H100)
        rows = store.query()
    points = tradeoff_points(rows)
    html = quantized_tables(rows, points, set())
    assert "Quantized whole-model speed, measured (5 rows)" in html
    assert "bf16 dense copy (A/A)" in html and "bf16 2:4" in html and "1.39x" in html
    quantized = [p for p in points if isinstance(p, QuantizedPoint)]
    assert len(quantized) == 3  # the accuracy rows' points; bf16 speed rows add none
