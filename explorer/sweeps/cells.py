"""What one sweep cell measures: pure functions of the cell's configuration.

:func:`run_cell` takes a cell's JSON-able configuration and returns the rows to record (plain
dicts, picklable), so it can run in this process, in a process pool or on a dask worker; only
the driver writes to the store. It never raises for a failed measurement: the failure becomes a
row with ``status="failed"`` and the reason.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import functools
import importlib.util
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from explorer.errors import PruningCancelled
from explorer.results.store.provenance import provenance
from explorer.sweeps.grid import SPEED_PATTERNS

__all__ = ["hide_training_bars", "layer_filter", "quiet_progress", "run_cell"]

_QUIET_LOCK = threading.Lock()
_QUIET_DEPTH = [0, None]  # nesting depth, the original tqdm of the training loop


@contextlib.contextmanager
def quiet_progress(quiet: bool = True):
    """Hide the progress bar of training a bundled model on its first load while this runs.

    A sweep run with ``progress=False`` (``--no-progress``) shows no bar at all, the model's
    one-off training included.

    Examples
    --------
    >>> with quiet_progress():
    ...     pass
    """
    if not quiet:
        yield
        return
    from explorer.models import _mlp

    with _QUIET_LOCK:
        if _QUIET_DEPTH[0] == 0:
            _QUIET_DEPTH[1] = _mlp.tqdm
            _mlp.tqdm = functools.partial(_mlp.tqdm, disable=True)
        _QUIET_DEPTH[0] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET_DEPTH[0] -= 1
            if _QUIET_DEPTH[0] == 0:
                _mlp.tqdm = _QUIET_DEPTH[1]


def hide_training_bars() -> None:
    """Hide model-training progress bars in this process for good (a sweep worker's initializer).

    Examples
    --------
    >>> import concurrent.futures
    >>> pool = concurrent.futures.ThreadPoolExecutor(1, initializer=hide_training_bars)
    """
    from explorer.models import _mlp

    if not isinstance(_mlp.tqdm, functools.partial):
        _mlp.tqdm = functools.partial(_mlp.tqdm, disable=True)


@functools.lru_cache(maxsize=2)
def _bundle(name: str):
    # Loaded once per process; every cell works on a deep copy of the model.
    from explorer.models import load

    return load(name)


def layer_filter(
    layer_set: str, default: Callable | None = None
) -> Callable[[nn.Module, str], bool]:
    """The ``filter_fn`` of a layer set: ``"all"``, ``"every"`` or globs joined by ``|``.

    Examples
    --------
    >>> f = layer_filter("0|2")
    >>> f(nn.Linear(4, 4), "0"), f(nn.Linear(4, 4), "4"), f(nn.ReLU(), "2")
    (True, False, False)
    """
    if layer_set == "all":
        return default or (lambda module, fqn: isinstance(module, nn.Linear))
    if layer_set == "every":
        return lambda module, fqn: isinstance(module, nn.Linear)
    globs = [g.strip() for g in layer_set.split("|") if g.strip()]

    def filter_fn(module: nn.Module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and any(fnmatch.fnmatchcase(fqn, g) for g in globs)

    return filter_fn


def _round_weights(model: nn.Module, dtype: str) -> None:
    # Accuracy "at" a dtype: weights rounded to it and back; the model keeps its own dtype and
    # device, so every bundled evaluation runs unchanged on a CPU.
    target = getattr(torch, dtype)
    if not target.is_floating_point or target.itemsize < 2:
        raise ValueError(
            f"dtype {dtype!r}: accuracy cells emulate float32, float16 and bfloat16 weights only; "
            "quantised weights need a quantisation step a sweep does not perform"
        )
    with torch.no_grad():
        for param in model.parameters():
            if param.is_floating_point():
                param.copy_(param.to(target).to(param.dtype))


def _dense(config: dict) -> list[dict]:
    bundle = _bundle(config["model"])
    model = copy.deepcopy(bundle.model)
    _round_weights(model, config["dtype"])
    start = time.perf_counter()
    metrics = bundle.evaluate(model)
    metrics["eval_seconds"] = time.perf_counter() - start
    return [{"kind": "dense", "config": config, "metrics": metrics}]


def _prune(config: dict, cancel: Any = None) -> list[dict]:
    from explorer.pruning import METHODS, prune

    bundle = _bundle(config["model"])
    model = copy.deepcopy(bundle.model)
    filter_fn = layer_filter(config["layers"], bundle.filter_fn)
    calibration = None
    info = METHODS.get(config["method"])
    if info is not None and info.needs_calibration:
        calibration = bundle.calibration(config["calibration_samples"], config["seed"])
    result = prune(
        model,
        config["method"],
        config["pattern"],
        calibration=calibration,
        filter_fn=filter_fn,
        inplace=True,
        seed=config["seed"],
        progress=False,
        cancel=cancel,
    )
    _round_weights(model, config["dtype"])
    start = time.perf_counter()
    metrics = bundle.evaluate(model)
    metrics["eval_seconds"] = time.perf_counter() - start
    metrics["prune_seconds"] = result.seconds
    metrics["density"] = result.density
    metrics["pruned_layers"] = len(result.masks)
    metrics["pruned_params"] = sum(m.numel() for m in result.masks.values())
    metrics["mean_error"] = result.mean_error
    return [{"kind": "prune", "config": config, "metrics": metrics}]


def _skipped(config: dict, reason: str) -> list[dict]:
    return [{"kind": "layer-speed", "config": config, "status": "skipped", "error": reason}]


def _speed(config: dict) -> list[dict]:
    # 1. Guard: speed rows need a CUDA GPU, the GPU extra and the benchmark module.
    if config["pattern"] not in SPEED_PATTERNS:
        return _skipped(config, f"no sparse kernel for pattern {config['pattern']!r}")
    if not torch.cuda.is_available():
        return _skipped(config, "no CUDA GPU here: speed rows need one (accuracy rows are kept)")
    if importlib.util.find_spec("nvmath") is None:
        return _skipped(
            config,
            'the GPU extra is missing (nvmath-python): pip install "sparsity-explorer[gpu]"',
        )
    try:
        from explorer.bench import run_bench
    except ImportError as exc:
        return _skipped(config, f"the benchmark is not available ({exc})")
    # 2. The model's distinct layer shapes in this layer set, with how often each occurs.
    bundle = _bundle(config["model"])
    from explorer.pruning.calibration import selected_linears

    chosen, _ = selected_linears(bundle.model, layer_filter(config["layers"], bundle.filter_fn))
    shapes: dict[tuple[int, int], list[str]] = {}
    for fqn, mod in chosen.items():
        shapes.setdefault((mod.out_features, mod.in_features), []).append(fqn)
    if not shapes:
        raise ValueError(f"layer set {config['layers']!r} selects no nn.Linear layers")
    # 3. Time every shape at this token count (dense cuBLAS, torch eager, the explorer's plans).
    if config["dtype"] not in _BENCH_DTYPES:
        raise ValueError(
            f"dtype {config['dtype']!r} has no 2:4 sparse kernel to time; the benchmark "
            f"covers {', '.join(_BENCH_DTYPES)}"
        )
    problems = [(out, config["tokens"], inp) for out, inp in shapes]
    rows = run_bench(shapes=problems, dtypes=[config["dtype"]], suites=["matmul"], progress=False)
    # 4. One layer-speed row per shape, labelled with the layers that have it.
    return [
        _layer_row(config, shape, names, [r for r in rows if (r.get("m"), r.get("k")) == shape])
        for shape, names in shapes.items()
    ]


_BENCH_DTYPES = ("float16", "bfloat16", "int8")


def _layer_row(config: dict, shape: tuple[int, int], names: list[str], rows: list[dict]) -> dict:
    # Pivot the benchmark's rows (one per implementation and mode) into one row of times.
    cfg = {**config, "shape": list(shape), "layer_names": names, "count": len(names)}
    times, errors = {}, []
    for r in rows:
        if r.get("dtype") != config["dtype"]:
            continue
        suffix = "" if r.get("mode") == "eager" else f"_{r.get('mode')}"
        if r.get("status", "ok") == "ok" and r.get("ms"):
            times[f"{r.get('impl')}{suffix}_ms"] = float(r["ms"])
            if r.get("host_us"):
                times[f"{r.get('impl')}_host_us"] = float(r["host_us"])
        else:
            errors.append(f"{r.get('impl')} {r.get('mode')}: {r.get('error', 'failed')}")
    metrics = dict(times)
    for name, sparse in (("", "explorer"), ("_graph", "explorer"), ("_torch", "torch")):
        suffix = "_graph" if name == "_graph" else ""
        dense, fast = times.get(f"dense{suffix}_ms"), times.get(f"{sparse}{suffix}_ms")
        if dense and fast:
            metrics[f"speedup{name}"] = dense / fast
    metrics["dense_ms"] = times.get("dense_ms")
    metrics["sparse_ms"] = times.get("explorer_ms")
    if "speedup" not in metrics:
        reason = "; ".join(errors) or "the benchmark returned no timing for this shape"
        return {
            "kind": "layer-speed",
            "config": cfg,
            "metrics": metrics,
            "status": "failed",
            "error": reason,
        }
    return {
        "kind": "layer-speed",
        "config": cfg,
        "metrics": metrics,
        "error": "; ".join(errors) or None,
    }


_RUNNERS = {"dense": _dense, "prune": _prune, "speed": _speed}
_KINDS = {"dense": "dense", "prune": "prune", "speed": "layer-speed"}


def run_cell(config: dict, cancel: Any = None) -> list[dict]:
    """Measure one cell and return its rows; a failure becomes one ``failed`` row.

    Parameters
    ----------
    config : dict
        A cell's configuration (see :meth:`explorer.sweeps.SweepConfig.cells`).
    cancel : threading.Event, optional
        Passed to the pruning step; a cancellation propagates (nothing is returned).

    Returns
    -------
    list of dict
        Rows with ``kind``, ``config``, ``metrics``, ``status``, ``error`` and ``provenance``.

    Examples
    --------
    >>> run_cell({"cell": "nope"})[0]["status"]
    'failed'
    """
    kind = config.get("cell")
    try:
        if kind not in _RUNNERS:
            raise ValueError(f"unknown cell kind {kind!r}; expected one of {', '.join(_RUNNERS)}")
        rows = _prune(config, cancel) if kind == "prune" else _RUNNERS[kind](config)
    except PruningCancelled:
        raise
    except Exception as exc:  # every failure is recorded; the sweep goes on
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()
        message = f"{type(exc).__name__}: {exc}".strip()
        rows = [
            {
                "kind": _KINDS.get(kind, str(kind)),
                "config": config,
                "status": "failed",
                "error": message if len(message) <= 1000 else message[:997] + "...",
            }
        ]
    here = provenance()
    for row in rows:
        row.setdefault("metrics", {})
        row.setdefault("status", "ok")
        row.setdefault("error", None)
        row["provenance"] = here
    return rows
