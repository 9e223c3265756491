"""The HTML report: self-contained, with the trade-off plot, the Pareto frontier and versions."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from explorer.results.html import write_report
from explorer.results.store import ResultStore
from explorer.results.tradeoff import TradeoffPoint, pareto_points, tradeoff_points

GPU = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "gpu_capability": "9.0",
    "torch": "2.11.0",
    "cusparselt": "0.8.0",
    "time": "2026-01-02T03:04:05+00:00",
}


def _fill(store: ResultStore) -> None:
    base = {"model": "digits-mlp", "layers": "all", "dtype": "float16"}
    acc = {"metric": "accuracy", "higher_is_better": True}
    store.record("dense", {**base, "cell": "dense"}, {**acc, "accuracy": 0.97})
    for method, pattern, value in [
        ("magnitude", "2:4", 0.95),
        ("wanda", "2:4", 0.96),
        ("magnitude", "4:8", 0.965),
    ]:
        store.record(
            "prune",
            {**base, "method": method, "pattern": pattern},
            {**acc, "accuracy": value, "density": 0.5},
        )
    for shape, count, speedup in [([256, 64], 1, 1.0), ([256, 256], 1, 1.5)]:
        store.record(
            "layer-speed",
            {**base, "pattern": "2:4", "tokens": 4096, "shape": shape, "count": count},
            {"speedup": speedup},
            provenance=GPU,
        )
    store.record(
        "layer-speed",
        {**base, "pattern": "2:4", "tokens": 64},
        status="skipped",
        error="no CUDA GPU here",
    )


def test_pareto_front_hand_computed():
    def p(s, v, hib=True):
        return TradeoffPoint("", s, v, higher_is_better=hib)

    pts = [p(1.0, 0.9), p(1.5, 0.8), p(1.2, 0.85), p(1.2, 0.7), p(None, 0.99)]
    assert [(q.speedup, q.score) for q in pareto_points(pts)] == [
        (1.5, 0.8),
        (1.2, 0.85),
        (1.0, 0.9),
    ]
    low = [p(1.0, 10.0, False), p(1.5, 12.0, False), p(1.4, 13.0, False)]
    assert [(q.speedup, q.score) for q in pareto_points(low)] == [(1.5, 12.0), (1.0, 10.0)]
    assert pareto_points([]) == []


def test_tradeoff_points_weight_layers_by_work(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        _fill(store)
        points = tradeoff_points(store.query(include_reference=False))
    by = {(p.method, p.pattern): p for p in points}
    # work 256*64 at 1.0x and 256*256 at 1.5x: (16384 + 65536) / (16384 + 65536 / 1.5)
    assert by["magnitude", "2:4"].speedup == pytest.approx(81920 / (16384 + 65536 / 1.5))
    assert by["magnitude", "2:4"].tokens == 4096 and by["wanda", "2:4"].dense == 0.97
    assert by["magnitude", "4:8"].speedup is None
    assert by["dense", "dense"].speedup == 1.0 and by["dense", "dense"].score == 0.97
    front = pareto_points(points)  # dense (1.0x, 0.97) and wanda (1.30x, 0.96)
    assert [(p.method, p.score) for p in front] == [("wanda", 0.96), ("dense", 0.97)]


def test_report_is_self_contained_html_with_exports(tmp_path):
    pytest.importorskip("plotly")
    db = tmp_path / "r.db"
    with ResultStore(db) as store:
        _fill(store)
    out = write_report(
        db, tmp_path / "report.html", csv=tmp_path / "r.csv", json=tmp_path / "r.json"
    )
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert "Pareto frontier" in html and "NVIDIA H100 80GB HBM3" in html
    assert "no CUDA GPU here" in html and "wanda" in html
    assert 'src="http' not in html and "src='http" not in html  # plotly.js is inline
    assert len(html) > 1_000_000
    assert (tmp_path / "r.csv").read_text().startswith("source,")
    assert len(json.loads((tmp_path / "r.json").read_text())) >= 7


def test_report_without_plotly_is_tables(tmp_path, without_plotly):
    with ResultStore(tmp_path / "r.db") as store:
        _fill(store)
        html = write_report(store, tmp_path / "r.html").read_text()
    assert "pip install plotly" in html and "<table" in html and "<script" not in html


def test_report_of_empty_store(tmp_path):
    html = write_report(ResultStore(":memory:"), tmp_path / "e.html").read_text()
    assert "0 rows" in html


def test_report_pivots_benchmark_rows(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        for impl, mode, ms in [
            ("dense", "eager", 1.0),
            ("explorer", "eager", 0.8),
            ("torch", "eager", 4.0),
            ("dense", "graph", 0.9),
            ("explorer", "graph", 0.6),
        ]:
            config = {
                "suite": "matmul",
                "m": 4096,
                "n": 1024,
                "k": 4096,
                "dtype": "float16",
                "impl": impl,
                "mode": mode,
                "tokens": 1024,
            }
            store.record("bench-matmul", config, {"ms": ms}, provenance=GPU)
        html = write_report(store, tmp_path / "r.html", include_reference=False).read_text()
    assert "4096x4096 @ 1024" in html and "1.25x" in html and "0.25x" in html and "1.50x" in html


def test_report_of_missing_database_is_an_error(tmp_path):
    from explorer.results.store import StoreError

    with pytest.raises(StoreError, match="no results database"):
        write_report(tmp_path / "typo.db", tmp_path / "r.html")
    assert not (tmp_path / "typo.db").exists()


@given(st.lists(st.tuples(st.floats(0.1, 3.0), st.floats(0.0, 1.0), st.booleans()), max_size=12))
def test_pareto_front_is_undominated_and_dominates_the_rest(items):
    hib = items[0][2] if items else True
    pts = [TradeoffPoint("", s, v, higher_is_better=hib) for s, v, _ in items]
    front = pareto_points(pts)

    def better(a, b):
        return a.score >= b.score if hib else a.score <= b.score

    def dominates(a, b):
        strictly = a.speedup > b.speedup or (a.score > b.score if hib else a.score < b.score)
        return a.speedup >= b.speedup and better(a, b) and strictly

    for p in front:
        assert not any(dominates(q, p) for q in pts)
    for p in pts:
        assert p in front or any(
            dominates(q, p) or (q.speedup, q.score) == (p.speedup, p.score) for q in front
        )
