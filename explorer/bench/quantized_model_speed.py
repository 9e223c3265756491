"""Your quantized model, measured: bf16 dense, dense at the precision, and 2:4 at it, timed whole.

"Does 2:4 still pay on top of my quantization?" is answered for the user's own pruned model by
:func:`measure_quantized_speed`. It times three copies of the model in one process, in one
execution mode, at each token count:

1. bf16 dense (the model as pruned, dense-masked, in bfloat16);
2. the same model dense at the precision (:func:`explorer.gpu.swap.precision_dense.dense_at`:
   torch's int4 weight-only kernel, int8 codes dequantized, or FP8 dense);
3. ``sparsify(model, dtype=precision)``, which offers each layer the explorer's 2:4 kernel at
   that precision and keeps whichever route measures faster.

The :class:`QuantizedModelSpeed` it returns turns into the quantized ``bench-models`` rows the
trade-off plot reads (:func:`explorer.results.quantized_speed.quantized_speed_row`), named by
the user's model, so its int4 and int8 points are drawn at their measured speed beside their
accuracy (:mod:`explorer.results.quantized_points`). Speed-ups here are ratios of the median
times (as in :func:`explorer.bench.model_speed.measure_model_speed`); the benchmark script
``benchmarks/quantized_models.py`` records medians of paired ratios instead. On a machine
without a CUDA GPU the result says so instead of failing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from explorer import _html
from explorer.bench.model_timer import CudaModelTimer, inputs_at, token_counts
from explorer.gpu.swap.model_timing import input_tokens
from explorer.results.model_speed import DEFAULT_SPEED_MODE, check_speed_mode, model_speed_row
from explorer.results.quantized_speed import PRECISIONS, quantized_speed_row

__all__ = ["QUANT_TIMED", "QuantizedModelSpeed", "QuantizedRun", "measure_quantized_speed"]

#: Precisions a quantized model is timed in: each has a dense baseline and a 2:4 kernel.
QUANT_TIMED = ("int4", "int8-weights", "float8_e4m3fn")


@dataclass(frozen=True)
class QuantizedRun:
    """One token count's three times (median ms).

    Attributes
    ----------
    tokens : int
        Tokens per forward as timed (``batch * seq``).
    batch, seq : int
        The run's shape: sequences and tokens per sequence (feature rows: ``seq`` is 1).
    mode : str
        The mode the forwards really ran in (``"graphs"`` falls back to eager where the
        forward cannot be captured).
    bf16_ms, dense_ms, sparse_ms : float
        bf16 dense, dense at the precision, and 2:4 at it.
    """

    tokens: int
    batch: int
    seq: int
    mode: str
    bf16_ms: float
    dense_ms: float
    sparse_ms: float

    @property
    def over_bf16(self) -> float:
        """2:4 at the precision over bf16 dense."""
        return self.bf16_ms / self.sparse_ms

    @property
    def over_same(self) -> float:
        """2:4 at the precision over the same precision run dense."""
        return self.dense_ms / self.sparse_ms

    @property
    def dense_over_bf16(self) -> float:
        """The precision run dense over bf16 dense."""
        return self.bf16_ms / self.dense_ms


@dataclass(frozen=True)
class QuantizedModelSpeed:
    """A quantized model timed whole: bf16 dense, dense at the precision, 2:4 at it.

    Attributes
    ----------
    precision : str
        One of :data:`QUANT_TIMED`.
    mode : str
        The execution mode asked for.
    tokens : tuple of int
        The token counts asked for, one per entry of :attr:`runs` when measured.
    runs : tuple of QuantizedRun
        One per token count.
    reason : str or None
        Why nothing was timed (no CUDA GPU); then :attr:`runs` is empty.
    swapped : int
        Layers :func:`explorer.sparsify` swapped in the 2:4 copy.
    converted : int
        Layers run dense at the precision in the dense copy.
    gpu : str
        The GPU's name.
    notes : tuple of str
        What the two swaps left as it was, and why.

    Examples
    --------
    >>> QuantizedModelSpeed("int4", "graphs", (16,), reason="no CUDA GPU here")
    QuantizedModelSpeed(int4, no speed, graphs: no CUDA GPU here)
    >>> run = QuantizedRun(16, 1, 16, "graphs", 2.0, 1.0, 0.8)
    >>> QuantizedModelSpeed("int4", "graphs", (16,), (run,), swapped=4, converted=4)
    QuantizedModelSpeed(int4, graphs: 16 tokens 2:4 1.25x over int4 dense, 2.50x over bf16 (int4 dense 2.00x); 4 layers 2:4, 4 dense at int4)
    """

    precision: str
    mode: str
    tokens: tuple[int, ...]
    runs: tuple[QuantizedRun, ...] = ()
    reason: str | None = None
    swapped: int = 0
    converted: int = 0
    gpu: str = ""
    notes: tuple[str, ...] = ()

    @property
    def measured(self) -> bool:
        """Whether there are times (no :attr:`reason`)."""
        return self.reason is None and bool(self.runs)

    def rows(self, config: Mapping) -> list[dict]:
        """The result as store rows for the model ``config["model"]``.

        Measured: two quantized ``bench-models`` rows per token count (the precision dense and
        2:4 at it), with ``of_cell`` and ``group_size`` from ``config`` where it has them.
        Not measured: one skipped ``model-speed`` row per token count, with the reason.

        Parameters
        ----------
        config : Mapping
            The configuration; ``model`` names the rows' model.

        Returns
        -------
        list of dict

        Examples
        --------
        >>> run = QuantizedRun(16, 1, 16, "graphs", 2.0, 1.0, 0.8)
        >>> res = QuantizedModelSpeed("int4", "graphs", (16,), (run,), swapped=4, converted=4)
        >>> [(r["config"]["pattern"], r["metrics"]["speedup_over_bf16"])
        ...  for r in res.rows({"model": "m"})]
        [('dense', 2.0), ('2:4', 2.5)]
        """
        if not self.measured:
            reason = self.reason or "nothing was timed"
            return [model_speed_row(config, n, self.mode, reason=reason) for n in self.tokens]
        model = str(config.get("model") or "model")
        context = {k: config[k] for k in ("of_cell", "group_size", "method") if k in config}
        out = []
        for run in self.runs:
            dense = {
                "ms": run.dense_ms,
                "bf16_dense_ms": run.bf16_ms,
                "speedup_over_bf16": run.dense_over_bf16,
            }
            sparse = {
                "ms": run.sparse_ms,
                "bf16_dense_ms": run.bf16_ms,
                "same_dense_ms": run.dense_ms,
                "speedup_over_bf16": run.over_bf16,
                "speedup_over_same": run.over_same,
            }
            for pattern, metrics in (("dense", dense), ("2:4", sparse)):
                row = quantized_speed_row(
                    model, self.precision, pattern, run.batch, run.seq, run.mode, metrics
                )
                row["config"].update({k: v for k, v in context.items() if k not in row["config"]})
                out.append(row)
        return out

    def record(self, store, config: Mapping) -> list[int]:
        """Write :meth:`rows` to ``store`` (a ``ResultStore``); return the new ids.

        Parameters
        ----------
        store : ResultStore
            The store written to.
        config : Mapping
            As for :meth:`rows`.

        Returns
        -------
        list of int
        """
        return store.record_many(self.rows(config))

    def __repr__(self) -> str:
        if not self.measured:
            return (
                f"QuantizedModelSpeed({self.precision}, no speed, {self.mode}: "
                f"{self.reason or 'nothing timed'})"
            )
        short = PRECISIONS[self.precision]
        parts = []
        for run in self.runs:
            text = (
                f"{run.tokens} tokens 2:4 {run.over_same:.2f}x over {short} dense, "
                f"{run.over_bf16:.2f}x over bf16 ({short} dense {run.dense_over_bf16:.2f}x)"
            )
            parts.append(text + (f" (timed {run.mode})" if run.mode != self.mode else ""))
        return (
            f"QuantizedModelSpeed({self.precision}, {self.mode}: {', '.join(parts)}; "
            f"{self.swapped} layers 2:4, {self.converted} dense at {short})"
        )

    def _repr_html_(self) -> str:
        if not self.measured:
            return _html.table(["", ""], [("no speed", self.reason or "")], caption=repr(self))
        short = PRECISIONS[self.precision]
        rows = [
            (
                run.tokens,
                f"{run.batch}x{run.seq}",
                run.mode,
                f"{run.bf16_ms:.3f}",
                f"{run.dense_ms:.3f}",
                f"{run.sparse_ms:.3f}",
                f"{run.over_same:.2f}x",
                f"{run.over_bf16:.2f}x",
            )
            for run in self.runs
        ]
        header = ["tokens", "run", "mode", "bf16 dense ms", f"{short} dense ms"]
        header += [f"2:4 {short} ms", f"over {short} dense", "over bf16 dense"]
        caption = f"{self!r}{' on ' + self.gpu if self.gpu else ''}"
        return _html.table(header, rows, caption=caption)


def _run_shape(inputs) -> tuple[int, int]:
    """``(batch, seq)`` of one timed input: token ids' shape, else ``(rows, 1)``."""
    ids = inputs.get("input_ids") if isinstance(inputs, Mapping) else None
    if ids is None:
        first = inputs[0] if isinstance(inputs, tuple) and inputs else inputs
        if isinstance(first, torch.Tensor) and first.dim() == 2 and not first.is_floating_point():
            ids = first
    if isinstance(ids, torch.Tensor) and ids.dim() == 2:
        return int(ids.shape[0]), int(ids.shape[1])
    return input_tokens(inputs), 1


def measure_quantized_speed(
    model: nn.Module,
    example,
    precision: str,
    tokens: int | tuple[int, ...] | None = None,
    mode: str = DEFAULT_SPEED_MODE,
    *,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    scales: Mapping[str, torch.Tensor] | None = None,
    timer=None,
    store=None,
    config: Mapping | None = None,
    sparsify_for: tuple[int, ...] | None = None,
) -> QuantizedModelSpeed:
    """Time a pruned model whole at a lower precision: bf16 dense, dense at it, and 2:4 at it.

    Parameters
    ----------
    model : nn.Module
        The pruned (2:4), dense-masked model (any device and dtype; it is not changed: copies in
        bfloat16 on the GPU are timed).
    example
        One input the model takes (a tensor, a tuple of arguments or a dict such as one
        calibration batch), resized to each token count
        (:func:`~explorer.bench.model_timer.inputs_at`).
    precision : {"int4", "int8-weights", "float8_e4m3fn"}
        The precision of the dense baseline and of ``sparsify(model, dtype=precision)``.
    tokens : int or tuple of int, optional
        Tokens per forward; default the example's own count.
    mode : {"eager", "compile", "graphs"}
        How the three models run (``"graphs"``, the default: CUDA graphs, the GPU's time); the
        2:4 copy's routes are chosen for it.
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool``: the layers quantized in both copies.
    scales : mapping of str to torch.Tensor, optional
        The scales a joint prune-and-quantize recorded (``prune(..., quantize="int4").scales``;
        int4 and int8 codes only), so both copies keep the codes the pruning chose.
    timer : optional
        The collaborator that does the GPU work (default
        :class:`~explorer.bench.model_timer.CudaModelTimer`); a test passes a fake.
    store : ResultStore, optional
        Also write the result's rows there, named by ``config["model"]``.
    config : mapping, optional
        The configuration the rows record (``model`` at least).
    sparsify_for : tuple of int, optional
        The token counts the 2:4 copy is sparsified for (default: those timed).

    Returns
    -------
    QuantizedModelSpeed
        Without a CUDA GPU, a result whose ``reason`` says so.

    Raises
    ------
    ValueError
        An unknown precision or mode, or bad token counts.

    Examples
    --------
    >>> model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    >>> res = measure_quantized_speed(model, torch.randn(8, 64), "int4", tokens=(16, 1))
    >>> res.measured or res.reason.startswith("no CUDA GPU here")
    True
    >>> measure_quantized_speed(model, torch.randn(8, 64), "int2")
    Traceback (most recent call last):
    ...
    ValueError: precision 'int2' is not one a quantized model is timed in; expected one of int4, int8-weights, float8_e4m3fn. Hint: for 16-bit models use explorer.bench.model_speed.measure_model_speed
    """
    # 1. Check the arguments before anything is timed.
    if precision not in QUANT_TIMED:
        raise ValueError(
            f"precision {precision!r} is not one a quantized model is timed in; expected one of "
            f"{', '.join(QUANT_TIMED)}. Hint: for 16-bit models use "
            "explorer.bench.model_speed.measure_model_speed"
        )
    check_speed_mode(mode)
    counts, served = token_counts(tokens, sparsify_for, example)
    if precision == "float8_e4m3fn" and scales:
        raise ValueError(
            "scales are int4 and int8 codes' group scales; FP8 takes none. Hint: leave scales out"
        )
    timer = timer if timer is not None else CudaModelTimer()
    # 2. No GPU: a result that says why, never a failure.
    why = timer.unavailable()
    if why is not None:
        result = QuantizedModelSpeed(precision, mode, counts, reason=why)
    else:
        result = _measure(model, example, precision, counts, served, mode, filter_fn, scales, timer)
    if store is not None:
        result.record(store, config or {})
    return result


def _measure(model, example, precision, counts, served, mode, filter_fn, scales, timer):
    # 1. The three copies, on the GPU in bfloat16: bf16 dense, dense at the precision, 2:4 at it.
    bf16 = timer.place(copy.deepcopy(model), torch.bfloat16)
    dense, summary = timer.dense_at(bf16, precision, filter_fn, scales)
    sparse = copy.deepcopy(bf16)
    order = tuple(sorted(set(served), reverse=True))
    report = timer.sparsify(sparse, mode, order, filter_fn, dtype=precision, scales=scales)
    notes = [f"{fqn}: kept bf16 in the {precision} dense copy ({why})" for fqn, why in summary.kept]
    notes += list(report.notes)
    runs = []
    for n in counts:
        # 2. The same input for all three, bf16 dense first; the others in the mode it ran in.
        inputs = timer.place_inputs(inputs_at(example, n), torch.bfloat16)
        how, bf16_ms = timer.forward_ms(bf16, inputs, mode)
        _, dense_ms = timer.forward_ms(dense, inputs, how)
        how_sparse, sparse_ms = timer.forward_ms(sparse, inputs, how)
        batch, seq = _run_shape(inputs)
        runs.append(QuantizedRun(batch * seq, batch, seq, how_sparse, bf16_ms, dense_ms, sparse_ms))
    return QuantizedModelSpeed(
        precision=precision,
        mode=mode,
        tokens=tuple(counts),
        runs=tuple(runs),
        swapped=len(report.swapped),
        converted=len(summary.converted),
        gpu=timer.device_name(),
        notes=tuple(notes),
    )
