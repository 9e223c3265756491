"""Resumable sweeps: deterministic cells, failures recorded, resume after SIGKILL, executors."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import pytest
import torch

from explorer.results.store import ResultStore
from explorer.sweeps import SweepConfig, cells, speed, sweep
from explorer.sweeps.grid import Cell

GRID = {"methods": "magnitude,random,wanda", "patterns": "2:4,4:8", "dtypes": "float16,bfloat16"}


def fake_cell(config, cancel=None):
    """A fast stand-in for a cell: the prune cell of the random method at 4:8 fails, every
    other cell writes one ok row."""
    if config["cell"] == "prune" and config["method"] == "random" and config["pattern"] == "4:8":
        return [
            {
                "kind": "prune",
                "config": config,
                "status": "failed",
                "error": "RuntimeError: out of memory",
                "metrics": {},
            }
        ]
    kind = {"speed": "layer-speed"}.get(config["cell"], config["cell"])
    rows = [{"kind": kind, "config": config, "metrics": {"accuracy": 0.5}}]
    if config["cell"] == "speed":
        rows.append({"kind": kind, "config": {**config, "shape": [8, 8]}, "metrics": {"x": 1}})
    return rows


def test_grid_is_the_product_of_its_axes_with_stable_keys():
    cfg = SweepConfig.make("digits-mlp", tokens="128,1024", layer_sets=["all", "0|2"], **GRID)
    kinds = Counter(c.kind for c in cfg.cells())
    assert kinds == {
        "dense": 2,
        "prune": 3 * 2 * 2 * 2,
        "speed": 1 * 2 * 2 * 2,
        "model-speed": 2 + 3 * 2 * 2 * 2,  # one for each dense and prune cell
    }
    keys = [c.key for c in cfg.cells()]
    assert len(set(keys)) == len(keys)
    again = SweepConfig.make("digits-mlp", tokens=[128, 1024], layer_sets=("all", "0|2"), **GRID)
    assert [c.key for c in again.cells()] == keys and again.sweep_id == cfg.sweep_id
    assert (
        Cell({"cell": "dense", "model": "m", "dtype": "float16"}).key
        == Cell({"dtype": "float16", "model": "m", "cell": "dense"}).key
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtypes": "float13"}, "dtype 'float13'"),
        ({"patterns": "2:x"}, "2:x"),
        ({"tokens": "many"}, "tokens='many'"),
        ({"tokens": [0]}, "positive"),
        ({"methods": ""}, "methods=''"),
    ],
)
def test_bad_grid_names_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SweepConfig.make("digits-mlp", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"methods": "sparsegpt", "quantize": "int3"}, "quantize='int3' unknown"),
        ({"methods": "magnitude,wanda", "quantize": "int4"}, "hold no sparsegpt"),
        ({"methods": "sparsegpt", "quantize": "int4", "group_size": 30}, "multiple of 4"),
        ({"update": "lbfgs"}, "update='lbfgs' unknown"),
    ],
)
def test_bad_quantize_or_update_names_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SweepConfig.make("digits-mlp", **kwargs)


def test_quantize_adds_a_cell_per_format_to_each_sparsegpt_cell_and_keeps_old_ids():
    plain = SweepConfig.make("digits-mlp", methods="magnitude,sparsegpt")
    cfg = SweepConfig.make(
        "digits-mlp", methods="magnitude,sparsegpt", quantize="int4,int8", group_size=64,
        update="admm",
    )  # fmt: skip
    prune = [c.config for c in cfg.cells() if c.kind == "prune"]
    assert [(c["method"], c.get("quant"), c.get("group_size")) for c in prune] == [
        ("magnitude", None, None),
        ("sparsegpt", None, None),
        ("sparsegpt", "int4", 64),
        ("sparsegpt", "int8-weights", 64),
    ]
    assert all(c["update"] == "admm" for c in prune)
    dense = [c.config for c in cfg.cells() if c.kind == "dense"]
    assert [(c.get("quant"), c.get("group_size")) for c in dense] == [
        (None, None),
        ("int4", 64),
        ("int8-weights", 64),
    ]
    assert not [c for c in plain.cells() if c.kind == "dense" and c.config.get("quant")]
    assert SweepConfig.from_json(cfg.to_json()) == cfg and cfg.sweep_id != plain.sweep_id
    # a grid without them hashes as before they existed
    assert SweepConfig.make("digits-mlp").sweep_id == "digits-mlp-03687dc45c"


def test_quantized_sweep_cells_become_quantized_points(tmp_path):
    from explorer.results.quantized_points import quantized_points

    result = sweep("digits-mlp", methods="sparsegpt", quantize="int4", group_size=64,
                   update="admm", db=tmp_path / "q.db", progress=False)  # fmt: skip
    assert result.failed == 0
    rows = result.rows()
    pruned = {r.config.get("quant"): r for r in rows.where(kind="prune")}
    assert set(pruned) == {None, "int4"} and pruned["int4"].config["group_size"] == 64
    assert 0.9 < pruned["int4"].metrics["accuracy"] <= 1.0
    # beside the dense baseline, int4 dense: the same loop with nothing pruned (GPTQ)
    (gptq,) = rows.where(kind="dense", quant="int4")
    assert gptq.metrics["density"] == 1.0 and 0.9 < gptq.metrics["accuracy"] <= 1.0
    assert gptq.config["group_size"] == 64 and "update" not in gptq.config
    points = quantized_points(rows)
    assert [p.label for p in points] == ["int4 dense GPTQ", "int4 2:4 sparsegpt admm joint"]
    assert "nothing pruned (GPTQ), group size 64" in points[0].details["accuracy"]
    # its model is timed at int4 on a GPU (tests/gpu); here the rows say why it is not
    timed = [r for r in rows.where(kind="model-speed") if r.config.get("quant") == "int4"]
    joint = [r for r in timed if r.config["of"] == "prune"]
    if not torch.cuda.is_available():
        assert joint and all(r.status == "skipped" and "no CUDA GPU" in r.error for r in joint)
    # int4 dense is timed beside the 2:4 cell (its dense rows), never alone
    assert all("timed beside the sweep's 2:4 cells" in r.error for r in timed if r not in joint)
    assert len(timed) > len(joint)


def test_failed_cell_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(cells, "run_cell", fake_cell)
    db = tmp_path / "r.db"
    first = sweep("digits-mlp", db=db, progress=False, **GRID)
    assert first.total == 2 + 12 + 2 + 14 and first.ran == first.total and first.failed == 2
    with ResultStore(db) as store:
        failed = store.query(status="failed")
        assert len(failed) == 2 and {r.error for r in failed} == {"RuntimeError: out of memory"}
        assert len(store.query("layer-speed")) == 4  # two rows for each of the two speed cells
    again = sweep("digits-mlp", db=db, progress=False, **GRID)
    assert again.ran == 0 and again.already_done == first.total
    retry = sweep("digits-mlp", db=db, progress=False, retry_failed=True, **GRID)
    assert retry.ran == 2
    with ResultStore(db) as store:
        assert len(store.query(sweep_id=first.sweep_id)) == first.total + 2
    assert "2 failed" in repr(first) and "<table" in first._repr_html_()


def test_exceptions_inside_a_real_cell_become_failed_rows():
    rows = cells.run_cell({"cell": "prune", "model": "no-such-model", "method": "magnitude"})
    assert rows[0]["status"] == "failed" and "no-such-model" in rows[0]["error"]
    assert "torch" in rows[0]["provenance"]


def test_cancel_stops_and_keeps_finished_cells(tmp_path, monkeypatch):
    stop = threading.Event()
    seen = []

    def cancelling(config, cancel=None):
        seen.append(config)
        if len(seen) == 3:
            stop.set()
        return fake_cell(config)

    monkeypatch.setattr(cells, "run_cell", cancelling)
    result = sweep("digits-mlp", db=tmp_path / "r.db", progress=False, cancel=stop, **GRID)
    assert result.cancelled and result.ran == 3
    monkeypatch.setattr(cells, "run_cell", fake_cell)
    rest = sweep("digits-mlp", db=tmp_path / "r.db", progress=False, **GRID)
    assert rest.already_done == 3 and rest.ran == rest.total - 3


def test_thread_pool_executor(tmp_path, monkeypatch):
    monkeypatch.setattr(cells, "run_cell", fake_cell)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        result = sweep("digits-mlp", db=tmp_path / "r.db", progress=False, executor=pool, **GRID)
    assert result.ran == result.total
    with ResultStore(tmp_path / "r.db") as store:
        keys = [r.cell_key for r in store.query(sweep_id=result.sweep_id)]
    assert len(keys) == len(set(keys)) == result.total + 2


def test_executor_that_raises_records_the_failure(tmp_path, monkeypatch):
    def broken(config, cancel=None):
        raise MemoryError("worker died")

    monkeypatch.setattr(cells, "run_cell", broken)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = sweep("digits-mlp", db=tmp_path / "r.db", progress=False, executor=pool)
    assert result.failed == result.total
    with ResultStore(tmp_path / "r.db") as store:
        assert all("MemoryError: worker died" == r.error for r in store.query())


def test_bad_executor_and_cancel_are_refused(tmp_path):
    with pytest.raises(TypeError, match="executor="):
        sweep(db=tmp_path / "r.db", executor=object())
    with pytest.raises(TypeError, match="cancel="):
        sweep(db=tmp_path / "r.db", cancel=True)


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_sweep import fake_cell, GRID
    from explorer.sweeps import cells, sweep

    def slow(config, cancel=None):
        time.sleep(0.25)
        return fake_cell(config)

    cells.run_cell = slow
    sweep("digits-mlp", db={db!r}, progress=False, **GRID)
    """
)


def test_sigkill_then_rerun_counts_every_cell_exactly_once(tmp_path, monkeypatch):
    db = str(tmp_path / "r.db")
    script = _KILL_SCRIPT.format(tests=os.path.dirname(__file__), db=db)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 120
    rows = 0
    while rows < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
        if os.path.exists(db):
            try:
                with ResultStore(db) as store:
                    rows = len(store)
            except Exception:
                rows = 0
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep finished before it could be killed"
    with ResultStore(db) as store:
        before = len(store.done_cells(SweepConfig.make("digits-mlp", **GRID).sweep_id))
    assert 0 < before < 30
    monkeypatch.setattr(cells, "run_cell", fake_cell)
    result = sweep("digits-mlp", db=db, progress=False, **GRID)
    assert result.already_done == before and result.ran == result.total - before
    with ResultStore(db) as store:
        keys = Counter(r.cell_key.split("#")[0] for r in store.query(sweep_id=result.sweep_id))
    expected = {
        c.key: 2 if c.kind == "speed" else 1 for c in SweepConfig.make("digits-mlp", **GRID).cells()
    }
    assert dict(keys) == expected  # every cell once (speed cells write two rows each)


def test_real_digits_sweep_on_cpu(tmp_path):
    result = sweep(
        "digits-mlp",
        methods="magnitude,random",
        patterns="2:4,4:8",
        db=tmp_path / "r.db",
        progress=False,
    )
    assert result.failed == 0 and result.ran == result.total == 1 + 4 + 1 + 5
    rows = result.rows()
    dense = rows.where(kind="dense")[0]
    assert 0.9 < dense.metrics["accuracy"] <= 1.0
    for row in rows.where(kind="prune"):
        assert row.metrics["density"] == pytest.approx(0.5)
        assert row.metrics["prune_seconds"] >= 0 and row.metrics["metric"] == "accuracy"
    speed = rows.where(kind="layer-speed")
    assert len(speed) >= 1
    if speed[0].status == "skipped":
        assert "GPU" in speed[0].error or "benchmark" in speed[0].error


def test_dask_local_client(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None
    ) as client:
        result = sweep(
            "digits-mlp",
            methods="magnitude",
            patterns="2:4,4:8",
            db=tmp_path / "r.db",
            progress=False,
            executor=client,
        )
    assert result.ran == result.total == 1 + 2 + 1 + 3 and result.failed == 0


def test_unknown_model_or_method_is_refused_before_running(tmp_path):
    with pytest.raises(ValueError, match=r"model='resnet'.*digits-mlp"):
        sweep("resnet", db=tmp_path / "r.db")
    with pytest.raises(ValueError, match=r"method 'prunex'.*magnitude"):
        sweep("digits-mlp", methods="magnitude,prunex", db=tmp_path / "r.db")
    assert not (tmp_path / "r.db").exists()


def _fake_bench(shapes, dtypes, suites, progress):
    rows = []
    for m, n, k in shapes:
        for impl, ms in (("dense", 1.0), ("torch", 2.0), ("explorer", 0.8)):
            for mode, scale in (("eager", 1.0), ("graph", 0.5)):
                row = {
                    "suite": "matmul",
                    "m": m,
                    "n": n,
                    "k": k,
                    "dtype": dtypes[0],
                    "impl": impl,
                    "mode": mode,
                    "ms": ms * scale,
                    "status": "ok",
                }
                if (m, k) == (256, 64) and impl == "torch":
                    row = {**row, "status": "failed", "error": "RuntimeError: unsupported"}
                    del row["ms"]
                rows.append(row)
    return rows


def test_speed_cell_pivots_benchmark_rows(monkeypatch):
    import torch

    import explorer.bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(explorer.bench, "run_bench", _fake_bench)
    monkeypatch.setattr(cells, "provenance", lambda: {"gpu": "fake"})
    searched = []
    monkeypatch.setattr(
        speed, "_search_together", lambda problems, dtype: searched.append(problems)
    )
    real_find_spec = speed.importlib.util.find_spec
    monkeypatch.setattr(speed.importlib.util, "find_spec", lambda name: None)
    config = {
        "cell": "speed",
        "model": "digits-mlp",
        "pattern": "2:4",
        "layers": "all",
        "dtype": "float16",
        "tokens": 512,
        "version": 1,
    }
    (missing,) = cells.run_cell(config)
    assert missing["status"] == "skipped" and "sparsity-explorer[gpu]" in missing["error"]
    monkeypatch.setattr(
        speed.importlib.util, "find_spec", lambda name: name == "nvmath" or real_find_spec(name)
    )
    rows = cells.run_cell(config)
    by_shape = {tuple(r["config"]["shape"]): r for r in rows}
    assert set(by_shape) == {(256, 64), (256, 256)}  # the classifier 10x256 is left out
    assert [sorted(p) for p in searched] == [[(256, 512, 64), (256, 512, 256)]]  # one search
    big = by_shape[256, 256]
    assert big["status"] == "ok" and big["config"]["layer_names"] == ["2"]
    assert big["metrics"]["speedup"] == pytest.approx(1.25)
    assert big["metrics"]["speedup_graph"] == pytest.approx(1.25)
    assert big["metrics"]["speedup_torch"] == pytest.approx(0.5)
    small = by_shape[256, 64]
    assert small["status"] == "ok" and "unsupported" in small["error"]
    assert "speedup_torch" not in small["metrics"]
    float32 = cells.run_cell({**config, "dtype": "float32"})
    assert float32[0]["status"] == "failed" and "float32" in float32[0]["error"]


def test_cancel_with_an_executor_keeps_what_finished(tmp_path, monkeypatch):
    stop = threading.Event()

    def cancelling(config, cancel=None):
        stop.set()
        return fake_cell(config)

    monkeypatch.setattr(cells, "run_cell", cancelling)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = sweep(
            "digits-mlp", db=tmp_path / "r.db", progress=False, cancel=stop, executor=pool, **GRID
        )
    assert result.cancelled and 1 <= result.ran < result.total
    with ResultStore(tmp_path / "r.db") as store:
        assert len(store.done_cells(result.sweep_id)) == result.ran
