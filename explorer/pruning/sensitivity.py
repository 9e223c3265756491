"""Layer sensitivity: prune one layer at a time and record how much the metric drops.

The layers whose pruning costs the least are the first to sparsify; together with measured
speedups this is the accuracy-versus-speedup view.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .. import _html
from ..errors import PruningCancelled, check_cancel, validate_cancel
from ..patterns import Pattern
from .api import prune
from .calibration import as_batches, progress_bar, selected_linears
from .methods import check_selection, method_info

__all__ = ["SensitivityResult", "sensitivity"]


@dataclass(frozen=True, eq=False)
class SensitivityResult:
    """The metric with each layer pruned alone.

    Attributes
    ----------
    method : str
        Pruning method.
    pattern : Pattern
        Sparsity pattern.
    dense : float
        The metric of the unpruned model.
    metrics : dict of str to float
        The metric with only that layer pruned, by layer name (model order).
    errors : dict of str to float
        Each layer's reconstruction error when calibration was given.
    higher_is_better : bool
        Whether a larger metric is better (accuracy) or worse (perplexity).
    seconds : float
        Wall-clock time.
    """

    method: str
    pattern: Pattern
    dense: float
    metrics: dict[str, float]
    errors: dict[str, float] = field(default_factory=dict)
    higher_is_better: bool = True
    seconds: float = 0.0

    @property
    def drops(self) -> dict[str, float]:
        """How much worse each layer's metric is than dense (positive = worse)."""
        sign = 1.0 if self.higher_is_better else -1.0
        return {name: sign * (self.dense - value) for name, value in self.metrics.items()}

    def ranked(self) -> list[tuple[str, float, float]]:
        """``(layer, metric, drop)`` from the most to the least sensitive layer."""
        drops = self.drops
        order = sorted(
            self.metrics, key=lambda n: -drops[n] if math.isfinite(drops[n]) else math.inf
        )
        return [(name, self.metrics[name], drops[name]) for name in order]

    def to_dict(self) -> dict:
        """A JSON-serialisable summary."""
        return {
            "method": self.method,
            "pattern": self.pattern.name,
            "dense": self.dense,
            "higher_is_better": self.higher_is_better,
            "seconds": round(self.seconds, 4),
            "layers": [
                {"name": n, "metric": m, "drop": d, "error": self.errors.get(n)}
                for n, m, d in self.ranked()
            ],
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict())

    def __repr__(self) -> str:
        ranked = self.ranked()
        worst = f", most sensitive={ranked[0][0]!r} (drop {ranked[0][2]:.4g})" if ranked else ""
        return (
            f"SensitivityResult(method={self.method!r}, pattern={self.pattern.name!r}, "
            f"layers={len(self.metrics)}, dense={self.dense:.4g}{worst})"
        )

    def _repr_html_(self) -> str:
        rows = []
        for name, metric, drop in self.ranked():
            error = self.errors.get(name, math.nan)
            rows.append(
                (
                    name,
                    f"{metric:.4g}",
                    f"{drop:+.4g}",
                    "-" if math.isnan(error) else f"{error:.4f}",
                )
            )
        caption = (
            f"sensitivity to {self.method} at {self.pattern.name}, one layer at a time "
            f"(dense {self.dense:.4g}, most sensitive first)"
        )
        return _html.table(("layer", "metric", "drop", "reconstruction error"), rows, caption)


def sensitivity(
    model: nn.Module,
    evaluate: Callable[[nn.Module], float],
    method: str = "magnitude",
    pattern: str | Pattern = "2:4",
    calibration: Any = None,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    progress: bool = True,
    cancel: Any = None,
    higher_is_better: bool = True,
    seed: int = 0,
) -> SensitivityResult:
    """Prune each selected layer alone, evaluate, restore; record the metric and its drop.

    Parameters
    ----------
    model : nn.Module
        The dense model; it is left as it was (each layer is restored after its turn).
    evaluate : callable
        ``evaluate(model) -> float``, e.g. test accuracy or perplexity.
    method, pattern, calibration, filter_fn, seed
        As for :func:`explorer.pruning.prune`.
    progress : bool
        Show a tqdm progress bar over layers.
    cancel : threading.Event or object with ``is_set()``, optional
        Checked between layers (and inside each pruning run).
    higher_is_better : bool
        False for metrics such as perplexity, so that drops are positive when worse.

    Returns
    -------
    SensitivityResult
        Dense metric and per-layer metric and drop; displays as a table.

    Examples
    --------
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> x = torch.randn(16, 8)
    >>> dense_out = net(x).detach()
    >>> cosine = torch.nn.functional.cosine_similarity
    >>> score = lambda m: float(cosine(m(x).detach().flatten(), dense_out.flatten(), dim=0))
    >>> result = sensitivity(net, score, progress=False)
    >>> sorted(result.metrics), round(result.dense, 4)
    (['0', '2'], 1.0)
    """
    if not callable(evaluate):
        raise TypeError(
            f"evaluate must be a callable evaluate(model) -> float, got {type(evaluate).__name__}"
        )
    pattern = Pattern.parse(pattern)
    info = method_info(method, pattern)
    validate_cancel(cancel)
    batches = as_batches(calibration)
    if info.needs_calibration and batches is None:
        raise ValueError(f"method {method!r} needs calibration data: pass calibration=")
    chosen, names = selected_linears(model, filter_fn)
    check_selection(model, chosen, names, pattern)
    start = time.perf_counter()
    dense = float(evaluate(model))
    metrics: dict[str, float] = {}
    errors: dict[str, float] = {}
    with progress_bar(len(chosen), f"sensitivity: {method} {pattern.name}", progress) as bar:
        for fqn, module in chosen.items():
            try:
                check_cancel(cancel, f"before layer {fqn}")
            except PruningCancelled as exc:
                raise PruningCancelled(f"sensitivity scan was cancelled ({exc})") from None
            saved = module.weight.detach().clone()
            try:
                result = prune(
                    model,
                    method,
                    pattern,
                    calibration=batches,
                    filter_fn=lambda _mod, name, _fqn=fqn: name == _fqn,
                    seed=seed,
                    progress=False,
                    cancel=cancel,
                )
                metrics[fqn] = float(evaluate(model))
                if fqn in result.errors:
                    errors[fqn] = result.errors[fqn]
            finally:
                with torch.no_grad():
                    module.weight.copy_(saved)
            bar.update()
    return SensitivityResult(
        method=info.name,
        pattern=pattern,
        dense=dense,
        metrics=metrics,
        errors=errors,
        higher_is_better=higher_is_better,
        seconds=time.perf_counter() - start,
    )
