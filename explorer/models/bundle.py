"""The :class:`ModelBundle`: a model with its calibration data, its metric and pruning filter."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from explorer import _html
from explorer.results.markdown import fmt

__all__ = ["ModelBundle", "classifier_filter"]


def classifier_filter(last: str) -> Callable[[nn.Module, str], bool]:
    """A ``filter_fn`` that selects every ``nn.Linear`` except the one named ``last``.

    Parameters
    ----------
    last : str
        The name of the classifier layer to leave out.

    Returns
    -------
    callable
        ``filter_fn(module, fqn) -> bool``.

    Examples
    --------
    >>> f = classifier_filter("head")
    >>> f(nn.Linear(4, 4), "body.0"), f(nn.Linear(4, 4), "head"), f(nn.ReLU(), "act")
    (True, False, False)
    """

    def filter_fn(module: nn.Module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and fqn != last

    filter_fn.__qualname__ = f"all Linears except {last!r}"
    return filter_fn


@dataclass(eq=False)
class ModelBundle:
    """A model ready for the explorer: the module, its calibration data, its metric and filter.

    Use :func:`explorer.models.load` for the bundled models, or :meth:`from_module` for your own.

    Attributes
    ----------
    name : str
        Short name, e.g. ``"digits-mlp"``.
    model : torch.nn.Module
        The model, in eval mode. Pruning changes it in place; reload for a fresh copy.
    metric : str
        Name of the headline metric in :meth:`evaluate`'s result.
    higher_is_better : bool
        Whether a larger headline metric is better.
    evaluate_fn : callable
        ``evaluate_fn(model) -> dict`` of metric values, the headline ``metric`` among them;
        :meth:`evaluate` calls it in eval and inference mode.
    calibration_fn : callable or None
        ``calibration_fn(n, seed) -> list`` of batches, behind :meth:`calibration`; None when
        the model has no calibration data.
    filter_fn : callable or None
        ``filter_fn(module, fqn) -> bool`` picking the Linears that make sense to prune (not the
        classifier or LM head); ``None`` means every Linear.
    train_data : iterable of (inputs, targets) or None
        Training batches, where masked fine-tuning applies (the MLPs): a list, or an iterable
        that yields one shuffled epoch per pass.
    description : str
        One line on the model and data.
    options : dict
        The options the bundle was loaded with.

    Examples
    --------
    >>> model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> x = torch.randn(16, 8)
    >>> bundle = ModelBundle.from_module(
    ...     model, evaluate=lambda m: {"score": float(m(x).mean())}, calibration=[x]
    ... )
    >>> bundle.metric, len(bundle.calibration(1))
    ('score', 1)
    """

    name: str
    model: nn.Module
    metric: str
    higher_is_better: bool
    evaluate_fn: Callable[[nn.Module], dict[str, Any]] = field(repr=False)
    calibration_fn: Callable[[int, int], list[Any]] | None = field(default=None, repr=False)
    filter_fn: Callable[[nn.Module, str], bool] | None = field(default=None, repr=False)
    train_data: Iterable[Any] | None = field(default=None, repr=False)
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.model.eval()

    # ------------------------------------------------------------------ data and metric
    def calibration(self, n: int = 128, seed: int = 0) -> list[Any]:
        """``n`` calibration samples from the calibration split, grouped into batches.

        Each batch is ready for ``model(batch)`` (a tensor) or ``model(**batch)`` (a dict of
        tensors). Never overlaps the evaluation data.

        Parameters
        ----------
        n : int
            Number of samples (images, sentences or token windows).
        seed : int
            Which samples are drawn; the same seed gives the same batches.

        Returns
        -------
        list
            The batches.
        """
        if self.calibration_fn is None:
            raise ValueError(
                f"bundle {self.name!r} has no calibration data; pass calibration= to "
                "ModelBundle.from_module, or use a data-free method such as 'magnitude'"
            )
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be a positive int (samples), got {n!r}")
        return self.calibration_fn(n, seed)

    def evaluate(self, model: nn.Module | None = None) -> dict[str, Any]:
        """Evaluate ``model`` (default: the bundle's own model) and return its metrics.

        Parameters
        ----------
        model : nn.Module, optional
            The model to evaluate, e.g. a pruned copy; its training mode is restored after.

        Returns
        -------
        dict
            The metric values plus ``"metric"`` (the headline metric's name) and
            ``"higher_is_better"``.
        """
        target = self.model if model is None else model
        was_training = target.training
        target.eval()
        try:
            with torch.inference_mode():
                values = dict(self.evaluate_fn(target))
        finally:
            target.train(was_training)
        if self.metric not in values:
            raise ValueError(
                f"the evaluate callable of {self.name!r} returned {sorted(values)}, which lacks "
                f"the headline metric {self.metric!r}; return a dict with that key"
            )
        values["metric"] = self.metric
        values["higher_is_better"] = self.higher_is_better
        return values

    @property
    def prunable(self) -> list[str]:
        """Fully qualified names of the Linears that :attr:`filter_fn` selects."""
        return [
            fqn
            for fqn, module in self.model.named_modules()
            if isinstance(module, nn.Linear)
            and (self.filter_fn is None or self.filter_fn(module, fqn))
        ]

    # ------------------------------------------------------------------ user models
    @classmethod
    def from_module(
        cls,
        model: nn.Module,
        evaluate: Callable[[nn.Module], dict[str, Any] | float],
        calibration: Sequence[Any] | Callable[[int, int], list[Any]] | None = None,
        *,
        name: str | None = None,
        metric: str | None = None,
        higher_is_better: bool = True,
        filter_fn: Callable[[nn.Module, str], bool] | None = None,
        train_data: Iterable[Any] | None = None,
    ) -> ModelBundle:
        """Wrap your own model and evaluation callable in a bundle.

        Parameters
        ----------
        model : torch.nn.Module
            Any module.
        evaluate : callable
            ``evaluate(model)`` returning a dict of metrics or a single float (named ``"score"``
            unless ``metric`` is given).
        calibration : sequence of batches, callable or None
            A list of batches (``calibration(n)`` returns the first ``n`` batches; here ``n``
            counts batches) or a callable ``(n, seed) -> list``.
        name, metric, higher_is_better, filter_fn, train_data
            As in the attributes; ``metric`` defaults to the first key of the first result.

        Examples
        --------
        >>> m = nn.Linear(4, 4)
        >>> b = ModelBundle.from_module(m, evaluate=lambda mod: 1.0, name="toy")
        >>> b.evaluate()["score"]
        1.0
        """
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(evaluate):
            raise TypeError(
                f"evaluate must be a callable evaluate(model) -> dict or float, got {evaluate!r}"
            )
        if metric is None:
            with torch.inference_mode():
                first = evaluate(model.eval())
            metric = "score" if not isinstance(first, dict) else next(iter(first), "score")

        def evaluate_fn(m: nn.Module) -> dict[str, Any]:
            out = evaluate(m)
            return dict(out) if isinstance(out, dict) else {metric: float(out)}

        if calibration is None or callable(calibration):
            calibration_fn = calibration
        else:
            batches = list(calibration)

            def calibration_fn(n: int, seed: int) -> list[Any]:
                return batches[:n]

        return cls(
            name=name or type(model).__name__,
            model=model,
            metric=metric,
            higher_is_better=higher_is_better,
            evaluate_fn=evaluate_fn,
            calibration_fn=calibration_fn,
            filter_fn=filter_fn,
            train_data=train_data,
            description="user model",
        )

    # ------------------------------------------------------------------ display
    def _summary(self) -> tuple[int, int]:
        params = sum(p.numel() for p in self.model.parameters())
        return params, len(self.prunable)

    def __repr__(self) -> str:
        params, n_linear = self._summary()
        better = "higher" if self.higher_is_better else "lower"
        return (
            f"ModelBundle({self.name!r}, {type(self.model).__name__}, {params / 1e6:.2f}M params, "
            f"{n_linear} prunable Linears, metric={self.metric!r} ({better} is better))"
        )

    def _repr_html_(self) -> str:
        params, n_linear = self._summary()
        rows = [
            ("model", type(self.model).__name__),
            ("parameters", f"{params:,}"),
            ("prunable Linears", n_linear),
            (
                "metric",
                f"{self.metric} ({'higher' if self.higher_is_better else 'lower'} is better)",
            ),
            ("calibration", "yes" if self.calibration_fn is not None else "none"),
            ("fine-tuning data", "yes" if self.train_data is not None else "none"),
            ("data", self.description),
        ]
        rows += [
            (f"option {k}", fmt(v, ".4g", missing=str(v))) for k, v in sorted(self.options.items())
        ]
        return _html.table(["", ""], rows, caption=f"ModelBundle {self.name}")
