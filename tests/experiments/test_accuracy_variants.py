"""The accuracy experiment's variants (permutation, ADMM update) and recovery rows."""

from __future__ import annotations

import json

import pytest

from explorer.experiments.accuracy import run
from explorer.experiments.settings import RECOVERY
from explorer.experiments.table import Results
from explorer.results.markdown import accuracy as report

SETTINGS = {"digits-mlp": {"calibration": 64, "finetune": None}}


@pytest.fixture(scope="module")
def variants():
    return run(
        ["digits-mlp"],
        methods=["magnitude", "wanda"],
        patterns=["2:4", "unstructured:0.5"],
        settings=SETTINGS,
        progress=False,
        variants=["", "permute", "admm", "permute+admm"],
    )


def test_variant_rows(variants):
    keys = [(r.label, r.pattern) for r in variants.rows if r.pattern == "unstructured:0.5"]
    # permutation is skipped where the pattern does not depend on channel order
    assert keys == [
        ("magnitude", "unstructured:0.5"),
        ("magnitude + admm", "unstructured:0.5"),
        ("wanda", "unstructured:0.5"),
        ("wanda + admm", "unstructured:0.5"),
    ]
    at24 = {r.label: r for r in variants.rows if r.pattern == "2:4"}
    assert set(at24) == {
        f"{m}{v}"
        for m in ("magnitude", "wanda")
        for v in ("", " + permute", " + admm", " + permute + admm")
    }
    both = at24["wanda + permute + admm"]
    assert both.permute_seconds > 0 and both.update_seconds > 0 and both.permute_gain > 0
    assert at24["wanda"].permute_seconds is None and at24["wanda"].update_seconds is None
    for row in at24.values():
        assert row.error is None and row.density == pytest.approx(0.5)


def test_variant_report(variants, tmp_path):
    text = report.render(variants)
    assert "| wanda + permute + admm |" in text and "| magnitude + admm |" in text
    assert text.index("| wanda + permute |") < text.index("| wanda + admm |")
    assert "Of which (seconds)" in text and "perm " in text and "admm " in text
    # the literature's orderings are checked on the plain methods only
    assert "wanda + admm" not in text.split("Expected orderings")[1]
    path = report.write_json(variants, tmp_path / "v.json")
    back = Results.from_dict(json.loads(path.read_text()))
    assert [r.label for r in back.rows] == [r.label for r in variants.rows]
    merged = Results.merge([back, back])
    assert len(merged.rows) == len(variants.rows)
    assert merged.meta["variants"] == ["", "permute", "admm", "permute+admm"]
    # merging a merged result keeps the list of original runs flat
    again = Results.merge([merged, back])
    assert len(again.meta["runs"]) == 3 and all("date" in run for run in again.meta["runs"])


def test_unknown_variant():
    with pytest.raises(ValueError, match="unknown variants"):
        run(["digits-mlp"], methods=["magnitude"], patterns=["2:4"], variants=["prune"])


def test_recovery_rows(monkeypatch):
    monkeypatch.setitem(
        RECOVERY,
        "digits-mlp",
        {"samples": 64, "seed": 1, "lr": 1e-3, "train": "masked"},
    )
    results = run(
        ["digits-mlp"],
        methods=["magnitude"],
        patterns=["2:4"],
        settings=SETTINGS,
        progress=False,
        recovery_minutes=0.02,
    )
    row = results.rows[1]
    assert row.recovered and row.label == "magnitude + recovery"
    assert row.finetuned is not None and row.finetune_steps >= 1
    assert row.finetune_seconds > 0  # recorded; the budget itself is tested in test_distill
    text = report.render(results)
    assert "masked distillation from the dense model" in text
    assert "| magnitude + recovery |" in text and "→" in text
    assert "recovery " in text and "steps)" in text
