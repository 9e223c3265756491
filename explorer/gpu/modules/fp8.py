"""FP8 (e4m3) quantization for the sparse FP8 flow, and a reference that runs on any device.

Weights: per output channel, ``scale = max|w| / 448`` (448 is e4m3's largest finite value) and
``q = fp8(w / scale)``; zeros stay zeros, so a 2:4 weight stays 2:4. Activations: dynamically per
token, the same rule per row. An all-zero row gets scale 1 (never 0 or NaN). The FP8 matmul sums
the products of the fp8 values in float32; both scales and the bias are applied after, and the
result is rounded to the output dtype. :func:`fp8_reference` computes exactly that in plain torch,
so FP8 accuracy can be measured on a CPU; :class:`Fp8ReferenceLinear` is a drop-in layer.

This module imports only torch (and :mod:`explorer.gpu.modules.reference`, which imports only
torch); the CUDA kernel of the activation quantization is imported when a CUDA input first needs it.
"""

from __future__ import annotations

import torch

from explorer.gpu.modules.reference import QuantReferenceLinear, swap_reference_linears

__all__ = [
    "FP8",
    "FP8_MAX",
    "Fp8ReferenceLinear",
    "check_quantized_weight",
    "fp8_reference",
    "fp8_reference_model",
    "quantize_activations",
    "quantize_weight",
    "row_scales",
]

#: The FP8 format of the sparse flow (4 exponent bits, 3 mantissa bits, no infinities).
FP8 = torch.float8_e4m3fn
#: Its largest finite value.
FP8_MAX = 448.0


def row_scales(t: torch.Tensor) -> torch.Tensor:
    """One float32 scale per row of ``t``: ``max|row| / 448``, or 1 for an all-zero row.

    Parameters
    ----------
    t : torch.Tensor
        The tensor, rows along the last dimension.

    Returns
    -------
    torch.Tensor
        float32 scales, ``t.shape[:-1]``.

    Examples
    --------
    >>> row_scales(torch.tensor([[0.0, -896.0], [0.0, 0.0]])).tolist()
    [2.0, 1.0]
    """
    # 1. The largest magnitude of each row, in float32.
    amax = t.detach().float().abs().amax(dim=-1)
    # 2. Map it onto 448; a row whose scale would be 0 (all zeros, or below float32's range
    #    once divided) gets 1, so dividing by the scale never makes a NaN.
    scale = amax / FP8_MAX
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def _to_fp8(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``t / scale`` per row, clamped to +-448 (e4m3fn has no infinity) and cast to fp8."""
    return (t.float() / scale[..., None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8)


def quantize_weight(
    weight: torch.Tensor, name: str = "weight"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``weight[out, in]`` to fp8 e4m3 with one float32 scale per output channel.

    Parameters
    ----------
    weight : torch.Tensor
        2-D ``(out_features, in_features)``, finite.
    name : str
        What the weight is (a layer's name), for the error message.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``q`` (float8_e4m3fn, same shape, zeros kept) and ``scale`` (float32 ``[out]``), with
        ``q.float() * scale[:, None]`` close to ``weight``.

    Raises
    ------
    ValueError
        A weight that is not 2-D, or holds Inf or NaN.

    Examples
    --------
    >>> q, s = quantize_weight(torch.tensor([[0.0, 1.0, -2.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    >>> q.float().tolist(), (s * 448).tolist()
    ([[0.0, 224.0, -448.0, 0.0], [0.0, 0.0, 0.0, 0.0]], [2.0, 448.0])
    """
    if weight.dim() != 2:
        raise ValueError(
            f"{name} must be 2-D (out, in), got shape {tuple(weight.shape)}. "
            "Hint: pass an nn.Linear's weight."
        )
    w = weight.detach().float()
    bad = ~torch.isfinite(w)
    if bool(bad.any()):
        row, col = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} holds {int(bad.sum())} non-finite value(s) (first {w[row, col].item()} at "
            f"[{row}, {col}]); fp8 quantization needs finite weights. Hint: find where the "
            "weights went Inf/NaN (training, loading) or keep this layer out with filter_fn."
        )
    scale = row_scales(w)
    return _to_fp8(w, scale), scale


def check_quantized_weight(
    codes: torch.Tensor, scale: torch.Tensor, shape: tuple[int, int], name: str = "weight"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a weight quantized elsewhere (a checkpoint's codes and scales) before it is used.

    The parts must be what :func:`quantize_weight` returns for a weight of ``shape``; they are
    used as they are, never quantized again.

    Parameters
    ----------
    codes : torch.Tensor
        float8_e4m3fn ``[out, in]``.
    scale : torch.Tensor
        float32 ``[out]``, finite and positive.
    shape : tuple of int
        ``(out_features, in_features)`` of the layer they are for.
    name : str
        What the weight is (a layer's name), for the error message.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``codes`` and ``scale``, contiguous.

    Raises
    ------
    ValueError
        A part of the wrong type, dtype or shape, or a scale that is not finite and positive.

    Examples
    --------
    >>> q, s = quantize_weight(torch.tensor([[0.0, 1.0, 0.0, -2.0]]))
    >>> check_quantized_weight(q, s, (1, 4))[1].tolist() == s.tolist()
    True
    >>> check_quantized_weight(q, s * 0, (1, 4))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the scales of weight must be finite and positive; 1 of 1 are not (row 0: 0.0)...
    """
    rows = int(shape[0])
    for part, t, dtype, want in (
        ("codes", codes, FP8, (rows, int(shape[1]))),
        ("scales", scale, torch.float32, (rows,)),
    ):
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != want:
            got = (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(
                f"the {part} of {name} must be a {dtype} tensor of shape {want}, got {got}. "
                "Hint: pass what quantize_weight returns for this layer's weight."
            )
    bad = ~(torch.isfinite(scale) & (scale > 0))
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"the scales of {name} must be finite and positive; {int(bad.sum())} of {rows} are "
            f"not (row {row}: {float(scale[row])}). Hint: the stored scales were altered; use "
            "a good copy, or quantize the weight again with quantize_weight."
        )
    return codes.contiguous(), scale.contiguous()


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x[..., in]`` to fp8 e4m3 with one float32 scale per token (row), dynamically.

    On a CUDA GPU of compute capability 8.9 or newer, rows of a multiple of 8 values run as one
    CUDA kernel (:func:`explorer.gpu.cuda.fp8_quant.quantize_rows_fp8`: the same scales and fp8
    bits as the plain steps, eagerly, inside a CUDA-graph capture and inside a compiled model's
    op alike). Other CUDA inputs run as one fused pass (``torch.compile`` of the same steps,
    made once per process). Inside a CUDA-graph capture that pass runs only for an input like
    one it has already run on outside a capture (:func:`fused_signature`), since nothing may be
    compiled during a capture. Elsewhere it runs as plain torch calls: on a CPU, inside a model
    being compiled (whose compiler fuses them with the step before), in a capture of an input
    never seen before, and where compiling failed. All give the same scales; the fused pass's
    fp8 values agree except where a quotient lands on a rounding boundary of the fp8 grid (its
    division is correct to 2 ulp of float32, not correctly rounded), which moves that value by
    one fp8 step (the GPU tests allow one value in a thousand).

    Parameters
    ----------
    x : torch.Tensor
        The activations, ``(..., in_features)``.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``q`` (float8_e4m3fn, same shape) and ``scale`` (float32, ``x.shape[:-1]``).

    Examples
    --------
    >>> q, s = quantize_activations(torch.tensor([[1.0, -0.5], [0.0, 0.0]]))
    >>> q.float().tolist(), (s * 448).tolist()
    ([[448.0, -224.0], [0.0, 0.0]], [1.0, 448.0])
    """
    if x.is_cuda and not torch.compiler.is_compiling() and x.numel():
        found = _kernel_quantize(x.reshape(-1, x.shape[-1]))
        if found is not None:
            return found[0].view(x.shape), found[1].view(x.shape[:-1])
        capturing = _capturing()
        fused = _FUSED.get("fn") if capturing else _fused_quantizer()
        if fused is not None:
            # one compiled kernel per signature: any rows, one contiguous 2-D layout
            x2 = x.reshape(-1, x.shape[-1])
            x2 = x2 if x2.is_contiguous() else x2.contiguous()
            signature = fused_signature(x2)
            if not capturing or signature in _WARM:  # nothing may compile in a capture
                q, scale = fused(x2, capturing)
                _WARM.add(signature)
                return q.view(x.shape), scale.view(x.shape[:-1])
    return _quantize_rows(x)


def _kernel_quantize(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The CUDA kernel's ``(q, scale)`` of ``x2``, or None (no CuPy, or an input it does not take)."""
    ok = _KERNEL.get("ok")
    if ok is False:
        return None
    try:
        from explorer.gpu.cuda.fp8_quant import quantize_rows_fp8

        found = quantize_rows_fp8(x2)
    except ImportError:  # no CuPy: the fused pass or the plain steps
        _KERNEL["ok"] = False
        return None
    except Exception as exc:  # the kernel did not build here (never after it once ran)
        if ok:
            raise
        import warnings

        _KERNEL["ok"] = False
        warnings.warn(
            f"the fp8 quantization kernel could not run ({type(exc).__name__}: "
            f"{str(exc)[:160]}); using the fused torch pass, which may take several passes "
            "inside a compiled model. Hint: check that CuPy matches the CUDA driver.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    if found is not None:
        _KERNEL["ok"] = True
    return found


_KERNEL: dict[str, bool] = {}


def fused_signature(x2: torch.Tensor) -> tuple:
    """What the fused pass compiles a kernel for, beyond the sizes (which are dynamic).

    The dtype of the contiguous 2-D input ``x2`` and which of its sizes are 1. At most six kernels
    in all (three dtypes, one row or more), below torch.compile's recompile limit of eight. An input
    whose signature has run outside a CUDA-graph capture runs fused inside one.

    Parameters
    ----------
    x2 : torch.Tensor
        The contiguous 2-D input.

    Returns
    -------
    tuple
        ``(dtype, rows == 1, columns == 1)``.

    Examples
    --------
    >>> fused_signature(torch.zeros(7, 64)) == fused_signature(torch.zeros(4096, 64))
    True
    >>> fused_signature(torch.zeros(1, 64)) == fused_signature(torch.zeros(2, 64))
    False
    """
    return (x2.dtype, x2.shape[0] == 1, x2.shape[1] == 1)


def _quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`row_scales` and the fp8 values of ``x``: the steps the fused pass compiles."""
    scale = row_scales(x)
    return _to_fp8(x, scale), scale


_FUSED: dict[str, object] = {}
_WARM: set[tuple] = set()  # fused_signature()s the fused pass has run on


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _fused_quantizer():
    """``torch.compile`` of :func:`_quantize_rows`, or None once compiling it has failed.

    Compiled with dynamic shapes (one kernel for every row count); None once compiling it has failed
    in this process (no Triton, an old GPU).

    Not ``fullgraph``: past torch.compile's recompile limit an input of a new kind runs the
    plain steps (the same values) while the kernels already compiled keep serving theirs.
    """
    if "fn" not in _FUSED:
        _FUSED["fn"] = _checked(torch.compile(_quantize_rows, dynamic=True))
    return _FUSED["fn"]


def _checked(compiled):
    """``compiled`` as ``run(x2, capturing)``, falling back to the plain steps.

    Inside a CUDA-graph capture it may not compile (an input that would need a new kernel takes the
    plain steps); elsewhere the first failure falls back for good to the plain steps, with a
    warning.
    """

    def run(x: torch.Tensor, capturing: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if capturing:
            try:
                with torch.compiler.set_stance("fail_on_recompile"):
                    return compiled(x)
            except Exception:  # it would have compiled: nothing ran on the GPU yet
                return _quantize_rows(x)
        try:
            return compiled(x)
        except Exception as exc:  # a compiler failure: the plain steps give the same values
            import warnings

            _FUSED["fn"] = None
            warnings.warn(
                f"the fused fp8 activation quantization could not be compiled "
                f"({type(exc).__name__}: {str(exc)[:160]}); using plain torch calls, which "
                "make several passes over the input. Hint: install Triton (it comes with "
                "torch's CUDA wheels) for the fused pass.",
                RuntimeWarning,
                stacklevel=3,
            )
            return _quantize_rows(x)

    return run


def fp8_reference(
    x: torch.Tensor,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """What an FP8 matmul with row-wise scales computes for ``x @ W^T + bias``.

    Parameters
    ----------
    x : torch.Tensor
        Activations ``[..., in]`` in a floating dtype; quantized here per token.
    w_q, w_scale : torch.Tensor
        The weight from :func:`quantize_weight`: fp8 ``[out, in]`` and float32 ``[out]``.
    bias : torch.Tensor, optional
        ``[out]``, added after both scales.
    out_dtype : torch.dtype, optional
        The dtype the result is rounded to (default: ``x``'s).

    Returns
    -------
    torch.Tensor
        ``[..., out]``: the fp8 products summed in float32, times the weight scale of the column
        and the token scale of the row, plus the bias (in float32), rounded to ``out_dtype``.

    Examples
    --------
    >>> w_q, w_s = quantize_weight(torch.tensor([[1.0, 2.0], [0.0, -1.0]]))
    >>> y = fp8_reference(torch.tensor([[1.0, 1.0]]), w_q, w_s, torch.tensor([0.5, 0.0]))
    >>> [round(v, 5) for v in y[0].tolist()]  # 1 + 2 + 0.5 and -1, up to float32 scales
    [3.5, -1.0]
    """
    lead = x.shape[:-1]
    # 1. Quantize the activations per token (dynamic scales).
    x_q, x_scale = quantize_activations(x.reshape(-1, x.shape[-1]))
    # 2. Dequantize nothing yet: fp8 values and their products are exact in float32; the sum
    #    is accumulated in float32, as the tensor cores do.
    acc = x_q.float() @ w_q.float().t()
    # 3. Both scales (and the bias) after the sum, in float32.
    y = acc * w_scale.float()[None, :] * x_scale[:, None]
    if bias is not None:
        y = y + bias.float()
    # 4. Round once to the output dtype.
    return y.to(out_dtype or x.dtype).reshape(*lead, w_q.shape[0])


class Fp8ReferenceLinear(QuantReferenceLinear):
    """What :func:`explorer.sparsify` with ``dtype="float8_e4m3fn"`` computes, in plain torch.

    The weight is quantized per output channel, each input row per token (dynamic), the fp8
    products are summed in float32, and both scales and the bias are applied after
    (:func:`fp8_reference`). It runs on any device, so FP8 and FP8 2:4 accuracy can be measured
    without a GPU; the GPU kernel differs from it by rounding its raw sum to bfloat16 before the
    scales are applied, and by the order of its float32 additions.

    Parameters
    ----------
    linear : nn.Linear
        The layer to emulate (its weight is quantized once, here).
    name : str
        The layer's name, for error messages.

    Examples
    --------
    >>> lin = torch.nn.Linear(8, 4)
    >>> ref = Fp8ReferenceLinear(lin)
    >>> ref
    Fp8ReferenceLinear(in_features=8, out_features=4, bias=True, fp8 e4m3 reference)
    >>> with torch.no_grad():
    ...     float((ref(torch.ones(2, 8)) - lin(torch.ones(2, 8))).abs().max()) < 0.1
    True
    """

    def __init__(self, linear: torch.nn.Linear, name: str = "weight") -> None:
        super().__init__(linear, *quantize_weight(linear.weight, name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The emulated FP8 product for ``x[..., in]`` (see :func:`fp8_reference`)."""
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"input has {x.shape[-1]} features in its last dimension, expected "
                f"{self.in_features}"
            )
        return fp8_reference(x, self.qweight, self.scale, self.bias)

    def extra_repr(self) -> str:
        """The text shown inside the module's repr."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, fp8 e4m3 reference"
        )


def fp8_reference_model(
    model: torch.nn.Module, filter_fn=None, require_24: bool = True
) -> tuple[torch.nn.Module, list[str]]:
    """A copy of ``model`` whose FP8-eligible Linears compute like the sparse FP8 kernel.

    A layer is swapped where :func:`explorer.sparsify` would swap it in FP8: accepted by
    ``filter_fn``, 2:4 along its inputs (unless ``require_24=False``, to see FP8 alone on a
    dense model), and both sizes multiples of 32.

    Parameters
    ----------
    model : torch.nn.Module
        The model to copy; it is left unchanged.
    filter_fn : callable, optional
        ``filter_fn(linear, fqn)``: False leaves a Linear as it is.
    require_24 : bool, default True
        Swap only Linears whose weight is 2:4 along its inputs.

    Returns
    -------
    (torch.nn.Module, list of str)
        The copy and the names of the swapped layers.

    Raises
    ------
    ValueError
        A swapped layer's weight holds Inf or NaN (the message names the layer).

    Examples
    --------
    >>> m, names = fp8_reference_model(torch.nn.Sequential(torch.nn.Linear(64, 32)))
    >>> names  # a dense weight is not 2:4, so it stays as it is
    []
    >>> fp8_reference_model(torch.nn.Sequential(torch.nn.Linear(64, 32)), require_24=False)[1]
    ['0']
    """

    def make_layer(linear: torch.nn.Linear, fqn: str) -> Fp8ReferenceLinear:
        return Fp8ReferenceLinear(linear, name=f"layer {fqn!r}")

    return swap_reference_linears(model, make_layer, filter_fn, require_24)
