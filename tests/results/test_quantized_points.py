"""Quantized points: int8, int4 and FP8 accuracy rows placed by speed measured on the same model."""

from __future__ import annotations

import pytest

from explorer.results.quantized_points import QuantizedPoint, precision_groups, quantized_points
from explorer.results.quantized_speed import quantized_speed_row
from explorer.results.store import ResultStore
from explorer.results.tradeoff import TradeoffPoint, tradeoff_points

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "commit": "abc1234", "time": "2026-01-02T03:04:05+00:00"}
ACC = {"metric": "accuracy", "higher_is_better": True}


def _accuracy(store: ResultStore, model: str = "tiny") -> None:
    """bf16 dense and magnitude 2:4, then FP8, int8 and int4 rows of the same model."""
    bf16 = {"model": model, "dtype": "bfloat16", "layers": "all"}
    prune = {**bf16, "method": "magnitude", "pattern": "2:4"}
    store.record("dense", {**bf16, "cell": "dense"}, {**ACC, "accuracy": 0.97})
    store.record("dense", {**bf16, "cell": "dense", "quant": "fp8"}, {**ACC, "accuracy": 0.965})
    store.record("prune", prune, {**ACC, "accuracy": 0.95})
    store.record("prune", {**prune, "quant": "fp8"}, {**ACC, "accuracy": 0.945})
    store.record("prune", {**prune, "quant": "int8"}, {**ACC, "accuracy": 0.949})
    int4 = {**prune, "method": "sparsegpt", "group_size": 64}
    store.record("prune", {**int4, "quant": "int4"}, {**ACC, "accuracy": 0.94})
    store.record("prune", {**int4, "quant": "int4-rtn"}, {**ACC, "accuracy": 0.93})


def _speed(store: ResultStore, model: str, precision: str, runs, mode: str = "graphs") -> None:
    for pattern, (batch, seq), over_bf16, over_same in runs:
        metrics = {"ms": 1.0, "bf16_dense_ms": over_bf16, "speedup_over_bf16": over_bf16}
        if pattern == "2:4":
            metrics.update(same_dense_ms=over_bf16 / over_same, speedup_over_same=over_same)
        row = quantized_speed_row(model, precision, pattern, batch, seq, mode, metrics)
        store.record(**row, provenance=H100)


@pytest.fixture
def rows(tmp_path):
    with ResultStore(tmp_path / "q.db") as store:
        _accuracy(store)
        # FP8 measured on this very model, two batch shapes of 4096 tokens; int4 on another
        _speed(
            store,
            "tiny",
            "float8_e4m3fn",
            [
                ("dense", (4, 1024), 1.24, None),
                ("2:4", (4, 1024), 1.25, 1.01),
                ("2:4", (1, 4096), 1.30, 1.05),
            ],
        )
        _speed(store, "tiny", "float8_e4m3fn", [("2:4", (4, 1024), 1.24, 1.05)], mode="eager")
        _speed(store, "llama-8b", "int4", [("2:4", (16, 1), 1.24, 1.54)])
        yield store.query(include_reference=False)


def test_each_precision_gets_its_points_labelled_by_precision_and_pattern(rows):
    points = quantized_points(rows)
    labels = sorted({p.label for p in points})
    assert labels == [
        "FP8 2:4 magnitude",
        "FP8 dense",
        "int4 2:4 sparsegpt RTN",
        "int4 2:4 sparsegpt joint",
        "int8 2:4 magnitude",
    ]
    assert all(isinstance(p, QuantizedPoint) for p in points)
    assert {p.precision for p in points} == {"float8_e4m3fn", "int8", "int4"}


def test_a_measured_point_has_both_speedups_and_says_where_it_was_measured(rows):
    fp8 = [p for p in quantized_points(rows) if p.label == "FP8 2:4 magnitude"]
    by_mode = {p.mode: p for p in fp8}
    assert set(by_mode) == {"graphs", "eager"}
    graphs = by_mode["graphs"]
    # two batch shapes at 4096 tokens: the lowest over bf16 dense is shown, both are listed
    assert graphs.speedup == 1.25 and graphs.speedup_same == 1.01 and graphs.tokens == 4096
    assert graphs.speed_source == "measured-model"
    assert graphs.speed_note == "measured on the whole model, graphs, 4096 tokens"
    assert graphs.details["over FP8 dense"] == "1.01x"
    assert graphs.details["measured"] == "tiny 4x1024: 1.25x / 1.01x; tiny 1x4096: 1.30x / 1.05x"
    assert graphs.details["on"] == "NVIDIA H100 80GB HBM3, commit abc1234"
    assert graphs.details["accuracy"] == "FP8 e4m3 weights and activations, emulated"
    hover = graphs.hover()
    assert "speedup 1.250x (measured on the whole model, graphs, 4096 tokens)" in hover
    assert "over bf16 dense: 1.25x" in hover and "over FP8 dense: 1.01x" in hover
    assert repr(graphs) == (
        "QuantizedPoint('FP8 2:4 magnitude', 1.25x over bf16 dense, 1.01x over FP8 dense, "
        "score 0.945)"
    )
    assert "over FP8 dense" in graphs._repr_html_()
    dense = next(p for p in quantized_points(rows) if p.label == "FP8 dense")
    assert dense.speedup == 1.24 and dense.speedup_same == 1.0 and dense.pattern == "dense"
    assert dense.details["over FP8 dense"] == "1.0x (it is that baseline)"


def test_accuracy_without_speed_of_the_same_model_goes_to_the_no_data_strip(rows):
    points = {p.label: p for p in quantized_points(rows)}
    int4 = points["int4 2:4 sparsegpt joint"]
    # int4 was timed on llama-8b (random weights), not on this model: no speed, never 1.0x
    assert int4.speedup is None and int4.speed_source == "none" and int4.speedup_same is None
    assert int4.details["why"] == "no whole-model int4 2:4 speed of tiny recorded"
    assert int4.details["measured for"].startswith("llama-8b (another model")
    assert int4.details["accuracy"].endswith("(joint), group size 64")
    assert "drawn in the no-data strip, not at 1.0x" in int4.hover()
    int8 = points["int8 2:4 magnitude"]
    assert int8.speedup is None and "measured for" not in int8.details


def test_the_dashboards_token_count_and_mode_pick_one_measurement(rows):
    fp8 = [p for p in quantized_points(rows, tokens=4096, mode="graphs") if p.precision]
    assert sorted((p.label, p.speedup) for p in fp8 if p.speedup) == [
        ("FP8 2:4 magnitude", 1.25),
        ("FP8 dense", 1.24),
    ]
    other = {p.label: p for p in quantized_points(rows, tokens=1024)}
    assert other["FP8 2:4 magnitude"].speedup is None
    assert other["FP8 2:4 magnitude"].details["measured at"].startswith("eager 4096 tokens")
    assert quantized_points(rows, models=["other"]) == []


def test_tradeoff_points_add_them_after_the_unquantized_ones_with_a_bf16_baseline(rows):
    points = tradeoff_points(rows)
    plain = [p for p in points if not isinstance(p, QuantizedPoint)]
    # the quantized rows change nothing for the unquantized ones: the dense score stays bf16's
    assert [(p.label, p.speedup, p.score) for p in plain] == [
        ("dense bfloat16", 1.0, 0.97),
        ("magnitude 2:4 all bfloat16", None, 0.95),
    ]
    assert plain[1].dense == 0.97
    quantized = [p for p in points if isinstance(p, QuantizedPoint)]
    assert points[len(plain) :] == quantized and len(quantized) == 6


def test_a_store_of_unquantized_rows_gives_no_quantized_point(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        store.record("prune", {"model": "m", "pattern": "2:4", "method": "wanda"}, ACC)
        assert quantized_points(store.query(include_reference=False)) == []


def test_other_patterns_have_no_sparse_kernel(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        config = {"model": "m", "method": "wanda", "pattern": "4:8", "quant": "int8"}
        store.record("prune", config, {**ACC, "accuracy": 0.9})
        (point,) = quantized_points(store.query(include_reference=False))
    assert point.label == "int8 4:8 wanda" and point.speedup is None
    assert point.details["why"].startswith("no sparse kernel runs 4:8")


def test_precision_groups_give_each_precision_its_colour_and_the_strip(rows):
    points = [TradeoffPoint("dense", 1.0, 0.97, speed_source="baseline")]
    points += quantized_points(rows, tokens=4096, mode="graphs")
    groups = precision_groups(points)
    names = [name for name, _, _, _ in groups]
    assert names == [
        "int8: no speed data (drawn apart)",
        "int4: no speed data (drawn apart)",
        "FP8 dense, measured on the whole model",
        "FP8 2:4, measured on the whole model",
    ]
    colours = {name.split()[0].rstrip(":"): marker["color"] for name, marker, _, _ in groups}
    assert len(set(colours.values())) == 3
    symbols = [marker["symbol"] for _, marker, _, _ in groups]
    assert symbols == ["x", "x", "square", "circle"]
    assert [strip for _, _, _, strip in groups] == [True, True, False, False]
    assert 0 not in {i for _, _, idx, _ in groups for i in idx}  # the bf16 point is not theirs


def test_the_gpu_kernels_int8_rows_are_labelled_apart(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        for kind, extra in (("dense", {}), ("prune", {"method": "magnitude", "pattern": "2:4"})):
            for quant in ("int8", "int8-gpu"):
                config = {"model": "m", "dtype": "float32", "quant": quant, **extra}
                store.record(kind, config, {**ACC, "accuracy": 0.9})
        labels = [p.label for p in quantized_points(store.query(include_reference=False))]
    assert labels == [
        "int8 dense",
        "int8 dense (GPU kernel)",
        "int8 2:4 magnitude",
        "int8 2:4 magnitude (GPU kernel)",
    ]
