"""A model's dense baseline at a lower precision: what 2:4 at that precision is measured against.

"Does 2:4 still pay on top of my quantization?" compares ``sparsify(model, dtype=precision)``
with the same model run dense at that precision, not with bf16 alone. :func:`dense_at` builds
that dense model: every eligible ``nn.Linear`` becomes the precision's dense layer, with no 2:4
route offered:

* ``"int4"``: an :class:`~explorer.gpu.modules.int4_linear.Int4Linear` kept on torch's int4
  weight-only kernel (``decode=False``), group-wise scales;
* ``"int8-weights"``: the same with int8 codes, whose dense route is the weight dequantized to
  16 bits (torch has no CUDA int8 weight-only kernel with group scales);
* ``"float8_e4m3fn"``: an :class:`~explorer.gpu.modules.fp8_dense.Fp8DenseLinear` (FP8 weights
  per channel, activations per token, ``torch._scaled_mm``).

Layers are converted one by one (nothing stacked), as the benchmark's dense baselines are
(``benchmarks/quantized_models.py``); a layer the precision's dense layer refuses (a shape off
its alignment, a weight that is not 2:4 for the int4 and int8 codes) stays as it was, and
:class:`PrecisionDense` names it and why.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["DENSE_PRECISIONS", "PrecisionDense", "dense_at", "dense_layer"]

#: Precisions with a dense baseline here, each with what its dense layer runs.
DENSE_PRECISIONS = {
    "int4": "torch's int4 weight-only kernel (group scales)",
    "int8-weights": "int8 codes dequantized to 16 bits, then cuBLAS",
    "float8_e4m3fn": "FP8 weights and activations through torch._scaled_mm",
}


@dataclass
class PrecisionDense:
    """What :func:`dense_at` converted, and what it left as it was.

    Attributes
    ----------
    precision : str
        A key of :data:`DENSE_PRECISIONS`.
    converted : list of str
        The layers now dense at the precision.
    kept : list of tuple of (str, str)
        ``(layer, why)`` for eligible layers left as they were.

    Examples
    --------
    >>> PrecisionDense("int4", ["0"], [("2", "weight is not 2:4")])
    PrecisionDense(int4: 1 layers dense at int4, 1 kept as they were)
    """

    precision: str
    converted: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"PrecisionDense({self.precision}: {len(self.converted)} layers dense at "
            f"{self.precision}, {len(self.kept)} kept as they were)"
        )


def _check_precision(precision: object) -> str:
    if precision not in DENSE_PRECISIONS:
        raise ValueError(
            f"precision {precision!r} has no dense baseline here; expected one of "
            f"{', '.join(DENSE_PRECISIONS)}. Hint: bf16 dense is the model itself"
        )
    return str(precision)


def dense_layer(linear: nn.Linear, precision: str, scales: torch.Tensor | None = None) -> nn.Module:
    """``linear`` run dense at ``precision`` (a new module; ``linear`` is not changed).

    Parameters
    ----------
    linear : nn.Linear
        A CUDA layer; for ``"int4"`` and ``"int8-weights"`` its weight is 2:4 along its input.
    precision : str
        A key of :data:`DENSE_PRECISIONS`.
    scales : torch.Tensor, optional
        ``[out, in / G]`` scales a joint prune-and-quantize recorded for this layer (int4 and
        int8 codes), so weights already on their grid keep their codes; the group size is
        ``in / scales.shape[-1]``. Round to nearest with 128 columns a group without them.

    Returns
    -------
    nn.Module

    Raises
    ------
    ValueError
        An unknown precision, or a layer the precision's dense layer cannot take (the message
        says why).

    Examples
    --------
    >>> dense_layer(torch.nn.Linear(8, 8), "fp4")
    Traceback (most recent call last):
    ...
    ValueError: precision 'fp4' has no dense baseline here; expected one of int4, int8-weights, float8_e4m3fn. Hint: bf16 dense is the model itself
    """
    precision = _check_precision(precision)
    if precision == "float8_e4m3fn":
        from explorer.gpu.modules.fp8_dense import Fp8DenseLinear

        return Fp8DenseLinear(linear, out_dtype=linear.weight.dtype)
    from explorer.gpu.modules.int4_linear import Int4Linear

    fmt = "int4" if precision == "int4" else "int8"
    if scales is None:
        return Int4Linear.from_linear(linear, decode=False, fmt=fmt)
    scales = scales.to(linear.weight.device, torch.float32)
    group = linear.in_features // max(1, scales.shape[-1])
    return Int4Linear.from_linear(linear, group, scales, decode=False, fmt=fmt)


def dense_at(
    model: nn.Module,
    precision: str,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    scales: Mapping[str, torch.Tensor] | None = None,
) -> tuple[nn.Module, PrecisionDense]:
    """A copy of ``model`` with its eligible ``nn.Linear`` layers run dense at ``precision``.

    ``model`` itself is not changed.

    Parameters
    ----------
    model : nn.Module
        The model, on a CUDA GPU in its 16-bit dtype (pruned 2:4 for int4 and int8 codes).
    precision : str
        A key of :data:`DENSE_PRECISIONS`.
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool``: the layers converted (the same filter
        :func:`explorer.sparsify` is given, so both models quantize the same layers); default
        every plain ``nn.Linear``.
    scales : mapping of str to torch.Tensor, optional
        ``{layer: [out, in / G]}`` scales a joint prune-and-quantize recorded
        (``prune(..., quantize=...).scales``).

    Returns
    -------
    tuple of (nn.Module, PrecisionDense)
        The copy and what was converted.

    Raises
    ------
    ValueError
        An unknown precision.

    Examples
    --------
    >>> dense_at(torch.nn.Sequential(torch.nn.Linear(8, 8)), "int2")
    Traceback (most recent call last):
    ...
    ValueError: precision 'int2' has no dense baseline here; expected one of int4, int8-weights, float8_e4m3fn. Hint: bf16 dense is the model itself
    """
    precision = _check_precision(precision)
    scales = scales or {}
    out = copy.deepcopy(model)
    summary = PrecisionDense(precision)
    targets = [
        (fqn, mod)
        for fqn, mod in out.named_modules()
        if type(mod) is nn.Linear and fqn and (filter_fn is None or filter_fn(mod, fqn))
    ]
    for fqn, mod in targets:
        try:
            new = dense_layer(mod, precision, scales.get(fqn))
        except (ValueError, RuntimeError) as exc:
            summary.kept.append((fqn, str(exc).split(". Hint")[0]))
            continue
        parent, _, leaf = fqn.rpartition(".")
        setattr(out.get_submodule(parent) if parent else out, leaf, new)
        summary.converted.append(fqn)
    return out, summary
