"""Masked fine-tuning: retrain a pruned model with its masks held fixed.

Prune, retrain, recover: after each backward pass the gradients of pruned weights are zeroed,
and after each optimizer step the masks are applied again (Adam's moments could otherwise move
a pruned weight off zero), so the sparsity pattern survives training exactly.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import _html
from .calibration import (
    PruningCancelled,
    _to_device,
    check_cancel,
    model_device,
    progress_bar,
    validate_cancel,
)
from .distill import check_teacher, distillation_loss, forward

__all__ = ["FinetuneResult", "finetune"]


@dataclass(frozen=True, eq=False)
class FinetuneResult:
    """The loss curve of a masked fine-tuning run.

    Attributes
    ----------
    losses : tuple of float
        Training loss at every step.
    steps : int
        Optimizer steps taken.
    lr : float
        Learning rate.
    seconds : float
        Wall-clock time.
    stopped_by : str
        ``"steps"`` (all steps done) or ``"time"`` (``max_minutes`` reached first).
    distilled : bool
        Whether the loss was distillation from a teacher.
    """

    losses: tuple[float, ...]
    steps: int
    lr: float
    seconds: float
    stopped_by: str = "steps"
    distilled: bool = False

    @property
    def first_loss(self) -> float:
        """Loss at the first step (NaN for zero steps)."""
        return self.losses[0] if self.losses else math.nan

    @property
    def final_loss(self) -> float:
        """Mean loss over the last tenth of the steps (NaN for zero steps)."""
        if not self.losses:
            return math.nan
        tail = self.losses[-max(1, len(self.losses) // 10) :]
        return sum(tail) / len(tail)

    def to_dict(self) -> dict:
        """A JSON-serialisable summary including the loss curve."""
        return {
            "steps": self.steps,
            "lr": self.lr,
            "seconds": round(self.seconds, 4),
            "stopped_by": self.stopped_by,
            "distilled": self.distilled,
            "losses": list(self.losses),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict())

    def __repr__(self) -> str:
        how = ", distilled" if self.distilled else ""
        stop = ", stopped by time" if self.stopped_by == "time" else ""
        return (
            f"FinetuneResult(steps={self.steps}, lr={self.lr:g}{how}, "
            f"loss {self.first_loss:.4f} -> {self.final_loss:.4f}, seconds={self.seconds:.2f}{stop})"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("steps", self.steps),
            ("learning rate", f"{self.lr:g}"),
            ("first loss", f"{self.first_loss:.4f}"),
            ("final loss (last 10%)", f"{self.final_loss:.4f}"),
            ("seconds", f"{self.seconds:.2f}"),
            ("stopped by", self.stopped_by),
        ]
        title = "masked distillation" if self.distilled else "masked fine-tuning"
        return _html.table(("", "value"), rows, title)


def _cycle(data: Any) -> Iterator[Any]:
    """Repeat ``data`` forever; a one-shot iterator is cached on its first pass."""
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], torch.Tensor | Mapping):
        while True:
            yield data
    if not isinstance(data, Iterable):
        raise TypeError(
            f"data must be an iterable of (input, target) batches, got {type(data).__name__}; "
            f"e.g. data=[(x[:64], y[:64]), (x[64:], y[64:])] or a DataLoader"
        )
    reiterable = iter(data) is not data
    cache: list[Any] = []
    first = True
    while True:
        got = False
        for batch in data if (reiterable or first) else cache:
            got = True
            if first and not reiterable:
                cache.append(batch)
            yield batch
        if not got:
            raise ValueError("data is empty; pass at least one (input, target) batch")
        first = False


def _logits(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, tuple | list):
        return output[0]
    raise TypeError(f"cannot find logits in the model output of type {type(output).__name__}")


def _default_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if logits.dim() > 2:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return F.cross_entropy(logits, target)


def _pairs(model: nn.Module, masks: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    masks = getattr(masks, "masks", masks)
    if not isinstance(masks, Mapping):
        raise TypeError(
            f"masks must be a dict of layer name to bool mask or a PruneResult, "
            f"got {type(masks).__name__}; e.g. finetune(model, prune(model).masks, data)"
        )
    pairs = []
    for fqn, mask in masks.items():
        try:
            weight = model.get_submodule(fqn).weight
        except AttributeError as exc:
            raise ValueError(
                f"mask {fqn!r} names no layer with a weight in this model ({exc}); "
                f"pass the masks prune() returned for this same model"
            ) from None
        if tuple(mask.shape) != tuple(weight.shape):
            raise ValueError(
                f"mask {fqn!r} has shape {tuple(mask.shape)} but the weight has "
                f"{tuple(weight.shape)}; pass the masks prune() returned for this model"
            )
        pairs.append((weight, mask.to(weight.device, torch.bool)))
    return pairs


def finetune(
    model: nn.Module,
    masks: Any,
    data: Any,
    steps: int = 200,
    lr: float = 1e-3,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    progress: bool = True,
    cancel: Any = None,
    teacher: nn.Module | None = None,
    max_minutes: float | None = None,
    train: str = "all",
    temperature: float = 1.0,
) -> FinetuneResult:
    """Fine-tune ``model`` in place with Adam while keeping pruned weights at zero.

    Two losses: with ``(input, target)`` batches, ``loss_fn`` (cross-entropy by default); with a
    ``teacher`` (the dense model), masked distillation: each batch is an input only, and the
    pruned model learns to reproduce the teacher's logits (KL divergence) or other outputs
    (normalised mean squared error), as in prune, retrain, recover with the mask held fixed.

    Parameters
    ----------
    model : nn.Module
        The pruned model; all its trainable parameters are trained.
    masks : dict of str to torch.Tensor, or PruneResult
        Bool keep-masks by layer name, as :func:`explorer.pruning.prune` returns them.
    data : iterable of (input, target), or of inputs with a teacher
        Training batches, cycled for ``steps`` steps; a dict input is passed as
        ``model(**input)``. With a teacher, batches are inputs as for calibration (a tensor,
        a dict such as tokenized text, or a tuple passed as ``model(*batch)``). Keep them
        apart from the evaluation data.
    steps : int
        Optimizer steps.
    lr : float
        Adam learning rate.
    loss_fn : callable, optional
        ``loss_fn(output, target) -> scalar``; default cross-entropy on the logits (an output's
        ``.logits`` or first element is used).
    progress : bool
        Show a tqdm progress bar.
    cancel : threading.Event or object with ``is_set()``, optional
        Checked before each step; when set, every parameter is restored and
        :class:`PruningCancelled` is raised.
    teacher : nn.Module, optional
        The dense model (a copy made before pruning, sharing no parameters); switches to
        masked distillation. It is run in eval mode without gradients.
    max_minutes : float, optional
        Time budget in minutes (positive): before each step after the first, the run stops if
        that step, taking the mean time of the steps so far, would end past the budget.
        ``result.stopped_by`` says which limit ended the run.
    train : {"all", "masked"}
        Train every trainable parameter (default), or only the masked layers' weights and
        biases (cheaper; embeddings and norms stay as they are).
    temperature : float
        Softmax temperature of the distillation loss on logits.

    Returns
    -------
    FinetuneResult
        The loss curve, how many steps were taken and what stopped the run.

    Examples
    --------
    >>> from explorer.pruning import prune
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    >>> result = prune(net, "magnitude", "2:4", progress=False)
    >>> x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    >>> curve = finetune(net, result.masks, [(x, y)], steps=20, progress=False)
    >>> curve.steps, bool((net[0].weight[~result.masks["0"]] == 0).all())
    (20, True)
    """
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}; e.g. steps=200")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}; e.g. lr=1e-3")
    if max_minutes is not None and not (isinstance(max_minutes, int | float) and max_minutes > 0):
        raise ValueError(
            f"max_minutes must be a positive number of minutes or None, got {max_minutes!r}; "
            "e.g. max_minutes=15"
        )
    if train not in ("all", "masked"):
        raise ValueError(f'train must be "all" or "masked", got {train!r}')
    validate_cancel(cancel)
    if teacher is not None:
        teacher = check_teacher(model, teacher)
        if data is None:
            raise ValueError(
                "masked distillation needs training text or inputs (data=None); pass batches of "
                "inputs kept apart from the evaluation data, e.g. bundle.calibration(64, seed=1)"
            )
    pairs = _pairs(model, masks)
    loss_fn = loss_fn or _default_loss
    device = model_device(model)
    if train == "masked":
        names = getattr(masks, "masks", masks)
        params = [
            p for fqn in names for p in model.get_submodule(fqn).parameters() if p.requires_grad
        ]
    else:
        params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr)
    teacher_modes = None
    if teacher is not None:
        teacher_modes = {mod: mod.training for mod in teacher.modules()}
        teacher.eval()
    stopped_by = "steps"
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    modes = {mod: mod.training for mod in model.modules()}
    batches = _cycle(data)
    losses: list[float] = []
    start = time.perf_counter()
    deadline = None if max_minutes is None else start + 60.0 * max_minutes
    model.train()
    try:
        title = "masked distillation" if teacher is not None else "masked fine-tuning"
        if max_minutes is not None:
            title += f" (at most {max_minutes:g} min)"
        with progress_bar(steps if max_minutes is None else None, title, progress) as bar:
            for step in range(steps):
                check_cancel(cancel, f"at step {step}")
                # 1. the budget: stop when the next step (at the mean pace) would overrun it.
                now = time.perf_counter()
                if deadline is not None and step and now + (now - start) / step > deadline:
                    stopped_by = "time"
                    break
                batch = next(batches)
                if teacher is not None:
                    inputs = _to_device(batch, device)
                    with torch.no_grad():
                        target_out = forward(teacher, inputs)
                    loss = distillation_loss(forward(model, inputs), target_out, temperature)
                else:
                    if not (isinstance(batch, tuple | list) and len(batch) == 2):
                        raise TypeError(
                            f"each data batch must be an (input, target) pair, got "
                            f"{type(batch).__name__}; e.g. data=[(x, y)], or pass teacher= "
                            "to distil from the dense model on inputs alone"
                        )
                    inputs, target = _to_device(tuple(batch), device)
                    out = model(**inputs) if isinstance(inputs, Mapping) else model(inputs)
                    loss = loss_fn(_logits(out), target)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                # 2. pruned weights get no gradient ...
                for weight, mask in pairs:
                    if weight.grad is not None:
                        weight.grad.masked_fill_(~mask, 0)
                optimizer.step()
                # 3. ... and are put back to zero after the step.
                with torch.no_grad():
                    for weight, mask in pairs:
                        weight.masked_fill_(~mask, 0)
                losses.append(float(loss.detach()))
                bar.update()
                if step % 10 == 0:
                    bar.set_postfix(loss=f"{losses[-1]:.4f}")
    except BaseException as exc:
        model.load_state_dict(saved)
        if isinstance(exc, PruningCancelled):
            raise PruningCancelled(
                f"fine-tuning was cancelled ({exc}); the model's parameters were restored"
            ) from None
        raise
    finally:
        for mod, training in modes.items():
            mod.training = training
        for mod, training in (teacher_modes or {}).items():
            mod.training = training
    return FinetuneResult(
        tuple(losses),
        len(losses),
        float(lr),
        time.perf_counter() - start,
        stopped_by,
        teacher is not None,
    )
