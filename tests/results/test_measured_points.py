"""Measured points: a configuration's own model-speed rows win over estimates, labelled so."""

from __future__ import annotations

import pytest

from explorer.results.html import write_report
from explorer.results.model_speed import MeasuredSpeed, measured_speed, model_speed_row
from explorer.results.store import ResultStore
from explorer.results.tradeoff import choose_speed, tradeoff_points

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "time": "2026-01-02T03:04:05+00:00"}
BASE = {"model": "digits-mlp", "layers": "all", "dtype": "float16"}
ACC = {"metric": "accuracy", "higher_is_better": True}


def _fill(store: ResultStore) -> None:
    store.record("dense", {**BASE, "cell": "dense"}, {**ACC, "accuracy": 0.97})
    for method in ("magnitude", "wanda"):
        config = {**BASE, "method": method, "pattern": "2:4"}
        store.record("prune", config, {**ACC, "accuracy": 0.95})
    # layer rows give both configurations an estimate of 1.50x at 4096 tokens ...
    store.record(
        "layer-speed",
        {**BASE, "pattern": "2:4", "tokens": 4096, "shape": [256, 256], "count": 1},
        {"speedup": 1.5},
        provenance=H100,
    )
    # ... but wanda's own model was timed whole: 1.18x in CUDA graphs at 4096 tokens
    timed = model_speed_row(
        {**BASE, "method": "wanda", "pattern": "2:4"},
        4096,
        "graphs",
        {"dense_ms": 11.8, "sparse_ms": 10.0, "ceiling": 1.3, "timed_as": "graphs"},
    )
    store.record(**timed, provenance=H100)


def test_the_report_prefers_the_measured_row_and_labels_it(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        _fill(store)
        points = tradeoff_points(store.query(include_reference=False))
    by = {p.method: p for p in points}
    assert by["magnitude"].speed_source == "estimate-layers"
    assert by["magnitude"].speedup == pytest.approx(1.5) and by["magnitude"].speed_note == ""
    wanda = by["wanda"]
    assert wanda.speed_source == "measured-model" and wanda.speedup == pytest.approx(1.18)
    assert wanda.tokens == 4096 and wanda.speed_note == "measured, graphs, 4096 tokens"
    hover = wanda.hover()
    assert "speedup 1.180x (measured, graphs, 4096 tokens)" in hover
    assert "ceiling (estimate): 1.30x" in hover


def test_the_html_report_draws_and_lists_measured_points(tmp_path):
    pytest.importorskip("plotly")
    db = tmp_path / "r.db"
    with ResultStore(db) as store:
        _fill(store)
    html = write_report(db, tmp_path / "report.html", include_reference=False).read_text()
    assert "measured, graphs, 4096 tokens" in html and "diamond" in html
    assert "Whole-model speed, measured (1 rows)" in html


def test_a_measured_speed_without_a_gpu_is_none_and_the_estimate_stays(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        _fill(store)
        skipped = model_speed_row(
            {**BASE, "method": "magnitude", "pattern": "2:4"}, 4096, "graphs", reason="no CUDA GPU"
        )
        store.record(**skipped)
        rows = store.query(include_reference=False)
    assert measured_speed(rows, method="magnitude") is None
    assert measured_speed(rows, method="wanda", tokens=1024).tokens == 4096  # the nearest
    assert measured_speed(rows, method="wanda", mode="eager") is None


def test_choose_speed_puts_the_own_measurement_first():
    own = MeasuredSpeed(0.97, "eager", 16, "H100", dense_ms=1.0, sparse_ms=1.03)
    rows = [{"label": "m", "speedup": 1.4, "gpu": "H100", "source": "local", "commit": ""}]
    choice = choose_speed(rows, model_speed=own)
    assert choice.speedup == 0.97 and choice.note == "measured, eager, 16 tokens"
    assert repr(choice) == "SpeedChoice(0.97x, measured, eager, 16 tokens)"
    assert choice.details["dense / sparse"] == "1.000 ms / 1.030 ms"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tokens": 0, "mode": "graphs"}, "tokens=0"),
        ({"tokens": 16, "mode": "fast"}, "speed mode 'fast' unknown"),
        ({"tokens": 16, "mode": "eager", "metrics": {"dense_ms": 1.0}}, "needs positive"),
        ({"tokens": 16, "mode": "eager", "metrics": {"made_up": 1}}, "made_up"),
        ({"tokens": 16, "mode": "eager", "status": "failed"}, "needs the reason"),
    ],
)
def test_bad_model_speed_rows_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        model_speed_row({"model": "m"}, **kwargs)


def test_measured_speed_repr_and_html():
    speed = MeasuredSpeed(1.2, "compile", 64, "H200", asked="graphs")
    assert repr(speed) == "MeasuredSpeed(1.20x measured, compile, 64 tokens, on H200)"
    assert "asked for" in speed._repr_html_() and "1.20x" in speed._repr_html_()
