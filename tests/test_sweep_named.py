"""Named grids: the experiments' cells, their extra steps, and resuming them from a store."""

from __future__ import annotations

import pytest

from explorer.results.store import ResultStore
from explorer.sweeps import cells
from explorer.sweeps.named import model_grid, run_named


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_grid_order_variants_and_steps():
    grid = model_grid(
        "digits-mlp",
        ["magnitude", "wanda"],
        ["2:4", "unstructured:0.5"],
        ["", "permute+admm"],
        calibration_samples=32,
        finetune={"steps": 2, "lr": 1e-3},
    )
    shown = [
        (c.kind, c.config.get("pattern"), c.config.get("method"), c.config.get("update"))
        for c in grid
    ]
    assert shown == [
        ("dense", None, None, None),
        ("prune", "2:4", "magnitude", None),
        ("prune", "2:4", "magnitude", "admm"),
        ("prune", "2:4", "wanda", None),
        ("prune", "2:4", "wanda", "admm"),
        ("prune", "unstructured:0.5", "magnitude", None),
        ("prune", "unstructured:0.5", "wanda", None),
    ]
    assert all(c.config["finetune"] == {"steps": 2, "lr": 1e-3} for c in grid)
    assert "load" not in grid[0].config and "int8" not in grid[0].config  # unset steps stay out
    assert len({c.key for c in grid}) == len(grid)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"variants": ["prune"]}, "unknown variants"),
        ({"methods": ["nope"]}, "not a pruning method"),
        ({"patterns": ["checkerboard"]}, "checkerboard"),
    ],
)
def test_grid_refuses_bad_names(kwargs, match):
    args = {"methods": ["magnitude"], "patterns": ["2:4"], **kwargs}
    with pytest.raises(ValueError, match=match):
        model_grid("digits-mlp", **args)


def test_int8_cells_add_quantized_rows():
    grid = model_grid("digits-mlp", ["magnitude"], ["2:4"], int8=True)
    dense, pruned = (cells.run_cell(c.config) for c in grid)
    assert [r["config"].get("quant") for r in dense] == [None, "int8"]
    assert [r["config"].get("quant") for r in pruned] == [None, "int8"]
    plain, quantized = pruned
    assert quantized["metrics"]["layers"] == 2  # the classifier stays float (filter_fn)
    assert quantized["metrics"]["prune_seconds"] == plain["metrics"]["prune_seconds"]
    assert abs(quantized["metrics"]["accuracy"] - plain["metrics"]["accuracy"]) < 0.03


def test_admm_update_gets_calibration_and_is_timed():
    (cell,) = [
        c
        for c in model_grid("digits-mlp", ["magnitude"], ["2:4"], ["admm"], calibration_samples=32)
        if c.kind == "prune"
    ]
    (row,) = cells.run_cell(cell.config)
    assert row["status"] == "ok", row["error"]
    assert row["metrics"]["update_seconds"] > 0 and row["metrics"]["density"] == 0.5


def test_named_grid_resumes_from_its_store(tmp_path, monkeypatch):
    grid = model_grid("digits-mlp", ["magnitude", "random"], ["2:4"])
    seen = []
    with ResultStore(tmp_path / "r.db") as store:
        first = run_named("demo", grid, store, progress=False, on_rows=seen.append)
    assert len(seen) == 3 and [r.kind for r in first] == ["dense", "prune", "prune"]

    def refuse(config, cancel=None):
        raise AssertionError("a finished cell ran again")

    monkeypatch.setattr(cells, "run_cell", refuse)
    with ResultStore(tmp_path / "r.db") as store:
        again = run_named("demo", grid, store, progress=False)
    assert [(r.method, r.get("accuracy")) for r in again] == [
        (r.method, r.get("accuracy")) for r in first
    ]
