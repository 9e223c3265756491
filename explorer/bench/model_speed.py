"""Your model, measured: a pruned model timed whole, dense against its sparsified copy.

:func:`measure_model_speed` is the one whole-model timing the benchmark, the sweeps and the
dashboard call. Given a pruned, dense-masked model and one example input, it makes a
sparsified copy with :func:`explorer.sparsify` (routes chosen for the execution mode), then at
each token count times dense and sparse forwards in that mode (medians of CUDA events after
warm-up, through :mod:`explorer.gpu.swap.model_timing`), with the dense model's GPU-busy share and
the ceiling estimate beside them (:func:`explorer.bench.models.ceiling`). The
:class:`ModelSpeedResult` it returns shows itself in one line and as a table, and turns into
``model-speed`` rows (:mod:`explorer.results.model_speed`); on a machine without a CUDA GPU it
says so instead of failing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from explorer import _html
from explorer.bench.model_timer import CudaModelTimer, inputs_at, token_counts
from explorer.bench.models import ceiling
from explorer.dtypes import dtype_name
from explorer.gpu.swap.model_timing import ModelSpeed, input_tokens
from explorer.results.model_speed import DEFAULT_SPEED_MODE, check_speed_mode, model_speed_row

__all__ = ["TIMED_DTYPES", "ModelSpeedResult", "measure_model_speed"]

#: The dtypes a whole model is timed in (the 16-bit ones the sparse kernels run).
TIMED_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class ModelSpeedResult:
    """A pruned model timed whole, dense against sparse, at one or more token counts.

    Attributes
    ----------
    mode : str
        The execution mode asked for (``"eager"``, ``"compile"`` or ``"graphs"``).
    dtype : str
        The dtype both models ran in.
    tokens : tuple of int
        The token counts asked for, one per entry of :attr:`speeds` when measured.
    speeds : tuple of ModelSpeed
        One :class:`~explorer.gpu.swap.model_timing.ModelSpeed` per token count (its ``tokens``
        are those of the input timed; its ``mode`` the mode the forwards really ran in).
    ceilings : tuple of float or None
        Per token count: the dense time with the swapped layers' time replaced by their
        sparse time (an estimate).
    reason : str or None
        Why there is no speed (no CUDA GPU, a dtype without a sparse kernel); then
        :attr:`speeds` is empty.
    swapped, kept_dense : int
        Layers running sparse, and ``nn.Linear`` layers kept dense.
    gpu : str
        The GPU's name (``""`` without one).

    Examples
    --------
    >>> ModelSpeedResult("graphs", "float16", (4096,), reason="no CUDA GPU here")
    ModelSpeedResult(no speed, graphs: no CUDA GPU here)
    """

    mode: str
    dtype: str
    tokens: tuple[int, ...]
    speeds: tuple[ModelSpeed, ...] = ()
    ceilings: tuple[float | None, ...] = ()
    reason: str | None = None
    swapped: int = 0
    kept_dense: int = 0
    gpu: str = ""
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def measured(self) -> bool:
        """Whether there are times (no :attr:`reason`)."""
        return self.reason is None and bool(self.speeds)

    def rows(self, config: Mapping) -> list[dict]:
        """One ``model-speed`` row per token count asked for (the reason where none was timed).

        Parameters
        ----------
        config : Mapping
            The cell's configuration, copied into each row.

        Returns
        -------
        list of dict

        Examples
        --------
        >>> res = ModelSpeedResult("eager", "float16", (16, 4096), reason="no CUDA GPU here")
        >>> [(r["config"]["tokens"], r["status"], r["error"]) for r in res.rows({"model": "m"})]
        [(16, 'skipped', 'no CUDA GPU here'), (4096, 'skipped', 'no CUDA GPU here')]
        """
        base = {**config, "dtype": config.get("dtype", self.dtype)}
        if not self.measured:
            reason = self.reason or "nothing was timed"
            return [model_speed_row(base, n, self.mode, reason=reason) for n in self.tokens]
        out = []
        for n, speed, ceil in zip(self.tokens, self.speeds, self.ceilings, strict=True):
            metrics = {
                "dense_ms": speed.dense_ms,
                "sparse_ms": speed.sparse_ms,
                "tokens_timed": speed.tokens,
                "timed_as": speed.mode,
                "dense_gpu_busy": speed.dense_gpu_busy,
                "host_bound": speed.host_bound,
                "layer_estimate": speed.layer_estimate,
                "ceiling": ceil,
                "swapped": self.swapped,
                "kept_dense": self.kept_dense,
            }
            out.append(model_speed_row(base, n, self.mode, metrics))
        return out

    def record(self, store, config: Mapping) -> list[int]:
        """Write :meth:`rows` to ``store`` with this process's provenance; return the new ids.

        ``store`` is a :class:`~explorer.results.store.ResultStore`; the ids are the new rows'.

        Parameters
        ----------
        store : ResultStore
            The store written to.
        config : Mapping
            The cell's configuration, copied into each row.

        Returns
        -------
        list of int
        """
        return store.record_many(self.rows(config))

    def __repr__(self) -> str:
        if not self.measured:
            return f"ModelSpeedResult(no speed, {self.mode}: {self.reason or 'nothing timed'})"
        parts = []
        for speed, ceil in zip(self.speeds, self.ceilings, strict=True):
            text = f"{speed.tokens} tokens {speed.speedup:.2f}x"
            if speed.mode != self.mode:
                text += f" (timed {speed.mode})"
            if ceil:
                text += f" (ceiling {ceil:.2f}x)"
            parts.append(text)
        busy = self.speeds[0].dense_gpu_busy
        tail = f", dense GPU busy {busy:.0%}" if busy is not None else ""
        return (
            f"ModelSpeedResult({self.mode}, {self.dtype}: {', '.join(parts)}{tail}; "
            f"{self.swapped} layers sparse, {self.kept_dense} dense)"
        )

    def _repr_html_(self) -> str:
        if not self.measured:
            return _html.table(["", ""], [("no speed", self.reason or "")], caption=repr(self))
        rows = [
            (
                speed.tokens,
                speed.mode,
                f"{speed.dense_ms:.3f}",
                f"{speed.sparse_ms:.3f}",
                f"{speed.speedup:.2f}x",
                f"{ceil:.2f}x" if ceil else "",
                "" if speed.dense_gpu_busy is None else f"{speed.dense_gpu_busy:.0%}",
                speed.advice(),
            )
            for speed, ceil in zip(self.speeds, self.ceilings, strict=True)
        ]
        header = ["tokens", "mode", "dense ms", "sparse ms", "speedup (measured)"]
        header += ["ceiling (estimate)", "dense GPU busy", "advice"]
        caption = f"{self!r}{' on ' + self.gpu if self.gpu else ''}"
        return _html.table(header, rows, caption=caption)


def measure_model_speed(
    model: nn.Module,
    example,
    tokens: int | tuple[int, ...] | None = None,
    mode: str = DEFAULT_SPEED_MODE,
    *,
    dtype: torch.dtype | str = torch.float16,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    timer=None,
    store=None,
    config: Mapping | None = None,
    sparsify_for: tuple[int, ...] | None = None,
) -> ModelSpeedResult:
    """Time a pruned model whole: dense against a sparsified copy, in one execution mode.

    Parameters
    ----------
    model : nn.Module
        The pruned, dense-masked model (any device; it is not changed: copies are timed).
    example
        One input the model takes (a tensor, a tuple of arguments or a dict such as one
        calibration batch), resized to each token count (:func:`~explorer.bench.model_timer.inputs_at`).
    tokens : int or tuple of int, optional
        Tokens per forward (batch x sequence); default the example's own count.
    mode : {"eager", "compile", "graphs"}
        How both models run: eager calls, ``torch.compile`` (default mode) or CUDA graphs
        (``"graphs"``, the default: the GPU's time alone). The sparse layers' routes are
        chosen for the same mode.
    dtype : torch.dtype or str
        float16 or bfloat16: both models run in it.
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool``: the layers :func:`explorer.sparsify` may swap.
    timer : optional
        The collaborator that does the GPU work (default :class:`CudaModelTimer`); a test
        passes a fake with the same methods.
    store : ResultStore, optional
        Also write the result's ``model-speed`` rows there, with ``config``.
    config : mapping, optional
        The configuration the rows record (model, method, pattern, layers, ...).
    sparsify_for : tuple of int, optional
        The token counts the sparse copy is sparsified for (default: those timed). A model
        served at several counts is sparsified for all of them at once, and a layer (with the
        gate/up and q/k/v fusions) is swapped when any of them gains, so timing one count of
        such a model needs them all here.

    Returns
    -------
    ModelSpeedResult
        Without a CUDA GPU, a result whose ``reason`` says so.

    Raises
    ------
    ValueError
        An unknown mode, a dtype other than float16 and bfloat16, or bad token counts.

    Examples
    --------
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    >>> result = measure_model_speed(model, torch.randn(8, 64), tokens=(4096, 16))
    >>> result.measured or result.reason.startswith("no CUDA GPU here")
    True
    """
    # 1. Check the arguments before anything is timed.
    check_speed_mode(mode)
    name = dtype_name(dtype)
    if name not in TIMED_DTYPES:
        raise ValueError(
            f"dtype {name!r} is not one a whole model is timed in; expected one of "
            f"{', '.join(TIMED_DTYPES)}. Hint: time the model in float16 or bfloat16"
        )
    counts, served = token_counts(tokens, sparsify_for, example)
    timer = timer if timer is not None else CudaModelTimer()
    # 2. No GPU: a result that says why, never a failure.
    why = timer.unavailable()
    if why is not None:
        result = ModelSpeedResult(mode, name, counts, reason=why)
    else:
        result = _measure(
            model, example, counts, served, mode, getattr(torch, name), filter_fn, timer
        )
    if store is not None:
        result.record(store, config or {})
    return result


def _measure(model, example, counts, served, mode, dtype, filter_fn, timer) -> ModelSpeedResult:
    # 1. The dense model and its sparsified copy, both on the GPU in the dtype timed.
    dense = timer.place(copy.deepcopy(model), dtype)
    sparse = copy.deepcopy(dense)
    report = timer.sparsify(sparse, mode, tuple(sorted(set(served), reverse=True)), filter_fn)
    speeds, ceilings = [], []
    for n in counts:
        # 2. The same input for both, dense timed first; its GPU-busy share from eager calls.
        inputs = timer.place_inputs(inputs_at(example, n), dtype)
        how, dense_ms = timer.forward_ms(dense, inputs, mode)
        busy = timer.gpu_busy(dense, inputs)
        how_sparse, sparse_ms = timer.forward_ms(sparse, inputs, how)
        # 3. The ceiling: the dense time with only the swapped layers' time changed.
        timed = input_tokens(inputs)
        est = timer.layer_estimate(report, timed, how_sparse, dtype)
        speeds.append(
            ModelSpeed(
                timed, how_sparse, dense_ms, sparse_ms, busy, est[0] / est[1] if est else None
            )
        )
        ceilings.append(ceiling(dense_ms, *est) if est else None)
    return ModelSpeedResult(
        mode=mode,
        dtype=dtype_name(dtype),
        tokens=tuple(counts),
        speeds=tuple(speeds),
        ceilings=tuple(ceilings),
        swapped=len(report.swapped),
        kept_dense=len(report.skipped),
        gpu=timer.device_name(),
        notes=tuple(report.notes),
    )
