"""Whole-model forward times, dense against sparse, the way the model is run.

A per-layer table is a diagnosis; what a user sees is the whole forward. :func:`time_forward`
times one model on one input the way the chosen execution mode runs it (eager: back-to-back
calls measured with CUDA events, host time included; graphs: one forward captured in a CUDA
graph and replayed), and :func:`gpu_busy` says which share of an eager forward's wall time the
GPU is busy. :class:`ModelSpeed` holds one dense/sparse pair at one token count and says when
the dense model is host-bound (GPU busy below :data:`HOST_BOUND_BELOW` of the wall time), where
no layer speedup can show until the host's calls are taken away (CUDA graphs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from explorer import _html

__all__ = [
    "HOST_BOUND_BELOW",
    "ModelSpeed",
    "call_model",
    "gpu_busy",
    "input_tokens",
    "time_forward",
]

#: A forward whose GPU is busy for less than this share of its wall time is host-bound.
HOST_BOUND_BELOW = 0.8


def call_model(model: torch.nn.Module, inputs) -> object:
    """Call ``model`` on ``inputs`` without autograd.

    ``model(**inputs)`` for a mapping, ``model(*inputs)`` for a tuple, else ``model(inputs)``.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    inputs : mapping, tuple or object
        Keyword arguments, positional arguments, or the one argument.

    Returns
    -------
    object
        What the model returns.

    Examples
    --------
    >>> call_model(torch.nn.Linear(4, 2), torch.ones(3, 4)).shape
    torch.Size([3, 2])
    """
    with torch.no_grad():
        if isinstance(inputs, Mapping):
            return model(**inputs)
        if isinstance(inputs, tuple):
            return model(*inputs)
        return model(inputs)


def input_tokens(inputs) -> int:
    """Tokens per call of an example input: ``input_ids``' elements, else a tensor's rows.

    Parameters
    ----------
    inputs : mapping, tuple or torch.Tensor
        The example input, as :func:`call_model` takes it.

    Returns
    -------
    int
        Tokens per call.

    Raises
    ------
    ValueError
        No tensor to count in ``inputs``.

    Examples
    --------
    >>> input_tokens({"input_ids": torch.zeros(4, 1024, dtype=torch.long)})
    4096
    >>> input_tokens(torch.zeros(16, 1, 2048))
    16
    """
    if isinstance(inputs, Mapping):
        ids = inputs.get("input_ids")
        if isinstance(ids, torch.Tensor):
            return int(ids.numel())
        inputs = tuple(v for v in inputs.values() if isinstance(v, torch.Tensor))
    if isinstance(inputs, tuple):
        inputs = next((v for v in inputs if isinstance(v, torch.Tensor)), None)
    if not isinstance(inputs, torch.Tensor) or inputs.dim() == 0:
        raise ValueError(
            f"cannot count the tokens of example input {type(inputs).__name__}; expected a "
            "tensor [..., features], a tuple of arguments or a dict with input_ids. Hint: "
            "example_inputs={'input_ids': ids}."
        )
    if inputs.dtype in (torch.long, torch.int32):
        return int(inputs.numel())  # token ids
    return int(inputs.numel() // max(1, inputs.shape[-1]))


def time_forward(model: torch.nn.Module, inputs, mode: str, iters: int = 5, reps: int = 5) -> float:
    """Median milliseconds of one forward of ``model`` on ``inputs`` in ``mode``.

    ``"graphs"`` captures ``iters`` forwards in one CUDA graph and replays it (GPU time; the
    host's time is gone, as under ``mode="reduce-overhead"``); any other mode times
    back-to-back eager calls with CUDA events (wall time, the host's included where it is the
    longer).

    Parameters
    ----------
    model : torch.nn.Module
        The model, on a CUDA device.
    inputs : mapping, tuple or object
        Its input, as :func:`call_model` takes it.
    mode : str
        ``"graphs"`` for CUDA-graph replay; any other mode times eager calls.
    iters : int, default 5
        Forwards per timed repetition.
    reps : int, default 5
        Timed repetitions; the median is kept.

    Returns
    -------
    float
        Milliseconds per forward.

    Raises
    ------
    RuntimeError
        ``"graphs"`` and the forward cannot be captured (a dynamic cache, a host sync).
    """
    from explorer.gpu.routes.timing import eager_ms, graph_ms

    def forward():
        return call_model(model, inputs)

    if mode == "graphs":
        return graph_ms(forward, iters=iters, reps=reps)
    return eager_ms(forward, iters=iters, reps=reps, warmup=3)


def gpu_busy(model: torch.nn.Module, inputs, calls: int = 3) -> float | None:
    """Share of the wall time of ``calls`` back-to-back eager forwards that the GPU is busy.

    Kernel time summed by the profiler over CUDA-event wall time; None if unavailable.

    Parameters
    ----------
    model : torch.nn.Module
        The model, on a CUDA device.
    inputs : mapping, tuple or object
        Its input, as :func:`call_model` takes it.
    calls : int, default 3
        Forwards profiled.

    Returns
    -------
    float or None
        The GPU's busy share of the wall time, or None.
    """
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        call_model(model, inputs)
    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                call_model(model, inputs)
            end.record()
            end.synchronize()
    except RuntimeError:
        return None
    wall_us = start.elapsed_time(end) * 1e3
    busy_us = 0.0
    for evt in prof.key_averages():
        busy_us += getattr(evt, "self_device_time_total", 0.0) or 0.0
    if wall_us <= 0 or busy_us <= 0:
        return None
    return min(1.0, busy_us / wall_us)


@dataclass(frozen=True)
class ModelSpeed:
    """One whole-model measurement: the same input, dense then sparse, in one mode.

    Attributes
    ----------
    tokens : int
        Tokens per call of the input.
    mode : {"eager", "graphs"}
        How both forwards ran (see :func:`time_forward`).
    dense_ms, sparse_ms : float
        Median forward times, milliseconds.
    dense_gpu_busy : float or None
        Share of the dense forward's eager wall time the GPU is busy.
    layer_estimate : float or None
        The per-layer estimate at these tokens (summed layer times only; an estimate).

    Examples
    --------
    >>> ModelSpeed(16, "eager", 10.0, 12.5, 0.42, 1.36)
    ModelSpeed(16 tokens, eager: 0.80x measured, layers 1.36x (estimate), dense host-bound: GPU busy 42%)
    """

    tokens: int
    mode: str
    dense_ms: float
    sparse_ms: float
    dense_gpu_busy: float | None = None
    layer_estimate: float | None = None

    @property
    def speedup(self) -> float:
        """Dense time over sparse time."""
        return self.dense_ms / self.sparse_ms

    @property
    def host_bound(self) -> bool:
        """True when the dense eager forward keeps the GPU busy less than 80% of the time."""
        return self.dense_gpu_busy is not None and self.dense_gpu_busy < HOST_BOUND_BELOW

    def advice(self) -> str:
        """What to do about a host-bound or slower result (empty when there is nothing to do)."""
        if self.host_bound and self.mode != "graphs":
            return (
                "the dense model is host-bound here: the host's calls, not the GPU, set the "
                "pace. Compile with CUDA graphs (torch.compile(model, mode='reduce-overhead')) "
                "to see the GPU gain"
            )
        if self.speedup < 0.98:
            return "slower than dense in this run: file the report with the measured layer table"
        return ""

    def __repr__(self) -> str:
        parts = [f"{self.tokens} tokens, {self.mode}: {self.speedup:.2f}x measured"]
        if self.layer_estimate:
            parts.append(f"layers {self.layer_estimate:.2f}x (estimate)")
        if self.dense_gpu_busy is not None:
            state = "host-bound" if self.host_bound else "GPU-bound"
            parts.append(f"dense {state}: GPU busy {self.dense_gpu_busy:.0%}")
        return f"ModelSpeed({', '.join(parts)})"

    def _repr_html_(self) -> str:
        busy = "" if self.dense_gpu_busy is None else f"{self.dense_gpu_busy:.0%}"
        rows = [
            ("tokens", self.tokens),
            ("mode", self.mode),
            ("dense ms", f"{self.dense_ms:.3f}"),
            ("sparse ms", f"{self.sparse_ms:.3f}"),
            ("speedup (measured)", f"{self.speedup:.2f}x"),
            ("layers (estimate)", f"{self.layer_estimate:.2f}x" if self.layer_estimate else ""),
            ("dense GPU busy", busy),
            ("advice", self.advice()),
        ]
        return _html.table(["whole model", ""], rows)
