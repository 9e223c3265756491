"""Masked fine-tuning: retrain a pruned model with its masks held fixed.

Prune, retrain, recover: after each backward pass the gradients of pruned weights are zeroed,
and after each optimizer step the masks are applied again (Adam's moments could otherwise move
a pruned weight off zero), so the sparsity pattern survives training exactly.

Training changes the model in place, so nothing that would destroy it gets that far: the
arguments, masks and data are checked before the first step
(:mod:`explorer.pruning.finetune_checks`), and a run that meets a NaN or infinite loss or
parameter, is cancelled or fails puts every parameter and buffer back bit for bit before it
raises.
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
from ..errors import PruningCancelled, check_cancel, validate_cancel
from .calibration import model_device, progress_bar
from .distill import check_teacher, check_temperature, distillation_loss, forward
from .finetune_checks import (
    FinetuneDiverged,
    MaskedLayer,
    check_batch,
    check_data,
    check_masks,
    check_parameters,
    check_positive,
    masks_hold,
    move_to,
)
from .snapshot import Snapshot

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
    masks_hold : bool
        Checked after the last step: every pruned weight is still zero and every layer that
        was 2:4 before training still is.
    """

    losses: tuple[float, ...]
    steps: int
    lr: float
    seconds: float
    stopped_by: str = "steps"
    distilled: bool = False
    masks_hold: bool = True

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
            "masks_hold": self.masks_hold,
            "losses": list(self.losses),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict())

    def __repr__(self) -> str:
        how = ", distilled" if self.distilled else ""
        stop = ", stopped by time" if self.stopped_by == "time" else ""
        held = "masks hold" if self.masks_hold else "MASKS BROKEN"
        return (
            f"FinetuneResult(steps={self.steps}, lr={self.lr:g}{how}, "
            f"loss {self.first_loss:.4f} -> {self.final_loss:.4f}, {held}, "
            f"seconds={self.seconds:.2f}{stop})"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("steps", self.steps),
            ("learning rate", f"{self.lr:g}"),
            ("first loss", f"{self.first_loss:.4f}"),
            ("final loss (last 10%)", f"{self.final_loss:.4f}"),
            ("seconds", f"{self.seconds:.2f}"),
            ("stopped by", self.stopped_by),
            (
                "masks hold",
                _html.badge("yes", "ok") if self.masks_hold else _html.badge("NO", "error"),
            ),
        ]
        title = "masked distillation" if self.distilled else "masked fine-tuning"
        return _html.table(("", "value"), rows, title, raw_columns=(1,))


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
        Softmax temperature of the distillation loss on logits, a finite number above 0.

    Returns
    -------
    FinetuneResult
        The loss curve, how many steps were taken, what stopped the run and whether the masks
        still hold.

    Raises
    ------
    ValueError
        Before the first step, with the model untouched: ``lr`` or ``temperature`` not a
        finite number above 0, a mask of the wrong shape or one that breaks 2:4 on a layer
        that follows 2:4, empty data or a batch holding NaN or infinity.
    TypeError
        Before the first step: a mask that is not bool, or a batch that is not an
        ``(input, target)`` pair without a teacher.
    FinetuneDiverged
        At the first step whose loss, or whose updated parameters, hold NaN or infinity: the
        message names the step and the cause, and every parameter and buffer was restored bit
        for bit to its state before the first step. The same restore happens on cancellation
        (:class:`PruningCancelled`) and on any other error.

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
    # 1. everything that could destroy the model is refused before it is touched.
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}; e.g. steps=200")
    lr = check_positive(lr, "lr", "1e-3")
    temperature = check_temperature(temperature)
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
    layers = check_masks(model, masks)
    pairs = teacher is None
    checked = check_data(data, pairs)
    if train == "masked":
        names = [layer.name for layer in layers]
        params = [
            p for fqn in names for p in model.get_submodule(fqn).parameters() if p.requires_grad
        ]
    else:
        params = [p for p in model.parameters() if p.requires_grad]
    trained = {id(p) for p in params}
    named = [(n, p) for n, p in model.named_parameters() if id(p) in trained]
    check_parameters(named, "before the first step (the model was already broken)")
    loss_fn = loss_fn or _default_loss
    device = model_device(model)
    optimizer = torch.optim.Adam(params, lr=lr)
    teacher_modes = None
    if teacher is not None:
        teacher_modes = {mod: mod.training for mod in teacher.modules()}
        teacher.eval()
    stopped_by = "steps"
    # 2. the state to put back, bit for bit, if the run does not finish.
    snapshot = Snapshot(model)
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
                # 3. the budget: stop when the next step (at the mean pace) would overrun it.
                now = time.perf_counter()
                if deadline is not None and step and now + (now - start) / step > deadline:
                    stopped_by = "time"
                    break
                batch = next(batches)
                if not checked:  # batches of a DataLoader or generator, as they come
                    check_batch(batch, f"the batch of step {step}", pairs)
                loss, outputs = _loss(model, teacher, batch, device, loss_fn, temperature)
                value = float(loss.detach())
                # 4. a NaN or infinite loss stops the run before it reaches the weights.
                if not math.isfinite(value):
                    raise FinetuneDiverged(
                        f"the loss is {value} at step {step} ({_cause(outputs)})"
                    )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                _step(optimizer, layers)
                check_parameters(named, f"after step {step}")
                losses.append(value)
                bar.update()
                if step % 10 == 0:
                    bar.set_postfix(loss=f"{losses[-1]:.4f}")
    except BaseException as exc:
        snapshot.restore()
        if isinstance(exc, PruningCancelled):
            raise PruningCancelled(
                f"fine-tuning was cancelled ({exc}); the model's parameters were restored"
            ) from None
        if isinstance(exc, FinetuneDiverged):
            raise FinetuneDiverged(
                f"fine-tuning stopped: {exc}; every parameter and buffer was restored to its "
                f"state before the first step. Lower lr (now {lr:g}), check the data and "
                "loss_fn, or train fewer steps"
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
        lr,
        time.perf_counter() - start,
        stopped_by,
        teacher is not None,
        masks_hold(layers),
    )


def _loss(model, teacher, batch, device, loss_fn, temperature):
    """The loss of one batch, and the outputs it came from (to name a non-finite one)."""
    if teacher is not None:
        inputs = move_to(batch, device)
        with torch.no_grad():
            target_out = forward(teacher, inputs)
        student_out = forward(model, inputs)
        loss = distillation_loss(student_out, target_out, temperature)
        return loss, {"the teacher's output": target_out, "the model's output": student_out}
    inputs, target = move_to(tuple(batch), device)
    out = model(**inputs) if isinstance(inputs, Mapping) else model(inputs)
    logits = _logits(out)
    return loss_fn(logits, target), {"the model's output": logits}


def _cause(outputs: dict[str, Any]) -> str:
    """Which output was not finite, or that the loss function made a NaN of finite outputs."""
    for what, out in outputs.items():
        try:
            tensor = _logits(out)
        except TypeError:
            continue
        if (
            isinstance(tensor, torch.Tensor)
            and tensor.is_floating_point()
            and not bool(torch.isfinite(tensor.detach()).all())
        ):
            return f"{what} holds NaN or infinity"
    return "the outputs are finite: the loss function returned it"


def _step(optimizer: torch.optim.Optimizer, layers: list[MaskedLayer]) -> None:
    """One optimizer step that leaves every pruned weight at zero."""
    # pruned weights get no gradient ...
    for layer in layers:
        if layer.weight.grad is not None:
            layer.weight.grad.masked_fill_(~layer.mask, 0)
    optimizer.step()
    # ... and are put back to zero after the step.
    with torch.no_grad():
        for layer in layers:
            layer.weight.masked_fill_(~layer.mask, 0)
