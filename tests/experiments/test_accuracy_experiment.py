"""The accuracy experiment on a tiny run: digits-mlp, two methods, one or two patterns."""

from __future__ import annotations

import json
import math

import pytest

from explorer.experiments.accuracy import main, run
from explorer.experiments.table import Results, Row
from explorer.results.markdown import accuracy as report

SETTINGS = {"digits-mlp": {"calibration": 64, "finetune": {"steps": 5, "lr": 1e-3}}}


@pytest.fixture(scope="module")
def tiny():
    return run(
        ["digits-mlp"],
        methods=["random", "magnitude"],
        patterns=["2:4", "unstructured:0.5"],
        settings=SETTINGS,
        progress=False,
    )


def test_run_rows(tiny):
    keys = [(r.method, r.pattern) for r in tiny.rows]
    assert keys == [
        ("dense", "-"),
        ("random", "2:4"),
        ("magnitude", "2:4"),
        ("random", "unstructured:0.5"),
        ("magnitude", "unstructured:0.5"),
    ]
    dense = tiny.rows[0]
    assert dense.metric == "accuracy" and dense.value > 0.9 and dense.density == 1.0
    for row in tiny.rows[1:]:
        assert row.density == pytest.approx(0.5) and row.finetuned is not None
        assert 0.0 <= row.value <= 1.0 and row.prune_seconds >= 0.0 and row.error is None
    assert tiny.meta["models"]["digits-mlp"]["prunable_layers"] == 2
    assert {"date", "cpu", "torch", "python", "cores"} <= set(tiny.meta)


def test_model_is_restored_between_runs(tiny):
    from explorer.models import load

    # Each pruned run starts from the dense weights: magnitude is deterministic, so it must match
    # a fresh prune of a freshly loaded model.
    from explorer.pruning import prune

    bundle = load("digits-mlp")
    prune(bundle.model, "magnitude", "2:4", filter_fn=bundle.filter_fn, progress=False)
    expected = bundle.evaluate()["accuracy"]
    got = next(r for r in tiny.rows if r.method == "magnitude" and r.pattern == "2:4").value
    assert got == expected


def test_markdown_table_and_prose_survive_rerun(tiny, tmp_path):
    path = tmp_path / "accuracy.md"
    report.write_markdown(tiny, path)
    text = path.read_text()
    assert text.startswith("# Accuracy") and report.BEGIN in text and report.END in text
    assert "| method | 2:4 | unstructured:0.5 |" in text
    assert "| dense |" in text and "| magnitude |" in text and "→" in text
    assert "Seconds to prune" in text and "Expected orderings" in text
    path.write_text(
        "# Title\n\nProse before.\n\n" + text[text.index(report.BEGIN) :] + "\nAfter.\n"
    )
    report.write_markdown(tiny, path)
    again = path.read_text()
    assert again.startswith("# Title\n\nProse before.") and again.rstrip().endswith("After.")
    assert again.count(report.BEGIN) == 1


def test_json_round_trip(tiny, tmp_path):
    path = report.write_json(tiny, tmp_path / "accuracy.json")
    data = json.loads(path.read_text())
    back = Results.from_dict(data)
    assert [r.value for r in back.rows] == [r.value for r in tiny.rows]
    merged = Results.merge([back, back])
    assert len(merged.rows) == len(tiny.rows) and "digits-mlp" in merged.meta["models"]


def _row(method, pattern, value, higher=True):
    return Row("m", method, pattern, "score", value, {}, 0.0, 0.0, 0.5, higher_is_better=higher)


def test_ordering_checks_hand_case():
    rows = [
        _row("random", "2:4", 0.1),
        _row("magnitude", "2:4", 0.5),
        _row("wanda", "2:4", 0.7),
        _row("sparsegpt", "2:4", 0.4),
        _row("magnitude", "4:8", 0.6),
        _row("magnitude", "unstructured:0.5", 0.55),
    ]
    checks = dict((text.split(" (")[0], ok) for ok, text in report.ordering_checks(rows, "m"))
    assert checks["2:4 sparsegpt"] is False and checks["2:4 wanda"] is True
    assert checks["2:4 random"] is True
    assert checks["magnitude: unstructured:0.5"] is False  # 0.55 < 0.6 at 4:8
    lower = [_row("random", "2:4", 900.0, False), _row("magnitude", "2:4", 50.0, False)]
    assert all(ok for ok, _ in report.ordering_checks(lower, "m"))


def test_errors_are_recorded_not_raised(tmp_path):
    # weightnorm cannot make "rows" patterns: the run records the error and goes on.
    res = run(
        ["digits-mlp"],
        methods=["weightnorm", "magnitude"],
        patterns=["rows:0.25"],
        settings=SETTINGS,
        progress=False,
    )
    bad = next(r for r in res.rows if r.method == "weightnorm")
    assert bad.error and "weightnorm" in bad.error and math.isnan(bad.value)
    assert next(r for r in res.rows if r.method == "magnitude").error is None
    assert "error" in report.render(res)


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="unknown models"):
        run(["resnet"], progress=False)


def test_main_writes_markdown_and_json(tmp_path, capsys):
    out = tmp_path / "docs" / "acc.md"
    code = main(
        [
            "--models",
            "digits-mlp",
            "--methods",
            "magnitude",
            "--patterns",
            "2:4",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0 and out.exists() and out.with_suffix(".json").exists()
    assert not out.with_suffix(".partial.json").exists()
    assert "digits-mlp" in out.read_text()
    merged = tmp_path / "merged.md"
    assert main(["--merge", str(out.with_suffix(".json")), "--out", str(merged)]) == 0
    assert "### digits-mlp" in merged.read_text()


def test_main_resumes_from_its_store(tmp_path, monkeypatch):
    from explorer.sweeps import cells

    args = ["--models", "digits-mlp", "--methods", "magnitude", "--patterns", "2:4"]
    args += ["--db", str(tmp_path / "acc.db"), "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a.md")]) == 0

    def refuse(config, cancel=None):
        raise AssertionError("a finished cell ran again")

    monkeypatch.setattr(cells, "run_cell", refuse)
    assert main([*args, "--out", str(tmp_path / "b.md")]) == 0
    tables = [(tmp_path / f).read_text().split("### ")[1] for f in ("a.md", "b.md")]
    assert tables[0] == tables[1] and "| magnitude |" in tables[0]
