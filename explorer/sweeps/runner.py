"""``sweep``: run a grid of cells, commit each as it finishes, and resume where a run stopped.

Each cell is claimed in the store before it is computed (:mod:`explorer.results.store.leases`), so
several sweeps of one grid on one store split the cells between them instead of computing each
twice; a sweep that finishes first waits for the cells others still hold, and takes over those
whose writer died.
"""

from __future__ import annotations

import concurrent.futures
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from explorer import _html
from explorer.errors import PruningCancelled, validate_cancel
from explorer.results.model_speed import DEFAULT_SPEED_MODE
from explorer.results.store import ResultStore, StoreError
from explorer.results.store import leases as _leases
from explorer.sweeps import cells as _cells
from explorer.sweeps import routing as _routing
from explorer.sweeps.grid import Cell, SweepConfig
from explorer.sweeps.loading import quiet_progress

__all__ = ["SweepResult", "run_grid", "sweep"]


@dataclass(frozen=True)
class SweepResult:
    """What a sweep run did.

    Attributes
    ----------
    sweep_id : str
        The sweep's id in the store (rerun with the same grid to resume it).
    db : Path or str
        The results database.
    total : int
        Cells in the grid.
    already_done : int
        Cells found finished (ok or failed) in the store when the run started, not run again.
    ran, failed, skipped : int
        Cells run now by this sweep; of these, how many failed and how many were skipped
        (speed without a GPU).
    cancelled : bool
        Whether the run stopped early (``cancel`` set); the finished cells are kept.
    seconds : float
        Wall time of this run.
    by_other_writer : int
        Cells another sweep on the same store computed while this one ran.
    """

    sweep_id: str
    db: Path | str
    total: int
    already_done: int
    ran: int
    failed: int
    skipped: int
    cancelled: bool
    seconds: float
    by_other_writer: int = 0

    def rows(self, store: ResultStore | None = None):
        """The sweep's rows, as a :class:`~explorer.results.store.ResultTable`.

        Reads ``store`` if given (needed for an in-memory store), else reopens :attr:`db`.

        Parameters
        ----------
        store : ResultStore or None, optional
            The store the sweep wrote to.

        Returns
        -------
        ResultTable
        """
        if store is not None:
            return store.query(sweep_id=self.sweep_id, include_reference=False)
        with ResultStore(self.db) as own:
            return own.query(sweep_id=self.sweep_id, include_reference=False)

    def __repr__(self) -> str:
        state = " cancelled" if self.cancelled else ""
        return (
            f"SweepResult({self.sweep_id!r}, {self.total} cells: {self.already_done} already done, "
            f"{self.ran} ran, {self.by_other_writer} done by another writer, "
            f"{self.failed} failed, {self.skipped} skipped, "
            f"{self.seconds:.1f} s{state})"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("sweep", self.sweep_id),
            ("database", self.db),
            ("cells", self.total),
            ("already done", self.already_done),
            ("ran now", self.ran),
            ("done by another writer", self.by_other_writer),
            ("failed", _html.badge(str(self.failed), "error" if self.failed else "ok")),
            ("skipped", self.skipped),
            ("cancelled", "yes" if self.cancelled else "no"),
            ("seconds", f"{self.seconds:.1f}"),
        ]
        rows = [(k, v if k == "failed" else _html.escape(v)) for k, v in rows]
        return _html.table(["", ""], rows, caption="Sweep", raw_columns=[1])


_POLL_SECONDS = 0.5


def _entries(cell: Cell, rows: list[dict]) -> list[dict]:
    # The cell's first row carries its key; further rows (one per layer shape) get key#1, ...
    return [
        {**row, "cell_key": cell.key if i == 0 else f"{cell.key}#{i}"} for i, row in enumerate(rows)
    ]


def _as_completed(futures: Iterable) -> Iterable:
    futures = list(futures)
    if futures and type(futures[0]).__module__.startswith("distributed"):
        from distributed import as_completed

        # The futures' own client's loop: it need not be the default client.
        return as_completed(futures, loop=futures[0].client.loop)
    return concurrent.futures.as_completed(futures)


def sweep(
    model: str = "digits-mlp",
    methods: Iterable[str] | str = ("magnitude",),
    patterns: Iterable[str] | str = ("2:4",),
    layer_sets: Iterable[str] | str = ("all",),
    dtypes: Iterable[str] | str = ("float16",),
    tokens: Iterable[int] | str = (1024,),
    db: str | Path | ResultStore | None = None,
    progress: bool = True,
    cancel: threading.Event | None = None,
    executor: Any = None,
    *,
    name: str | None = None,
    calibration_samples: int = 128,
    seed: int = 0,
    retry_failed: bool = False,
    lease_timeout: float = 120.0,
    text: str | Path | None = None,
    speed_mode: str = DEFAULT_SPEED_MODE,
    quantize: Iterable[str] | str = (),
    group_size: int = 128,
    update: str | None = None,
) -> SweepResult:
    """Run a resumable grid of pruning and speed measurements, committing each cell at once.

    The grid is methods x patterns x layer sets x dtypes (accuracy or fidelity, pruning time),
    a dense baseline per dtype, and N:M patterns x layer sets x dtypes x token counts (layer
    speed rows from :mod:`explorer.bench`, on a CUDA GPU; elsewhere they are recorded as
    skipped with the reason). Each dense and prune cell has a model-speed cell beside it: a
    2:4 one times the pruned model whole, dense against sparse, at the token counts in
    ``speed_mode`` (``model-speed`` rows naming the cell, ``of_cell``); without a GPU, for other
    patterns and for the dense baseline, rows that say why there is none. Cells already
    finished in ``db`` (ok or failed) are not run again, so an interrupted sweep resumes where
    it stopped; a failing cell is recorded with its reason and the sweep goes on.

    Parameters
    ----------
    model : str
        A bundled model name (``"digits-mlp"``, ``"fashion-mlp"``, ``"minilm"``, ``"smollm2"``),
        or the path of a ``save_pretrained`` folder (see
        :func:`explorer.models.from_pretrained`; its rows record the folder's absolute path).
    methods, patterns, layer_sets, dtypes, tokens : list or comma-separated str
        The grid's axes; see :class:`~explorer.sweeps.SweepConfig`.
    db : path or ResultStore, optional
        Where results go; defaults to the per-user results database.
    progress : bool
        Show a tqdm progress bar.
    cancel : threading.Event, optional
        Set it to stop after the running cell; finished cells are kept.
    executor : concurrent.futures.Executor or dask.distributed.Client, optional
        Runs cells elsewhere (``executor.submit(fn, config)``); this process alone writes. On a
        Dask cluster with ``GPU`` workers (``sweep --gpus``), GPU cells run only there, one at
        a time per GPU (:mod:`explorer.sweeps.routing`).
    name : str, optional
        The sweep's id; by default ``"<model>-<hash of the grid>"``, so the same grid resumes.
        Give a name to grow one sweep with more cells over several runs.
    calibration_samples : int
        Calibration samples for Wanda and SparseGPT.
    seed : int
        Seed of calibration draws and of the random method.
    retry_failed : bool
        Run cells that failed before again (their old rows are replaced).
    lease_timeout : float
        Seconds after which a cell claimed by another sweep that stopped refreshing its claim
        (a crashed machine) is taken over. A claim of a dead process on this host is taken
        over at once.
    text : path, optional
        The text file a checkpoint folder is evaluated and calibrated on; required for one,
        refused for a bundled model.
    speed_mode : {"graphs", "eager", "compile"}
        How each pruned 2:4 model is timed whole: CUDA graphs (the default, the GPU's time
        alone), eager calls, or ``torch.compile``'s default mode.
    quantize : str or iterable of str, optional
        ``"int4"``, ``"int8"``: each SparseGPT cell is also pruned with its kept weights
        quantized jointly in that format (weight-only, group-wise), one more cell per format,
        and the dense model is quantized by the same loop with nothing pruned (GPTQ), whose rows
        the trade-off plot draws as quantized points; on a GPU the joint cells' models are timed
        at that precision (bf16 dense, dense at it, 2:4 at it).
    group_size : int, default 128
        Input columns per scale of the quantized cells.
    update : {None, "admm"}
        The weight update every prune cell runs after its mask (on the grid when quantized).

    Returns
    -------
    SweepResult

    Examples
    --------
    A dense cell, a pruned one, a layer-speed cell and a model-speed cell for each of the
    first two; without a GPU the speed rows say why they hold no speed:

    >>> result = sweep("digits-mlp", methods="magnitude", patterns="2:4", db=":memory:",
    ...                progress=False)
    >>> result.total, result.ran, result.failed
    (5, 5, 0)
    """
    config = SweepConfig.make(
        model,
        methods,
        patterns,
        layer_sets,
        dtypes,
        tokens,
        calibration_samples,
        seed,
        text,
        speed_mode,
        quantize,
        group_size,
        update,
    )
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"name={name!r}: expected a non-empty string or None")
    validate_cancel(cancel)
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError(
            f"executor={executor!r}: expected a concurrent.futures.Executor or a "
            "dask.distributed.Client (anything with submit(fn, arg) returning a future)"
        )
    if (
        isinstance(lease_timeout, bool)
        or not isinstance(lease_timeout, (int, float))
        or not (0 < lease_timeout < float("inf"))
    ):
        raise ValueError(f"lease_timeout={lease_timeout!r}: expected a positive number of seconds")
    return run_grid(
        name or config.sweep_id,
        config.cells(),
        asdict(config),
        db,
        progress,
        cancel,
        executor,
        retry_failed=retry_failed,
        lease_timeout=lease_timeout,
        desc=f"sweep {config.model}",
    )


def run_grid(
    sweep_id: str,
    grid: list[Cell],
    spec: dict,
    db: str | Path | ResultStore | None = None,
    progress: bool = True,
    cancel: threading.Event | None = None,
    executor: Any = None,
    *,
    retry_failed: bool = False,
    lease_timeout: float = 120.0,
    desc: str = "sweep",
    on_rows: Callable[[list[dict]], None] | None = None,
    measure: Callable[[dict], list[dict]] | None = None,
) -> SweepResult:
    """Run the cells of a grid into the store: the loop behind :func:`sweep` and the named grids.

    Parameters
    ----------
    sweep_id : str
        The sweep's id in the store; the same id and cells resume a stopped run.
    grid : list of Cell
        The cells, in the order they are run.
    spec : dict
        The grid's description, kept with the sweep in the store.
    db, progress, cancel, executor, retry_failed, lease_timeout
        As for :func:`sweep` (arguments are not checked again here).
    desc : str
        The progress bar's label.
    on_rows : callable, optional
        Called with each cell's rows once they are committed.
    measure : callable, optional
        What turns a cell's configuration into its rows (default
        :func:`explorer.sweeps.cells.run_cell`); it must be picklable to go to an executor.

    Notes
    -----
    On a ``dask.distributed.Client`` whose cluster has workers with the resource ``GPU``, each
    cell asks for what it needs (:func:`explorer.sweeps.routing.cell_resources`): GPU cells run
    only there, one at a time per GPU. A cell whose worker died is recorded as failed with the
    reason, and the sweep goes on.

    Returns
    -------
    SweepResult

    Examples
    --------
    >>> from explorer.sweeps.grid import SweepConfig
    >>> cfg = SweepConfig.make("digits-mlp", patterns="4:8")
    >>> run_grid("mine", cfg.cells(), {}, db=":memory:", progress=False).ran
    4
    """
    from tqdm.auto import tqdm

    run_cell = measure if measure is not None else _cells.run_cell
    own = not isinstance(db, ResultStore)
    store = ResultStore(db) if own else db
    writer = _leases.new_writer_id()
    start = time.perf_counter()
    counts = {"ran": 0, "failed": 0, "skipped": 0, "by_other_writer": 0}
    cancelled = False
    try:
        store.add_sweep(sweep_id, spec)
        done = store.done_cells(sweep_id)
        finished = ("ok", "failed") if not retry_failed else ("ok",)
        pending = [c for c in grid if done.get(c.key) not in finished]
        bar = tqdm(
            total=len(grid),
            initial=len(grid) - len(pending),
            desc=desc,
            unit="cell",
            disable=not progress,
        )

        def claim(cell: Cell) -> str:
            state = _leases.claim_cell(
                store, sweep_id, cell.key, writer, finished=finished, stale_after=lease_timeout
            )
            if state == _leases.DONE:
                other()
            return state

        def other() -> None:
            counts["by_other_writer"] += 1
            bar.update(1)

        def commit(cell: Cell, rows: list[dict]) -> None:
            entries = _entries(cell, rows)
            try:
                store.record_many(
                    entries, sweep_id=sweep_id, replace=cell.key in done, writer=writer
                )
            except sqlite3.IntegrityError as exc:
                # Only UNIQUE(sweep_id, cell_key) is expected: another writer took this cell
                # over (our claim had gone stale) and committed it first; it counts there.
                if "UNIQUE" not in str(exc) or "cell_key" not in str(exc):
                    raise
                other()
                return
            if on_rows is not None:
                on_rows(entries)
            counts["ran"] += 1
            counts["failed"] += any(r.get("status") == "failed" for r in rows)
            counts["skipped"] += all(r.get("status") == "skipped" for r in rows)
            bar.set_postfix(failed=counts["failed"], refresh=False)
            bar.update(1)

        def stopping() -> bool:
            return cancel is not None and cancel.is_set()

        def run_here(cell: Cell) -> list[dict] | None:
            # None when the pruning step was cancelled.
            try:
                with quiet_progress(not progress):
                    if executor is not None:
                        return _routing.submit(
                            executor, run_cell, cell.config, use_resources
                        ).result()
                    if measure is not None:
                        return measure(cell.config)
                    return _cells.run_cell(cell.config, cancel=cancel)
            except PruningCancelled:
                return None
            except Exception as exc:
                if executor is None:
                    raise
                # the worker died or could not run the cell
                return _cells.failed_rows(cell.config, _routing.dead_worker_error(exc))

        def serve(cells: list[Cell]) -> tuple[list[Cell], bool]:
            """Claim and run each cell here.

            Return the cells other writers hold, and whether the sweep was cancelled on the way.
            """
            waiting: list[Cell] = []
            for cell in cells:
                if stopping():
                    return waiting, True
                state = claim(cell)
                if state == _leases.HELD:
                    waiting.append(cell)
                elif state == _leases.CLAIMED:
                    rows = run_here(cell)
                    if rows is None:
                        return waiting, True
                    commit(cell, rows)
            return waiting, False

        # GPU cells ask a Dask cluster for a GPU only where some worker has one (else they would
        # wait forever); elsewhere they run as before and record why they were skipped.
        use_resources = _routing.is_dask_client(executor) and _routing.has_gpu_workers(executor)
        held: list[Cell] = []
        with _leases.LeaseKeeper(store, writer, every=lease_timeout / 4):
            try:
                if executor is None:
                    held, cancelled = serve(pending)
                else:
                    mine = []
                    for cell in pending:
                        state = claim(cell)
                        if state == _leases.HELD:
                            held.append(cell)
                        elif state == _leases.CLAIMED:
                            mine.append(cell)
                    futures = {
                        _routing.submit(executor, run_cell, c.config, use_resources): c
                        for c in mine
                    }
                    for future in _as_completed(futures):
                        cell = futures[future]
                        try:
                            rows = future.result()
                        except Exception as exc:  # the worker died or could not run the cell
                            rows = _cells.failed_rows(cell.config, _routing.dead_worker_error(exc))
                        commit(cell, rows)  # a finished cell is kept, even when cancelling
                        if stopping():
                            cancelled = True
                            for other_future in futures:
                                other_future.cancel()
                            break
                # Cells other writers hold: wait for their rows, or take over a dead claim.
                while held and not cancelled:
                    held, cancelled = serve(held)
                    if held and not cancelled:
                        (cancel.wait if cancel is not None else time.sleep)(_POLL_SECONDS)
            finally:
                bar.close()
                try:
                    _leases.release(store, writer, sweep_id)
                except StoreError:
                    pass  # a busy or damaged store: our claims go stale and are taken over
        return SweepResult(
            sweep_id=sweep_id,
            db=store.path,
            total=len(grid),
            already_done=len(grid) - len(pending),
            cancelled=cancelled,
            seconds=time.perf_counter() - start,
            **counts,
        )
    finally:
        if own:
            store.close()
