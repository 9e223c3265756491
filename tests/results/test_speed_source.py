"""Where a configuration's speed-up comes from: the whole model measured, an estimate, or none."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from explorer.results.speedup import (
    ESTIMATE_FORMULA,
    SpeedEstimate,
    recorded_model_speed,
    row_speedup,
)
from explorer.results.store import ResultStore
from explorer.results.tradeoff import TradeoffPoint, choose_speed, tradeoff_points


def _model_row(store, model="m", dtype="bfloat16", tokens=4096, speedup=1.1, label=None):
    config = {"model": model, "dtype": dtype, "tokens": tokens, "label": label or model}
    store.record("bench-models", config, {"speedup": speedup}, provenance={"gpu": "H100"})


def test_model_rows_match_model_dtype_and_tokens_exactly():
    store = ResultStore(":memory:")
    _model_row(store, label="m 4x1024", speedup=1.02)
    _model_row(store, label="m 1x4096", speedup=1.10)
    _model_row(store, dtype="float16", speedup=0.9)
    _model_row(store, tokens=16, speedup=0.8)
    _model_row(store, model="other", speedup=1.5)
    found = recorded_model_speed("m", "bf16", 4096, store)
    assert [(r["label"], r["speedup"], r["source"]) for r in found] == [
        ("m 4x1024", 1.02, "local"),
        ("m 1x4096", 1.10, "local"),
    ]
    assert recorded_model_speed("m", "bfloat16", 1024, store) == []
    assert recorded_model_speed("nope", "bfloat16", 4096, store) == []


def test_the_reference_database_holds_whole_model_rows():
    found = recorded_model_speed("llama-1b", "bfloat16", 4096)
    assert {r["label"] for r in found} == {"llama-1b 4x1024", "llama-1b 1x4096"}
    assert all("H100" in r["gpu"] and r["commit"] and r["source"] != "local" for r in found)
    # the dashboard's models were not measured end to end
    assert recorded_model_speed("minilm", "bfloat16", 16384) == []


def test_a_whole_model_measurement_wins_with_the_lowest_row_listed():
    rows = [
        {"label": "m 4x1024", "speedup": 1.02, "gpu": "H100", "source": "ref", "commit": "abc"},
        {"label": "m 1x4096", "speedup": 1.10, "gpu": "H100", "source": "ref", "commit": "abc"},
    ]
    estimate = SpeedEstimate(1.5, 3, 0, 0, ("H100",), 1.6)
    choice = choose_speed(rows, estimate)
    assert (choice.speedup, choice.source, choice.speed_from) == (1.02, "measured-model", "ref")
    assert choice.details["measured"] == "m 4x1024: 1.02x; m 1x4096: 1.10x"
    assert choice.details["on"] == "H100, commit abc"
    assert choice.details["per-layer estimate (not shown)"] == "1.50x"
    # the user's own measurement wins over the reference's
    local = {**rows[1], "source": "local", "speedup": 1.3}
    assert choose_speed([*rows, local]).speedup == 1.3
    # a subset of the layers, or another pattern, is not what was measured
    assert choose_speed(rows, estimate, whole_model=False).source == "estimate-layers"
    assert choose_speed(rows, estimate, pattern="4:8").source == "none"


def test_an_estimate_needs_at_least_one_measured_layer():
    measured = choose_speed(estimate=SpeedEstimate(1.2, 1, 2, 3, ("H100",), 1.7))
    assert (measured.speedup, measured.source, measured.speed_from) == (
        1.2,
        "estimate-layers",
        "H100",
    )
    assert "1 layers recorded on H100" in measured.details["layers"]
    # only the 2x bound and 1x assumptions: no data, and never drawn at 1.0x
    guessed = choose_speed(estimate=SpeedEstimate(1.7, 0, 2, 3, (), 1.7))
    assert guessed.speedup is None and guessed.source == "none"
    assert guessed.details["bound (every 2:4 layer at 2x)"] == "1.70x"
    assert choose_speed().source == "none"


def test_hover_shows_the_formula_for_estimates_and_the_strip_for_no_data():
    estimate = TradeoffPoint("a", 1.2, 0.9, speed_source="estimate-layers", speed_from="H100")
    assert ESTIMATE_FORMULA in estimate.hover() and "measured by: H100" in estimate.hover()
    none = TradeoffPoint("b", None, 0.9)
    assert "not at 1.0x" in none.hover() and ESTIMATE_FORMULA not in none.hover()
    measured = TradeoffPoint("c", 1.1, 0.9, speed_source="measured-model")
    assert ESTIMATE_FORMULA not in measured.hover()


def test_a_layer_row_counts_with_its_gpu_time_when_that_is_slower():
    row = SimpleNamespace(metrics={"speedup": 1.42, "speedup_graph": 0.51})
    assert row_speedup(row) == 0.51
    assert row_speedup(SimpleNamespace(metrics={"speedup": 1.2, "speedup_graph": 1.5})) == 1.2
    # the shipped digits-mlp layers: faster eagerly, slower on the GPU, so slower in the end
    from explorer.results.speedup import recorded_speed

    assert recorded_speed((256, 64), 1024, "float16")[0]["speedup"] == pytest.approx(0.509, 1e-3)


def test_report_points_use_the_whole_model_measurement():
    store = ResultStore(":memory:")
    prune = {"model": "m", "method": "magnitude", "pattern": "2:4", "layers": "all"}
    prune |= {"dtype": "bfloat16"}
    store.record("prune", prune, {"metric": "accuracy", "accuracy": 0.9})
    store.record("prune", {**prune, "pattern": "4:8"}, {"metric": "accuracy", "accuracy": 0.95})
    _model_row(store, speedup=1.05)
    points = tradeoff_points(store.query())
    by_pattern = {p.pattern: p for p in points}
    assert by_pattern["2:4"].speed_source == "measured-model"
    assert (by_pattern["2:4"].speedup, by_pattern["2:4"].tokens) == (1.05, 4096)
    assert by_pattern["4:8"].speed_source == "none" and by_pattern["4:8"].speedup is None


def test_an_estimate_says_at_which_token_count_its_layers_were_measured():
    from explorer.results.speedup import estimate_speedup

    store = ResultStore(":memory:")
    config = {"shape": [64, 64], "tokens": 1024, "dtype": "float16", "pattern": "2:4"}
    store.record("layer-speed", config, {"speedup": 1.5}, provenance={"gpu": "H100"})
    est = estimate_speedup({"a": (64, 64), "b": (64, 64)}, ["a", "b"], tokens=4096, store=store)
    assert est.tokens == (1024,) and "2 layers recorded on H100 at 1024 tokens" in est.source
