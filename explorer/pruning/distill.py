"""Masked distillation: the dense model teaches its pruned copy.

Used by :func:`explorer.pruning.finetune` when it is given a ``teacher``. Each batch is an
input only (as for calibration); the teacher's output on it is the target:

* a language model's logits (an output with ``.logits``) are matched with the KL divergence
  ``KL(softmax(t / T) || softmax(s / T)) * T^2`` over every token position;
* any other output (hidden states, sentence embeddings) is matched by the mean squared error,
  divided by the teacher output's mean square so the loss does not depend on its scale.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .finetune_checks import check_positive

__all__ = ["check_teacher", "check_temperature", "distillation_loss", "forward"]


def forward(model: nn.Module, batch: Any) -> Any:
    """``model(batch)``, ``model(**batch)`` for a mapping, ``model(*batch)`` for a tuple.

    Parameters
    ----------
    model : torch.nn.Module
        The model to call.
    batch : Any
        A tensor, a dict of keyword arguments or a tuple or list of positional arguments.

    Returns
    -------
    Any
        The model's output.
    """
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, tuple | list):
        return model(*batch)
    return model(batch)


def _tensor(output: Any) -> tuple[torch.Tensor, bool]:
    """The tensor to match and whether it is logits."""
    if hasattr(output, "logits") and isinstance(output.logits, torch.Tensor):
        return output.logits, True
    if isinstance(output, torch.Tensor):
        return output, False
    if hasattr(output, "last_hidden_state"):
        return output.last_hidden_state, False
    if isinstance(output, tuple | list) and output and isinstance(output[0], torch.Tensor):
        return output[0], False
    raise TypeError(
        f"cannot find logits or a tensor in the model output of type {type(output).__name__}; "
        "pass loss_fn and (input, target) batches instead of a teacher"
    )


def check_temperature(temperature: Any) -> float:
    """The softmax temperature as a float, if it is a finite number above 0.

    Logits are divided by it and the loss multiplied by its square: 0 divides by zero, infinity
    flattens every distribution to uniform (and scales the loss to infinity), NaN poisons
    everything, and a negative temperature reverses the softmax, teaching the student the
    teacher's least likely tokens.

    Parameters
    ----------
    temperature : Any
        The value given.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Naming the value and a usual one.

    Examples
    --------
    >>> check_temperature(2)
    2.0
    >>> check_temperature(-1.0)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be a finite number above 0, got -1.0; e.g. temperature=1.0 (the logits as they are) or 2.0 (softer targets)
    """
    return check_positive(
        temperature, "temperature", "1.0 (the logits as they are) or 2.0 (softer targets)"
    )


def distillation_loss(student_out: Any, teacher_out: Any, temperature: float = 1.0) -> torch.Tensor:
    """The loss between a student's and a teacher's outputs on the same batch.

    Parameters
    ----------
    student_out, teacher_out : Any
        The two models' outputs: logits (an output with ``.logits``), a tensor, an output with
        ``.last_hidden_state``, or a tuple whose first element is a tensor.
    temperature : float
        Softmax temperature for logits, a finite number above 0 (see
        :func:`check_temperature`).

    Returns
    -------
    torch.Tensor
        A scalar: ``KL * T^2`` for logits, the normalised mean squared error otherwise.

    Examples
    --------
    >>> t = torch.tensor([[1.0, 2.0, 3.0]])
    >>> float(distillation_loss(t, t))
    0.0
    """
    temperature = check_temperature(temperature)
    s, is_logits = _tensor(student_out)
    t, _ = _tensor(teacher_out)
    if s.shape != t.shape:
        raise ValueError(
            f"student output shape {tuple(s.shape)} differs from the teacher's {tuple(t.shape)}; "
            "the teacher must be the dense version of the same model"
        )
    t = t.detach().float()
    s = s.float()
    if is_logits:
        vocab = s.shape[-1]
        log_s = F.log_softmax(s.reshape(-1, vocab) / temperature, dim=-1)
        log_t = F.log_softmax(t.reshape(-1, vocab) / temperature, dim=-1)
        kl = F.kl_div(log_s, log_t, log_target=True, reduction="batchmean")
        return kl * temperature**2
    return F.mse_loss(s, t) / t.square().mean().clamp_min(1e-12)


def check_teacher(model: nn.Module, teacher: Any) -> nn.Module:
    """The teacher, checked: a separate module that shares no parameter with the student.

    Parameters
    ----------
    model : torch.nn.Module
        The student being fine-tuned.
    teacher : Any
        The value given as the teacher.

    Returns
    -------
    torch.nn.Module
        ``teacher``, unchanged.
    """
    if not isinstance(teacher, nn.Module):
        raise TypeError(
            f"teacher must be the dense torch.nn.Module, got {type(teacher).__name__}; keep a copy "
            "before pruning: teacher = copy.deepcopy(model)"
        )
    student = {id(p) for p in model.parameters()}
    if teacher is model or any(id(p) in student for p in teacher.parameters()):
        raise ValueError(
            "the teacher shares parameters with the model being fine-tuned; pass a copy of the "
            "dense model made before pruning (teacher = copy.deepcopy(model))"
        )
    return teacher
