"""Where a cell may run: the Dask worker resources it asks for, and how it is submitted.

A cell that times layers (``"speed"``), runs a model on the GPU (``config["gpu"]``) or times a
pruned 2:4 model whole (``"model-speed"``) asks for ``GPU=1``; evaluation on the CPU, and a
model-speed cell with nothing to time, ask for nothing. A worker of ``sweep --gpus`` (or one started
with ``dask worker --resources GPU=1 --nthreads 1``) has exactly one ``GPU``, so two GPU cells
never overlap on it: a timing cell holds its GPU alone while it measures.

A ``concurrent.futures`` executor knows no resources: cells go to it as before. A Dask cluster
where no worker advertises ``GPU`` gets no resources either (a GPU cell would otherwise wait
forever; on a CPU worker it is recorded as skipped with the reason).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["cell_resources", "dead_worker_error", "has_gpu_workers", "is_dask_client", "submit"]


def cell_resources(config: dict) -> dict[str, int]:
    """The Dask worker resources a cell's configuration needs.

    Parameters
    ----------
    config : dict
        The cell's configuration.

    Returns
    -------
    dict[str, int]
        ``{"GPU": 1}`` for a cell that runs on a GPU, else empty.

    Examples
    --------
    >>> cell_resources({"cell": "speed"}), cell_resources({"cell": "prune", "gpu": True})
    ({'GPU': 1}, {'GPU': 1})
    >>> cell_resources({"cell": "prune"}), cell_resources({"cell": "dense"})
    ({}, {})
    >>> timed = {"cell": "model-speed", "of": "prune", "dtype": "float16"}
    >>> cell_resources({**timed, "pattern": "2:4"}), cell_resources({**timed, "pattern": "4:8"})
    ({'GPU': 1}, {})
    """
    from explorer.sweeps.model_speed import needs_gpu

    if config.get("cell") == "speed" or config.get("gpu"):
        return {"GPU": 1}
    if config.get("cell") == "model-speed" and needs_gpu(config):
        return {"GPU": 1}
    return {}


def is_dask_client(executor: Any) -> bool:
    """Whether ``executor`` is a ``distributed.Client`` (it has ``scheduler_info``).

    Parameters
    ----------
    executor : Any
        The executor given to the sweep, or None.

    Returns
    -------
    bool

    Examples
    --------
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> is_dask_client(ThreadPoolExecutor(1)), is_dask_client(None)
    (False, False)
    """
    return executor is not None and callable(getattr(executor, "scheduler_info", None))


def has_gpu_workers(client: Any) -> bool:
    """Whether any worker of a Dask client's cluster advertises the resource ``GPU``.

    Parameters
    ----------
    client : Any
        A ``distributed.Client``.

    Returns
    -------
    bool

    Examples
    --------
    >>> class Fake:
    ...     def scheduler_info(self, **kw):
    ...         return {"workers": {"tcp://a": {"resources": {"GPU": 1}}}}
    >>> has_gpu_workers(Fake())
    True
    """
    try:
        workers = client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:  # older distributed: no n_workers argument
        workers = client.scheduler_info()["workers"]
    return any((w.get("resources") or {}).get("GPU", 0) >= 1 for w in workers.values())


def submit(
    executor: Any, fn: Callable[[dict], Any], config: dict, use_resources: bool = True
) -> Any:
    """Submit ``fn(config)`` to ``executor``; a Dask client gets the cell's resources.

    Parameters
    ----------
    executor : concurrent.futures.Executor or distributed.Client
        Where the cell runs.
    fn : callable
        What measures the cell (:func:`explorer.sweeps.cells.run_cell`).
    config : dict
        The cell's configuration.
    use_resources : bool
        False: submit without resources (a cluster without ``GPU`` workers).

    Returns
    -------
    future

    Examples
    --------
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> with ThreadPoolExecutor(1) as pool:
    ...     submit(pool, len, {"cell": "speed"}).result()
    1
    """
    if use_resources and is_dask_client(executor):
        resources = cell_resources(config)
        if resources:
            return executor.submit(fn, config, resources=resources, pure=False)
        return executor.submit(fn, config, pure=False)
    return executor.submit(fn, config)


def dead_worker_error(exc: BaseException) -> BaseException:
    """The error recorded for a cell whose future failed: a dead worker is said in words.

    Parameters
    ----------
    exc : BaseException
        The error the cell's future raised.

    Returns
    -------
    BaseException
        A RuntimeError that says so for a ``KilledWorker``, else ``exc``.

    Examples
    --------
    >>> class KilledWorker(Exception): ...
    >>> str(dead_worker_error(KilledWorker("run_cell-1", "tcp://127.0.0.1:1")))
    "the Dask worker running this cell died (KilledWorker: ('run_cell-1', 'tcp://127.0.0.1:1')); the sweep went on: run it again with --retry-failed to retry the cell"
    >>> dead_worker_error(ValueError("x")).args
    ('x',)
    """
    if type(exc).__name__ != "KilledWorker":
        return exc
    return RuntimeError(
        f"the Dask worker running this cell died ({type(exc).__name__}: {exc}); the sweep went "
        "on: run it again with --retry-failed to retry the cell"
    )
