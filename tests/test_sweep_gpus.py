"""``sweep --gpus``: device parsing, the per-GPU cluster, resource routing and dead workers (CPU)."""

import os

import pytest

from explorer.cli import main
from explorer.sweeps import gpu_cluster
from explorer.sweeps.cells import run_cell
from explorer.sweeps.gpu_cluster import close_gpu_cluster, parse_gpus, start_gpu_cluster
from explorer.sweeps.grid import SweepConfig
from explorer.sweeps.routing import cell_resources, has_gpu_workers
from explorer.sweeps.runner import run_grid


@pytest.mark.parametrize(
    ("value", "count", "expected"),
    [
        ("all", 1, [0]),
        ("all", 4, [0, 1, 2, 3]),
        ("ALL ", 2, [0, 1]),
        ("3", 4, [0, 1, 2]),
        ("0,2,5", 8, [0, 2, 5]),
        ("5,0", 8, [5, 0]),
        ("3,", 4, [3]),
    ],
)
def test_parse_gpus(value, count, expected):
    assert parse_gpus(value, count) == expected


@pytest.mark.parametrize(
    ("value", "count", "message"),
    [
        ("all", 0, "no CUDA GPU.*leave --gpus out"),
        ("0,1", 0, "no CUDA GPU"),
        ("5", 4, "asks for 5 GPUs but this machine has 4 CUDA devices"),
        ("0,4", 4, "device 4 does not exist: this machine has 4 CUDA devices \\(0-3\\)"),
        ("0", 4, "'0'.*at least 1"),
        ("two", 4, "'two'.*expected 'all'"),
        ("1,x", 4, "'1,x'.*indices separated by commas"),
        ("1,1", 4, "named twice"),
    ],
)
def test_parse_gpus_refuses_with_the_value_and_the_fix(value, count, message):
    with pytest.raises(ValueError, match=message):
        parse_gpus(value, count)


def test_gpus_on_a_cpu_machine_is_one_clear_error_and_no_database(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpu_cluster, "cuda_device_count", lambda: 0)
    db = tmp_path / "r.db"
    assert main(["sweep", "--gpus", "all", "--db", str(db), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sparsity-explorer: error: --gpus all: this machine has no CUDA GPU")
    assert len(err.splitlines()) == 1 and not db.exists()
    monkeypatch.setattr(gpu_cluster, "cuda_device_count", lambda: 2)
    assert main(["sweep", "--gpus", "0,2", "--db", str(db), "--no-progress"]) == 2
    assert "device 2 does not exist: this machine has 2 CUDA devices" in capsys.readouterr().err
    assert not db.exists()


def test_gpus_excludes_workers_and_scheduler(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--gpus", "all", "--workers", "2"])
    assert "not allowed with" in capsys.readouterr().err


def test_cells_ask_for_a_gpu_only_to_time_or_run_on_it():
    cells = SweepConfig.make("digits-mlp", patterns="2:4,4:8").cells()
    needs = {
        (c.kind, c.config.get("of"), c.config.get("pattern")): cell_resources(c.config)
        for c in cells
    }
    assert needs == {
        ("dense", None, None): {},
        ("prune", None, "2:4"): {},
        ("prune", None, "4:8"): {},
        ("speed", None, "2:4"): {"GPU": 1},
        ("model-speed", "dense", None): {},  # nothing to time
        ("model-speed", "prune", "2:4"): {"GPU": 1},  # times the pruned model whole
        ("model-speed", "prune", "4:8"): {},  # no sparse kernel
    }


def _where(config):
    # The measured rows, each with the address of the worker that ran the cell.
    from distributed import get_worker

    rows = run_cell(config)
    for row in rows:
        row["metrics"]["worker"] = get_worker().address
    return rows


def test_gpu_cells_run_only_on_the_worker_with_a_gpu(tmp_path):
    distributed = pytest.importorskip("distributed")
    workers = {
        name: {
            "cls": distributed.Worker,
            "options": {"nthreads": 1, "local_directory": str(tmp_path), **extra},
        }
        for name, extra in (("gpu", {"resources": {"GPU": 1}}), ("cpu", {}))
    }
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": None}}
    config = SweepConfig.make("digits-mlp", patterns="2:4", tokens="64,128,256")
    with (
        distributed.SpecCluster(
            workers=workers, scheduler=scheduler, asynchronous=False
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.wait_for_workers(2)
        gpu_address = cluster.workers["gpu"].address
        assert has_gpu_workers(client)
        result = run_grid(
            "routed", config.cells(), {}, tmp_path / "r.db", False, executor=client, measure=_where
        )
    rows = result.rows()
    speed = rows.where(kind="layer-speed")
    assert result.ran == result.total == 7 and len(speed) == 3
    assert {r.metrics["worker"] for r in speed} == {gpu_address}
    timed = [r for r in rows.where(kind="model-speed") if r.config["of"] == "prune"]
    assert len(timed) == 3  # one row per token count
    assert all(r.metrics["worker"] == gpu_address and "no CUDA GPU" in r.error for r in timed)
    assert all(r.status == "skipped" and "no CUDA GPU" in r.error for r in speed)


def _dies_on_dense(folder, others):
    # The dense cell kills its worker process once all ``others`` cells are done (it leaves
    # the worker's thread meanwhile, so a cell queued behind it on that worker runs): only the
    # dense cell is running on the worker that dies, and the test does not depend on timing.
    # Waiting for fewer than all of them let a cell still running on that worker die with it.
    def measure(config):
        import time
        import uuid
        from pathlib import Path

        from distributed import secede

        if config["cell"] != "dense":
            rows = run_cell(config)
            (Path(folder) / f"{uuid.uuid4().hex}.done").touch()  # one file per cell
            return rows
        secede()
        deadline = time.monotonic() + 60
        while len(list(Path(folder).glob("*.done"))) < others and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(1)  # the worker process dies mid-cell

    return measure


def test_one_pinned_worker_per_gpu_and_a_dead_worker_leaves_a_failed_row(tmp_path):
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        client = start_gpu_cluster([0, 1], local_directory=tmp_path)
    try:
        info = client.scheduler_info()["workers"].values()
        assert sorted(w["resources"]["GPU"] for w in info) == [1, 1]
        assert all(w["nthreads"] == 1 for w in info)
        seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        assert sorted(seen.values()) == ["0", "1"]
        cells = SweepConfig.make("digits-mlp", patterns="2:4").cells()
        result = run_grid(
            "dies",
            cells,
            {},
            tmp_path / "r.db",
            False,
            executor=client,
            measure=_dies_on_dense(str(tmp_path), others=len(cells) - 1),
        )
    finally:
        close_gpu_cluster(client)
    assert result.ran == result.total == 5 and result.failed == 1
    rows = result.rows()
    (dense,) = rows.where(kind="dense")
    assert dense.status == "failed" and "the Dask worker running this cell died" in dense.error
    assert rows.where(kind="prune")[0].status == "ok"
    assert all(r.status != "failed" for r in rows if r.kind != "dense")
