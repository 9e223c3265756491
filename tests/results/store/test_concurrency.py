"""Two processes writing to one results database at once lose nothing."""

from __future__ import annotations

import multiprocessing

from explorer.results.store import ResultStore

ROWS = 300


def _writer(path: str, name: str, start, rows: int) -> None:
    start.wait()
    store = ResultStore(path)
    for i in range(rows):
        store.record(
            "prune",
            {"model": "m", "method": name, "i": i},
            {"accuracy": i / rows},
            sweep_id=name,
            cell_key=f"cell-{i}",
        )
    store.close()


def test_two_writer_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.db")
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, n, start, ROWS)) for n in ("a", "b")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    with ResultStore(path) as store:
        for name in ("a", "b"):
            rows = store.query("prune", method=name)
            assert sorted(r.config["i"] for r in rows) == list(range(ROWS))
            assert len(store.done_cells(name)) == ROWS
        assert len(store) == 2 * ROWS
