"""FP8 dense: the product a user deploying FP8 already has, and the FP8 2:4 layer's dense route.

``torch._scaled_mm`` on the whole fp8 weight (zeros included) with row-wise scales: one float32
scale per token for the activations, one per output channel for the weight, the bias added in the
same call. For a 2:4 weight quantized by :func:`explorer.gpu.modules.fp8.quantize_weight` it
computes the same sums as the FP8 2:4 kernel (the zeros add nothing), so a layer may switch
between the two by speed without changing its results beyond float32 summation order.

:func:`scaled_matmul` takes activations already quantized; :func:`scaled_linear` quantizes them
first (any leading dims); :class:`Fp8DenseLinear` is a drop-in layer (the FP8 dense baseline of
the benchmarks). Only torch and the CPU-only modules ``fp8`` and ``reference`` are imported here;
``torch._scaled_mm`` runs on CUDA GPUs of compute capability 8.9 or newer (and on a CPU in recent
torch releases).
"""

from __future__ import annotations

import torch
from torch import nn

from explorer.gpu.modules import fp8
from explorer.gpu.modules.reference import QuantReferenceLinear

__all__ = ["Fp8DenseLinear", "scaled_linear", "scaled_matmul"]


def scaled_matmul(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """``(x_q * x_scale) @ (w_q * w_scale)^T + bias`` in one ``torch._scaled_mm`` call.

    Parameters
    ----------
    x_q : torch.Tensor
        fp8 activations ``[tokens, in]``, row-major.
    x_scale : torch.Tensor
        float32 per-token scales ``[tokens]``.
    w_q : torch.Tensor
        fp8 weight ``[out, in]``, row-major (read as the column-major operand it is transposed).
    w_scale : torch.Tensor
        float32 per-output-channel scales ``[out]``.
    bias : torch.Tensor, optional
        ``[out]`` in ``out_dtype``.
    out_dtype : torch.dtype, default torch.bfloat16
        The result's dtype (bfloat16 or float32; row-wise scaling has no float16 output).

    Returns
    -------
    torch.Tensor
        ``[tokens, out]`` in ``out_dtype``.

    Examples
    --------
    >>> w_q, w_s = fp8.quantize_weight(torch.tensor([[1.0, 2.0], [0.0, -1.0]]))
    >>> x_q, x_s = fp8.quantize_activations(torch.tensor([[1.0, 1.0]]))
    >>> scaled_matmul(x_q, x_s, w_q, w_s, out_dtype=torch.float32).tolist()  # doctest: +SKIP
    [[3.0, -1.0]]
    """
    return torch._scaled_mm(
        x_q if x_q.is_contiguous() else x_q.contiguous(),
        w_q.t(),
        scale_a=x_scale.reshape(-1, 1).float(),
        scale_b=w_scale.reshape(1, -1).float(),
        bias=bias,
        out_dtype=out_dtype,
    )


def scaled_linear(
    x: torch.Tensor,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """FP8 dense ``x @ W^T + bias`` for ``x[..., in]``: quantized per token, then one matmul.

    Parameters
    ----------
    x : torch.Tensor
        Floating activations ``(..., in)``.
    w_q, w_scale : torch.Tensor
        The weight from :func:`explorer.gpu.modules.fp8.quantize_weight`.
    bias : torch.Tensor, optional
        ``[out]`` in ``out_dtype``.
    out_dtype : torch.dtype, default torch.bfloat16
        The product's dtype.

    Returns
    -------
    torch.Tensor
        ``(..., out)`` in ``out_dtype``.
    """
    lead = x.shape[:-1]
    x_q, x_scale = fp8.quantize_activations(x.reshape(-1, x.shape[-1]))
    y = scaled_matmul(x_q, x_scale, w_q, w_scale, bias, out_dtype)
    return y if len(lead) == 1 else y.reshape(*lead, w_q.shape[0])


class Fp8DenseLinear(QuantReferenceLinear):
    """An ``nn.Linear`` run as FP8 dense (``torch._scaled_mm``): the baseline FP8 2:4 must beat.

    The weight is quantized once per output channel, as
    :class:`~explorer.gpu.modules.fp8.Fp8ReferenceLinear` quantizes it (the same buffers
    ``qweight`` and ``scale``), and each input per token on every call; the result comes back in
    the input's dtype.

    Parameters
    ----------
    linear : nn.Linear
        The layer to convert (left unchanged); both sizes multiples of 16.
    out_dtype : torch.dtype, default torch.bfloat16
        The matmul's output dtype (and the bias's) before the cast to the input's dtype.

    Raises
    ------
    ValueError
        A size not a multiple of 16 (``torch._scaled_mm``'s rule), or a weight with Inf or NaN.

    Examples
    --------
    >>> Fp8DenseLinear(nn.Linear(64, 32))
    Fp8DenseLinear(in_features=64, out_features=32, bias=True, fp8 e4m3 dense)
    """

    def __init__(self, linear: nn.Linear, out_dtype: torch.dtype = torch.bfloat16) -> None:
        out_f, in_f = linear.weight.shape
        if in_f % 16 or out_f % 16:
            raise ValueError(
                f"{linear} has sizes {out_f} x {in_f}; FP8 dense needs both to be multiples of "
                "16. Hint: keep this layer out with filter_fn."
            )
        super().__init__(linear, *fp8.quantize_weight(linear.weight, f"the weight of {linear}"))
        self.out_dtype = out_dtype
        if self.bias is not None:
            self.bias = self.bias.to(out_dtype)  # torch._scaled_mm adds it in its output dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The FP8 dense product of ``x[..., in_features]``, in ``x``'s dtype."""
        y = scaled_linear(x, self.qweight, self.scale, self.bias, self.out_dtype)
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def extra_repr(self) -> str:
        """The text shown inside the module's repr."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, fp8 e4m3 dense"
        )
