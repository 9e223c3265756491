"""What one sweep cell measures: pure functions of the cell's configuration.

:func:`run_cell` takes a cell's JSON-able configuration and returns the rows to record (plain
dicts, picklable), so it can run in this process, in a process pool or on a dask worker; only
the driver writes to the store. It never raises for a failed measurement: the failure becomes a
row with ``status="failed"`` and the reason.

A dense cell evaluates the bundled model (a quantized one first quantizes it with nothing
pruned: :func:`~explorer.sweeps.joint_quant.quantized_dense_config`), a prune cell prunes a
copy of it and evaluates that
(then, where its configuration asks, in int8 and after fine-tuning: :mod:`explorer.sweeps.steps`),
a speed cell times its layer shapes (:mod:`explorer.sweeps.speed`), and a model-speed cell
times a pruned model whole, dense against sparse (:mod:`explorer.sweeps.model_speed`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from explorer.errors import PruningCancelled
from explorer.results.store.provenance import provenance
from explorer.sweeps.joint_quant import quantized_dense_config
from explorer.sweeps.loading import (
    bundle_for,
    round_weights,
)
from explorer.sweeps.model_speed import time_model_cell
from explorer.sweeps.speed import speed_cell
from explorer.sweeps.steps import (
    evaluate,
    fp8_rows,
    int8_rows,
    prune_metrics,
    pruned_copy,
    retrain,
)

__all__ = ["failed_rows", "run_cell"]


def _dense(config: dict, cancel: Any = None) -> list[dict]:
    if config.get("quant"):
        return _quantized_dense(config, cancel)
    bundle = bundle_for(config)
    model = copy.deepcopy(bundle.model)
    round_weights(model, config["dtype"])
    metrics = evaluate(bundle, model)
    return [
        {"kind": "dense", "config": config, "metrics": metrics},
        *int8_rows("dense", config, bundle, model, metrics),
        *fp8_rows("dense", config, bundle, model, metrics),
    ]


def _quantized_dense(config: dict, cancel: Any = None) -> list[dict]:
    # GPTQ: SparseGPT's loop quantizing every prunable layer, nothing pruned
    bundle, model, result = pruned_copy(quantized_dense_config(config), cancel)
    round_weights(model, config["dtype"])
    metrics = {**evaluate(bundle, model), **prune_metrics(result)}
    return [{"kind": "dense", "config": config, "metrics": metrics}]


def _prune(config: dict, cancel: Any = None) -> list[dict]:
    # 1. Prune a copy of the bundle's model (seeded calibration where the method needs it).
    bundle, model, result = pruned_copy(config, cancel)
    # 2. Evaluate at the cell's dtype, in int8 or FP8 where asked, then after fine-tuning if asked.
    round_weights(model, config["dtype"])
    metrics = {**evaluate(bundle, model), **prune_metrics(result)}
    quantized = int8_rows("prune", config, bundle, model, metrics)
    quantized += fp8_rows("prune", config, bundle, model, metrics)
    metrics.update(retrain(bundle, model, result.masks, config, cancel))
    return [{"kind": "prune", "config": config, "metrics": metrics}, *quantized]


_RUNNERS = {"dense": _dense, "prune": _prune, "speed": speed_cell, "model-speed": time_model_cell}
_KINDS = {"dense": "dense", "prune": "prune", "speed": "layer-speed", "model-speed": "model-speed"}
_CANCELLABLE = ("dense", "prune", "model-speed")


def failed_rows(config: dict, exc: BaseException) -> list[dict]:
    """The one row that records a cell that could not be measured, with the reason.

    Parameters
    ----------
    config : dict
        The cell's configuration.
    exc : BaseException
        Why the cell could not be measured.

    Returns
    -------
    list[dict]
        One row with status ``failed`` and the error (cut to 1000 characters).

    Examples
    --------
    >>> (row,) = failed_rows({"cell": "speed"}, RuntimeError("no GPU"))
    >>> row["kind"], row["error"]
    ('layer-speed', 'RuntimeError: no GPU')
    """
    kind = config.get("cell")
    message = f"{type(exc).__name__}: {exc}".strip()
    return [
        {
            "kind": _KINDS.get(kind, str(kind)),
            "config": config,
            "status": "failed",
            "error": message if len(message) <= 1000 else message[:997] + "...",
        }
    ]


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
        runner = _RUNNERS[kind]
        rows = runner(config, cancel) if kind in _CANCELLABLE else runner(config)
    except PruningCancelled:
        raise
    except Exception as exc:  # every failure is recorded; the sweep goes on
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()
        rows = failed_rows(config, exc)
    here = provenance()
    for row in rows:
        row.setdefault("metrics", {})
        row.setdefault("status", "ok")
        row.setdefault("error", None)
        row["provenance"] = here
    return rows
