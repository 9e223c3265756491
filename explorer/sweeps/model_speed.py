"""The model-speed cell: a dense or pruned configuration's model, timed whole as it is pruned.

Every dense and prune cell of :func:`explorer.sweeps.sweep` has a model-speed cell beside it
(:func:`explorer.sweeps.grid.model_speed_cell`), a cell of its own so that the accuracy
cells keep their keys and a sweep measured on a CPU gains its speeds when run again on a GPU
(skipped cells are tried again). On a CUDA GPU the model-speed cell of a 2:4 prune cell prunes
the same copy the prune cell did (:func:`explorer.sweeps.steps.pruned_copy`) and times a
sparsified copy of it against the dense one at the sweep's token counts, in its mode
(:func:`explorer.bench.model_speed.measure_model_speed`): one ``model-speed`` row per token
count (:mod:`explorer.results.model_speed`), each naming the cell whose accuracy row it
belongs to (``of_cell``). Every other model-speed cell records why it has no speed: no CUDA
GPU, no sparse kernel for its pattern, or the dense baseline.
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.results.model_speed import model_speed_row
from explorer.sweeps.grid import SPEED_PATTERNS
from explorer.sweeps.loading import layer_filter, round_weights
from explorer.sweeps.steps import pruned_copy

__all__ = ["needs_gpu", "no_speed_reason", "time_model_cell"]


def no_speed_reason(config: dict) -> str | None:
    """Why a cell's model has no sparse speed to time, on any machine (None: it has one).

    Parameters
    ----------
    config : dict
        A model-speed cell's configuration (``of``, ``pattern``, ``dtype``).

    Returns
    -------
    str or None

    Examples
    --------
    >>> no_speed_reason({"of": "prune", "pattern": "4:8", "dtype": "float16"})
    "no sparse kernel for pattern '4:8': only 2:4 runs on sparse tensor cores"
    >>> no_speed_reason({"of": "prune", "pattern": "2:4", "dtype": "float16"}) is None
    True
    """
    from explorer.bench.model_speed import TIMED_DTYPES

    if config.get("of") == "dense":
        return (
            "the dense baseline: nothing pruned, no sparse kernel to time (speed-ups are over it)"
        )
    if config.get("quant"):
        return (
            f"quantized weights ({config['quant']}): the sweep times models with 16-bit "
            "weights; a quantized model's speed comes from benchmarks/quantized_models.py rows, "
            "which the trade-off plot takes for its points"
        )
    if config.get("pattern") not in SPEED_PATTERNS:
        return (
            f"no sparse kernel for pattern {config.get('pattern')!r}: only 2:4 runs on sparse "
            "tensor cores"
        )
    if config.get("dtype") not in TIMED_DTYPES:
        return (
            f"no whole-model timing in {config.get('dtype')}: models are timed in "
            f"{' or '.join(TIMED_DTYPES)} (add float16 to the sweep's dtypes)"
        )
    return None


def needs_gpu(config: dict) -> bool:
    """Whether a model-speed cell times on a GPU (it has a sparse kernel to time).

    Parameters
    ----------
    config : dict
        A model-speed cell's configuration.

    Returns
    -------
    bool

    Examples
    --------
    >>> needs_gpu({"of": "prune", "pattern": "2:4", "dtype": "bfloat16"})
    True
    >>> needs_gpu({"of": "dense", "dtype": "float16"})
    False
    """
    return no_speed_reason(config) is None


def time_model_cell(config: dict, cancel: Any = None) -> list[dict]:
    """A model-speed cell's rows: one per token count, with times or the reason there are none.

    A timing that fails becomes ``failed`` rows with the error.

    Parameters
    ----------
    config : dict
        The model-speed cell's configuration.
    cancel : threading.Event or object with ``is_set()``, optional
        Checked while the pruned model is rebuilt; None never cancels.

    Returns
    -------
    list[dict]
        One row per token count.

    Examples
    --------
    >>> cfg = {"cell": "model-speed", "of": "dense", "model": "m", "dtype": "float16",
    ...        "speed": {"mode": "graphs", "tokens": [16, 4096]}}
    >>> [(r["status"], r["config"]["tokens"]) for r in time_model_cell(cfg)]
    [('skipped', 16), ('skipped', 4096)]
    """
    from explorer.bench.model_speed import ModelSpeedResult, measure_model_speed
    from explorer.bench.model_timer import CudaModelTimer

    mode, tokens = config["speed"]["mode"], tuple(config["speed"]["tokens"])
    # 1. Nothing to time: say why (the pattern or the baseline first, then the machine).
    reason = no_speed_reason(config) or CudaModelTimer().unavailable()
    if reason is not None:
        return ModelSpeedResult(mode, config.get("dtype", ""), tokens, reason=reason).rows(config)
    # 2. The pruned model the prune cell measured, at the cell's dtype.
    bundle, model, _ = pruned_copy(config, cancel)
    round_weights(model, config["dtype"])
    # 3. Dense against sparse at the sweep's token counts, in its mode.
    try:
        example = bundle.calibration(1, config.get("seed", 0))[0]
        result = measure_model_speed(
            model,
            example,
            tokens,
            mode,
            dtype=config["dtype"],
            filter_fn=layer_filter(config.get("layers", "all"), bundle.filter_fn),
        )
    except Exception as exc:  # a failed timing is a result: recorded with its reason
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()
        message = f"{type(exc).__name__}: {exc}".strip()[:1000]
        return [model_speed_row(config, n, mode, reason=message, status="failed") for n in tokens]
    return result.rows(config)
