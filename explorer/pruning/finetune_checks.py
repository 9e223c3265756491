"""What masked fine-tuning checks: its arguments before the first step, its state, its masks.

:func:`explorer.pruning.finetune` trains a pruned model in place, so it refuses what would
destroy that model before touching it (a learning rate that is not a finite positive number,
masks that are not bool or that would undo a layer's 2:4 pattern, batches holding NaN), keeps a
:class:`~explorer.pruning.snapshot.Snapshot` of every parameter and buffer before the first step, and after the last one
asks :func:`masks_hold` whether the pruned weights are still zero.

Examples
--------
>>> import torch
>>> from torch import nn
>>> check_positive(float("inf"), "lr", "1e-3")
Traceback (most recent call last):
...
ValueError: lr must be a finite number above 0, got inf; e.g. lr=1e-3
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..checks import check_pattern

__all__ = [
    "FinetuneDiverged",
    "MaskedLayer",
    "check_batch",
    "check_data",
    "check_masks",
    "check_parameters",
    "check_positive",
    "masks_hold",
    "move_to",
]

#: The pattern a layer must keep when its weight already follows it.
KEPT_PATTERN = "2:4"


class FinetuneDiverged(RuntimeError):
    """Fine-tuning met a NaN or infinite loss or parameter; the model was restored first."""


def check_positive(value: Any, name: str, example: str) -> float:
    """``value`` as a float if it is a finite real number above 0, else a ValueError naming it.

    Parameters
    ----------
    value : Any
        The value given.
    name : str
        The argument's name, for the message.
    example : str
        A usual value, shown in the message.

    Returns
    -------
    float

    Examples
    --------
    >>> check_positive(1e-3, "lr", "1e-3")
    0.001
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(
            f"{name} must be a finite number above 0, got {value!r}; e.g. {name}={example}"
        )
    return float(value)


@dataclass(frozen=True, eq=False)
class MaskedLayer:
    """One layer fine-tuning holds to its mask.

    Attributes
    ----------
    name : str
        The layer's name in the model.
    weight : torch.Tensor
        Its weight (the parameter itself, trained in place).
    mask : torch.Tensor
        Bool keep-mask on the weight's device; False entries stay zero.
    pattern : str or None
        ``"2:4"`` when the weight followed 2:4 before training (it must after), else None.
    """

    name: str
    weight: torch.Tensor
    mask: torch.Tensor
    pattern: str | None


def check_masks(model: nn.Module, masks: Any) -> list[MaskedLayer]:
    """The layers ``masks`` name, each checked: a bool mask shaped like its weight, 2:4 kept.

    Parameters
    ----------
    model : nn.Module
        The pruned model.
    masks : dict of str to torch.Tensor, or PruneResult
        Bool keep-masks by layer name.

    Returns
    -------
    list of MaskedLayer

    Raises
    ------
    TypeError
        Not a mapping of tensors, or a mask that is not bool (a float mask of weights or
        probabilities would keep every nonzero entry, leaving the layer dense).
    ValueError
        A name with no weight, a mask of another shape, or a mask that breaks 2:4 on a layer
        whose weight follows 2:4 (fine-tuning would make it dense again).

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(8, 4))
    >>> check_masks(net, {"0": torch.ones(4, 8)})
    Traceback (most recent call last):
    ...
    TypeError: mask '0' has dtype torch.float32, but masks must be bool keep-masks (True = kept); a float mask keeps every nonzero entry, which can leave the layer dense. Pass the masks prune() returned, or convert a 0/1 mask with mask.bool()
    """
    masks = getattr(masks, "masks", masks)
    if not isinstance(masks, Mapping):
        raise TypeError(
            f"masks must be a dict of layer name to bool mask or a PruneResult, "
            f"got {type(masks).__name__}; e.g. finetune(model, prune(model).masks, data)"
        )
    layers = []
    for fqn, mask in masks.items():
        try:
            weight = model.get_submodule(fqn).weight
        except AttributeError as exc:
            raise ValueError(
                f"mask {fqn!r} names no layer with a weight in this model ({exc}); "
                f"pass the masks prune() returned for this same model"
            ) from None
        if not isinstance(mask, torch.Tensor):
            raise TypeError(
                f"mask {fqn!r} is a {type(mask).__name__}, not a torch.Tensor; pass the bool "
                "masks prune() returned for this model"
            )
        if mask.dtype != torch.bool:
            raise TypeError(
                f"mask {fqn!r} has dtype {mask.dtype}, but masks must be bool keep-masks "
                "(True = kept); a float mask keeps every nonzero entry, which can leave the "
                "layer dense. Pass the masks prune() returned, or convert a 0/1 mask with "
                "mask.bool()"
            )
        if tuple(mask.shape) != tuple(weight.shape):
            raise ValueError(
                f"mask {fqn!r} has shape {tuple(mask.shape)} but the weight has "
                f"{tuple(weight.shape)}; pass the masks prune() returned for this model"
            )
        mask = mask.to(weight.device)
        pattern = KEPT_PATTERN if _follows(weight, KEPT_PATTERN) else None
        if pattern is not None:
            report = check_pattern(mask, pattern)
            if not report.valid:
                raise ValueError(
                    f"layer {fqn!r} follows {pattern} but its mask breaks it: "
                    f"{report.violations:,} of {report.groups:,} groups keep more than "
                    f"{report.pattern.n} of {report.pattern.m}, the first at "
                    f"{report.first_violations[:3]}; fine-tuning with it would make the layer "
                    f"denser than {pattern}. Pass the masks prune() returned for this model, "
                    f"or the layer's own zeros: mask = weight != 0"
                )
        layers.append(MaskedLayer(fqn, weight, mask, pattern))
    return layers


def _follows(weight: torch.Tensor, pattern: str) -> bool:
    """Whether a 2-D weight whose width the pattern divides follows ``pattern`` now."""
    if weight.dim() != 2 or weight.is_meta or weight.numel() == 0 or weight.shape[1] % 4:
        return False
    return check_pattern(weight.detach(), pattern).valid


def masks_hold(layers: Sequence[MaskedLayer]) -> bool:
    """Whether every pruned weight is zero and every layer that was 2:4 still is.

    Parameters
    ----------
    layers : Sequence[MaskedLayer]
        The pruned layers, with their masks and patterns.

    Returns
    -------
    bool

    Examples
    --------
    >>> w = nn.Parameter(torch.tensor([[1.0, 0.0, 2.0, 0.0]]))
    >>> masks_hold([MaskedLayer("fc", w, w != 0, "2:4")])
    True
    """
    with torch.no_grad():
        for layer in layers:
            if bool(layer.weight.masked_select(~layer.mask).ne(0).any()):
                return False
            if layer.pattern is not None and not check_pattern(layer.weight, layer.pattern).valid:
                return False
    return True


def _tensors(batch: Any, path: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a batch (nested tuples, lists and dicts) with where it sits."""
    if isinstance(batch, torch.Tensor):
        yield path, batch
    elif isinstance(batch, Mapping):
        for key, value in batch.items():
            yield from _tensors(value, f"{path}[{key!r}]")
    elif isinstance(batch, tuple | list):
        for i, value in enumerate(batch):
            yield from _tensors(value, f"{path}[{i}]")


def check_batch(batch: Any, where: str, pairs: bool) -> None:
    """A training batch: an ``(input, target)`` pair when ``pairs``, every tensor finite, none empty.

    Parameters
    ----------
    batch : Any
        The batch.
    where : str
        Where the batch sits in the data (``"batch 0"``), for the message.
    pairs : bool
        Whether the batch must be an ``(input, target)`` pair.

    Raises
    ------
    TypeError
        ``pairs`` and the batch is not a pair.
    ValueError
        An empty tensor, or a floating-point tensor holding NaN or infinity (named by where
        it sits in the batch).

    Examples
    --------
    >>> check_batch((torch.tensor([1.0, float("nan")]), torch.tensor([0, 1])), "batch 0", True)
    Traceback (most recent call last):
    ...
    ValueError: batch 0: the input holds 1 NaN or infinite value(s) of 2, the first at index (1,); clean the data (e.g. drop those rows, or torch.nan_to_num) before fine-tuning
    """
    if pairs and not (isinstance(batch, tuple | list) and len(batch) == 2):
        raise TypeError(
            f"{where}: each data batch must be an (input, target) pair, got "
            f"{type(batch).__name__}; e.g. data=[(x, y)], or pass teacher= "
            "to distil from the dense model on inputs alone"
        )
    parts = (
        [*_tensors(batch[0], "the input"), *_tensors(batch[1], "the target")]
        if pairs
        else list(_tensors(batch, "the input"))
    )
    for path, tensor in parts:
        if tensor.numel() == 0:
            raise ValueError(
                f"{where}: {path} is empty (shape {tuple(tensor.shape)}); a loss over no "
                "samples is NaN. Drop empty batches from the data"
            )
        if tensor.is_floating_point() or tensor.is_complex():
            values = tensor.float() if tensor.element_size() == 1 else tensor
            bad = ~torch.isfinite(values)
            if bool(bad.any()):
                first = tuple(int(i) for i in bad.nonzero()[0])
                raise ValueError(
                    f"{where}: {path} holds {int(bad.sum())} NaN or infinite value(s) of "
                    f"{tensor.numel()}, the first at index {first}; clean the data (e.g. drop "
                    "those rows, or torch.nan_to_num) before fine-tuning"
                )


def check_data(data: Any, pairs: bool) -> bool:
    """Check every batch of a list or tuple of batches now; True when that was done.

    Other iterables (a DataLoader, a generator) are checked batch by batch as they are drawn
    (:func:`check_batch`), so that a one-shot iterator is not used up here.

    Parameters
    ----------
    data : Any
        The training data.
    pairs : bool
        Whether each batch must be an ``(input, target)`` pair.

    Returns
    -------
    bool
        True when every batch was checked here (a list or tuple, or one pair).

    Raises
    ------
    ValueError
        Empty data, or a batch :func:`check_batch` refuses.
    """
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], torch.Tensor | Mapping):
        check_batch(data, "the batch", pairs)  # one (input, target) pair, repeated
        return True
    if not isinstance(data, list | tuple):
        return False
    if not data:
        raise ValueError("data is empty; pass at least one (input, target) batch")
    for i, batch in enumerate(data):
        check_batch(batch, f"batch {i}", pairs)
    return True


def move_to(batch: Any, device: torch.device | None) -> Any:
    """``batch`` with every tensor in it moved to ``device`` (None leaves it where it is).

    Parameters
    ----------
    batch : Any
        A tensor, or a mapping, tuple or list holding tensors.
    device : torch.device or None
        Where to move them.

    Returns
    -------
    Any
        A batch of the same structure.
    """
    if device is None:
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: move_to(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(move_to(v, device) for v in batch)
    return batch


def check_parameters(named: Sequence[tuple[str, torch.Tensor]], when: str) -> None:
    """FinetuneDiverged naming the first parameter holding NaN or infinity, if any.

    Parameters
    ----------
    named : sequence of (str, torch.Tensor)
        The parameters with their names.
    when : str
        When the check runs, for the message (e.g. ``"after step 3"``).
    """
    floating = [(n, p) for n, p in named if p.is_floating_point()]
    if not floating:
        return
    with torch.no_grad():
        flags: dict[torch.device, list[torch.Tensor]] = {}
        for _, p in floating:
            values = p.float() if p.element_size() == 1 else p
            flags.setdefault(p.device, []).append(torch.isfinite(values).all())
        if all(bool(torch.stack(f).all()) for f in flags.values()):
            return
        for name, p in floating:
            values = p.float() if p.element_size() == 1 else p
            bad = int((~torch.isfinite(values)).sum())
            if bad:
                grad = p.grad
                why = (
                    "its gradient was not finite"
                    if grad is not None and not bool(torch.isfinite(grad).all())
                    else "the optimizer step overflowed"
                )
                raise FinetuneDiverged(
                    f"parameter {name!r} holds {bad} NaN or infinite value(s) of {p.numel()} "
                    f"{when} ({why})"
                )
