"""The model-speed cell: a dense or pruned configuration's model, timed whole as it is pruned.

Every dense and prune cell of :func:`explorer.sweeps.sweep` has a model-speed cell beside it
(:func:`explorer.sweeps.grid.model_speed_cell`), a cell of its own so that the accuracy
cells keep their keys and a sweep measured on a CPU gains its speeds when run again on a GPU
(skipped cells are tried again). On a CUDA GPU the model-speed cell of a 2:4 prune cell prunes
the same copy the prune cell did (:func:`explorer.sweeps.steps.pruned_copy`) and times a
sparsified copy of it against the dense one at the sweep's token counts, in its mode
(:func:`explorer.bench.model_speed.measure_model_speed`): one ``model-speed`` row per token
count (:mod:`explorer.results.model_speed`), each naming the cell whose accuracy row it
belongs to (``of_cell``). A jointly quantized prune cell (``quant``: int4 or int8 weight-only)
is timed at its precision instead (:func:`explorer.bench.quantized_model_speed.measure_quantized_speed`):
bf16 dense, dense at the precision and ``sparsify(dtype=...)``, as the quantized ``bench-models``
rows of that model the trade-off plot draws its quantized points with. Every other model-speed
cell records why it has no speed: no CUDA GPU, no sparse kernel for its pattern, or the dense
baseline.
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
    from explorer.bench.quantized_model_speed import QUANT_TIMED

    if config.get("of") == "dense" and config.get("quant"):
        return (
            f"{config['quant']} dense: nothing pruned, no sparse kernel to time; its speed is "
            "timed beside the sweep's 2:4 cells of that precision (their dense rows)"
        )
    if config.get("of") == "dense":
        return (
            "the dense baseline: nothing pruned, no sparse kernel to time (speed-ups are over it)"
        )
    quant = config.get("quant")
    if quant and _precision(quant) not in QUANT_TIMED:
        return (
            f"quantized weights ({quant}): no whole-model timing at that precision; models are "
            f"timed quantized in {', '.join(QUANT_TIMED)}"
        )
    if config.get("pattern") not in SPEED_PATTERNS:
        return (
            f"no sparse kernel for pattern {config.get('pattern')!r}: only 2:4 runs on sparse "
            "tensor cores"
        )
    if quant:
        return None  # timed in bfloat16 activations, whatever the accuracy's dtype
    if config.get("dtype") not in TIMED_DTYPES:
        return (
            f"no whole-model timing in {config.get('dtype')}: models are timed in "
            f"{' or '.join(TIMED_DTYPES)} (add float16 to the sweep's dtypes)"
        )
    return None


def _precision(quant: str) -> str | None:
    """The precision a cell's ``quant`` is timed in (None: none)."""
    from explorer.results.quantized_points import QUANT_PRECISION

    return QUANT_PRECISION.get(quant)


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
    if config.get("quant"):
        return _time_quantized(config, cancel, mode, tokens)
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
        return _failed(config, tokens, mode, exc)
    return result.rows(config)


def _failed(config: dict, tokens: tuple[int, ...], mode: str, exc: Exception) -> list[dict]:
    """A failed timing as rows: ``failed`` with the error, one per token count."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        torch.cuda.empty_cache()
    message = f"{type(exc).__name__}: {exc}".strip()[:1000]
    return [model_speed_row(config, n, mode, reason=message, status="failed") for n in tokens]


def _time_quantized(config: dict, cancel: Any, mode: str, tokens: tuple[int, ...]) -> list[dict]:
    """A jointly quantized prune cell's model, timed at its precision (three copies, one run)."""
    from explorer.bench.quantized_model_speed import measure_quantized_speed

    bundle, model, result = pruned_copy(config, cancel)
    try:
        example = bundle.calibration(1, config.get("seed", 0))[0]
        timed = measure_quantized_speed(
            model,
            example,
            _precision(config["quant"]),
            tokens,
            mode,
            filter_fn=layer_filter(config.get("layers", "all"), bundle.filter_fn),
            scales=getattr(result, "scales", None) or None,
        )
    except Exception as exc:  # a failed timing is a result: recorded with its reason
        return _failed(config, tokens, mode, exc)
    return timed.rows(config)
