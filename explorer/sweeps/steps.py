"""Steps a cell may add after pruning: fine-tuning, distillation, evaluation in int8 or FP8.

A cell's configuration asks for them (``"finetune"``, ``"recovery"``, ``"int8"``, ``"fp8"``,
``"gpu"``); the
accuracy and int8 experiments are grids of such cells (:mod:`explorer.sweeps.named`).
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import torch
from torch import nn

from explorer.sweeps.loading import bundle_for, layer_filter

__all__ = [
    "STEP_METRICS",
    "OnDevice",
    "evaluate",
    "fp8_rows",
    "int8_rows",
    "prune_metrics",
    "pruned_copy",
    "retrain",
]

#: Metrics a cell adds to the model's own evaluation (the rest are the bundle's metrics).
STEP_METRICS = (
    "eval_seconds",
    "prune_seconds",
    "density",
    "pruned_layers",
    "pruned_params",
    "mean_error",
    "permute_seconds",
    "permute_gain",
    "update_seconds",
    "finetuned",
    "finetune_seconds",
    "finetune_steps",
    "layers",
)


def evaluate(bundle: Any, model: nn.Module) -> dict:
    """The bundle's metrics of ``model`` plus ``eval_seconds``.

    Parameters
    ----------
    bundle : Any
        The model bundle, whose ``evaluate`` gives the metrics.
    model : torch.nn.Module
        The model evaluated.

    Returns
    -------
    dict

    Examples
    --------
    >>> from explorer.sweeps.loading import bundle_for
    >>> bundle = bundle_for({"model": "digits-mlp"})
    >>> metrics = evaluate(bundle, bundle.model)
    >>> metrics["metric"], metrics["accuracy"] > 0.9, metrics["eval_seconds"] > 0
    ('accuracy', True, True)
    """
    start = time.perf_counter()
    metrics = bundle.evaluate(model)
    metrics["eval_seconds"] = time.perf_counter() - start
    return metrics


def pruned_copy(config: dict, cancel: Any = None) -> tuple[Any, nn.Module, Any]:
    """``(bundle, model, result)``: a copy of the cell's model pruned as its configuration says.

    Calibrated methods and weight updates get the seeded calibration batches, so the same
    configuration prunes the same weights in every cell that asks (the prune cell, and the
    model-speed cell that times its model).

    Parameters
    ----------
    config : dict
        The cell's configuration (``model``, ``method``, ``pattern``, ``layers``, ``seed``, and
        the optional steps: ``permute``, ``update``, and ``quant`` with ``group_size`` for
        SparseGPT quantizing jointly).
    cancel : threading.Event or object with ``is_set()``, optional
        Passed to :func:`explorer.pruning.prune`.

    Returns
    -------
    tuple
        The bundle, the pruned copy and the :class:`~explorer.pruning.PruneResult`.

    Examples
    --------
    >>> bundle, model, result = pruned_copy({"model": "digits-mlp", "method": "magnitude",
    ...     "pattern": "2:4", "layers": "all", "seed": 0})
    >>> result.density
    0.5
    """
    from explorer.pruning import METHODS, prune

    bundle = bundle_for(config)
    model = copy.deepcopy(bundle.model)
    info = METHODS.get(config["method"])
    quantized = {}
    if config.get("quant"):  # joint 2:4 + int4 (int8) in SparseGPT's loop
        from explorer.sweeps.joint_quant import QUANTIZE_FORMAT

        quantized = {
            "quantize": QUANTIZE_FORMAT[config["quant"]],
            "group_size": config["group_size"],
        }
    calibration = None
    if (info is not None and info.needs_calibration) or config.get("update"):
        calibration = bundle.calibration(config["calibration_samples"], config["seed"])
    result = prune(
        model,
        config["method"],
        config["pattern"],
        calibration=calibration,
        filter_fn=layer_filter(
            config["layers"],
            bundle.filter_fn,
            bundle.model,
            config.get("dtype", "float16"),
            config.get("tokens", 1024),
        ),
        inplace=True,
        seed=config["seed"],
        progress=False,
        cancel=cancel,
        permute=bool(config.get("permute")),
        update=config.get("update"),
        **quantized,
    )
    return bundle, model, result


def prune_metrics(result: Any) -> dict:
    """What a :class:`~explorer.pruning.PruneResult` records: time, density, layers, steps.

    Parameters
    ----------
    result : PruneResult
        What pruning returned.

    Returns
    -------
    dict

    Examples
    --------
    >>> from explorer.pruning import prune
    >>> res = prune(nn.Sequential(nn.Linear(8, 8)), "magnitude", "2:4", progress=False)
    >>> prune_metrics(res)["density"], prune_metrics(res)["pruned_layers"]
    (0.5, 1)
    """
    out = {
        "prune_seconds": result.seconds,
        "density": result.density,
        "pruned_layers": len(result.masks),
        "pruned_params": sum(m.numel() for m in result.masks.values()),
        "mean_error": result.mean_error,
    }
    perm = result.permutation
    if perm is not None:
        out["permute_seconds"] = perm.seconds
        if math.isfinite(perm.mean_gain):
            out["permute_gain"] = perm.mean_gain
    if result.update is not None:
        out["update_seconds"] = result.update_seconds
    return out


def retrain(bundle: Any, model: nn.Module, masks: Any, config: dict, cancel: Any = None) -> dict:
    """Masked fine-tuning or distillation from the dense model, of a pruned model.

    Fine-tuning if ``config["finetune"]``, distillation if ``config["recovery"]``; returns the
    metric after it, its seconds and steps.

    Fine-tuning runs one fixed list of training batches (drawn with the cell's seed), so every
    method is fine-tuned on the same data in the same order; distillation reads
    ``recovery["samples"]`` calibration samples drawn with ``recovery["seed"]``, never the
    evaluation data, for at most ``recovery["minutes"]``.

    Parameters
    ----------
    bundle : Any
        The model bundle (training data, calibration, evaluation).
    model : torch.nn.Module
        The pruned model, trained in place.
    masks : Any
        The keep-masks that training preserves.
    config : dict
        The cell's configuration.
    cancel : threading.Event or object with ``is_set()``, optional
        Passed to :func:`explorer.pruning.finetune`.

    Returns
    -------
    dict
        ``finetuned``, ``finetune_seconds`` and ``finetune_steps``; empty when the cell asks for
        neither.

    Examples
    --------
    >>> retrain(None, nn.Linear(1, 1), {}, {})
    {}
    """
    from explorer.pruning import finetune

    tune, recovery = config.get("finetune"), config.get("recovery")
    if tune and bundle.train_data is not None:
        torch.manual_seed(config.get("seed", 0))
        data = list(bundle.train_data)
        torch.manual_seed(0)
        curve = finetune(model, masks, data, progress=False, cancel=cancel, **tune)
    elif recovery:
        data = bundle.calibration(recovery["samples"], seed=recovery["seed"])
        teacher = copy.deepcopy(bundle.model).eval()
        torch.manual_seed(0)
        curve = finetune(
            model,
            masks,
            data,
            steps=10**9,
            lr=recovery["lr"],
            teacher=teacher,
            max_minutes=recovery["minutes"],
            train=recovery["train"],
            progress=False,
            cancel=cancel,
        )
    else:
        return {}
    return {
        "finetuned": float(bundle.evaluate(model)[bundle.metric]),
        "finetune_seconds": curve.seconds,
        "finetune_steps": curve.steps,
    }


def int8_rows(kind: str, config: dict, bundle: Any, model: nn.Module, metrics: dict) -> list[dict]:
    """Rows of ``model`` with int8 weights and activations, where ``config["int8"]`` asks.

    ``quant="int8"``: :func:`explorer.gpu.modules.quant.int8_reference`, which sums the integer
    products exactly on any device; ``quant="int8-gpu"`` (``config["gpu"]``): the cuSPARSELt
    int8 kernel through :func:`explorer.sparsify`. A dense model is quantized whether or not
    it is 2:4; ``metrics["prune_seconds"]`` travels to the int8 row.

    Parameters
    ----------
    kind : str
        The cell's kind (``"dense"`` or ``"prune"``).
    config : dict
        The cell's configuration.
    bundle : Any
        The model bundle.
    model : torch.nn.Module
        The dense or pruned model.
    metrics : dict
        The cell's metrics.

    Returns
    -------
    list[dict]

    Examples
    --------
    >>> int8_rows("dense", {}, None, nn.Linear(1, 1), {})
    []
    """
    if not config.get("int8"):
        return []
    from explorer.gpu.modules.quant import int8_reference

    timing = {k: metrics[k] for k in ("prune_seconds",) if k in metrics}
    quantized, names = int8_reference(model, bundle.filter_fn, require_24=kind != "dense")
    rows = [
        {
            "kind": kind,
            "config": {**config, "quant": "int8"},
            "metrics": {**evaluate(bundle, quantized), "layers": len(names), **timing},
        }
    ]
    if config.get("gpu"):
        from explorer.gpu import sparsify

        on_gpu = copy.deepcopy(model).to("cuda", torch.float16)
        report = sparsify(on_gpu, filter_fn=bundle.filter_fn, dtype=torch.int8)
        runner = OnDevice(report.model, "cuda", torch.float16)
        rows.append(
            {
                "kind": kind,
                "config": {**config, "quant": "int8-gpu"},
                "metrics": {**evaluate(bundle, runner), "layers": len(report.swapped)},
            }
        )
    return rows


def fp8_rows(kind: str, config: dict, bundle: Any, model: nn.Module, metrics: dict) -> list[dict]:
    """Rows of ``model`` with FP8 (e4m3) weights and activations, where ``config["fp8"]`` asks.

    ``quant="fp8"``: :func:`explorer.gpu.modules.fp8.fp8_reference_model`, which emulates the sparse
    FP8 kernel (per-channel weight and per-token activation scales, float32 sums) on any
    device. A dense model is quantized whether or not it is 2:4; ``metrics["prune_seconds"]``
    travels to the FP8 row.

    Parameters
    ----------
    kind : str
        The cell's kind (``"dense"`` or ``"prune"``).
    config : dict
        The cell's configuration.
    bundle : Any
        The model bundle.
    model : torch.nn.Module
        The dense or pruned model.
    metrics : dict
        The cell's metrics.

    Returns
    -------
    list[dict]

    Examples
    --------
    >>> fp8_rows("dense", {}, None, nn.Linear(1, 1), {})
    []
    """
    if not config.get("fp8"):
        return []
    from explorer.gpu.modules.fp8 import fp8_reference_model

    timing = {k: metrics[k] for k in ("prune_seconds",) if k in metrics}
    quantized, names = fp8_reference_model(model, bundle.filter_fn, require_24=kind != "dense")
    return [
        {
            "kind": kind,
            "config": {**config, "quant": "fp8"},
            "metrics": {**evaluate(bundle, quantized), "layers": len(names), **timing},
        }
    ]


class OnDevice(nn.Module):
    """Run ``model`` on a GPU for a CPU caller.

    Tensor arguments go to ``device`` (floating ones in ``dtype``), outputs come back to the CPU in
    float32.

    Examples
    --------
    >>> OnDevice(nn.Identity(), "cpu", torch.float16)(torch.ones(1)).dtype
    torch.float32
    """

    def __init__(self, model: nn.Module, device: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.model, self.device, self.dtype = model, torch.device(device), dtype

    def _to(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.to(self.device, self.dtype if v.is_floating_point() else v.dtype)
        return v

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """``model``'s output for the arguments moved to the device, brought back to the CPU."""
        out = self.model(
            *(self._to(a) for a in args), **{k: self._to(v) for k, v in kwargs.items()}
        )
        return _back(out)


def _back(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.float().cpu() if out.is_floating_point() else out.cpu()
    if isinstance(out, dict):  # transformers' ModelOutput is a dict
        for k in list(out.keys()):
            out[k] = _back(out[k])
        return out
    if isinstance(out, tuple):
        return type(out)(_back(v) for v in out)
    return out
