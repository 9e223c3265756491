"""A 2:4 ``nn.Linear`` weight made ready for the sparse product.

Quantized where the dtype asks, compressed for cuSPARSELt (or torch's own path), with the optional
copies a layer keeps beside it.

:func:`prepare_weight` does everything :meth:`~explorer.gpu.SparseLinear.from_linear` needs
before a module exists, and checks the weight first: a failure leaves the ``nn.Linear`` as it
was.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from explorer.gpu.cuda import decode as D
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library import torch_backend as TB
from explorer.gpu.modules import fp8, quant
from explorer.gpu.modules.sparse_options import SparseOptions

__all__ = ["PreparedWeight", "prepare_weight", "stack_linears"]

_SIXTEEN = (torch.float16, torch.bfloat16)


@dataclass(frozen=True, eq=False)
class PreparedWeight:
    """What a sparse layer holds of its weight.

    Attributes
    ----------
    dtype : torch.dtype
        The matmul's input dtype.
    out_dtype : torch.dtype
        The product's output dtype.
    weight : torch.Tensor
        The 2:4 weight in ``dtype`` (quantized codes for int8 and fp8).
    scale : torch.Tensor or None
        Per-output-channel float32 scales of an 8-bit weight.
    bias : torch.Tensor or None
        The bias in ``out_dtype``.
    compressed : object
        cuSPARSELt's compressed weight, or torch's compressed tensor.
    decode : CompressedWeight or None
        The decode kernel's weight (``options.decode``, where the kernel takes the layer).
    dense : torch.Tensor or None
        The dense masked weight (``options.keep_dense``): in ``out_dtype``, or for fp8 the
        quantized codes themselves, which the FP8 dense route reads
        (:mod:`explorer.gpu.modules.fp8_dense`).
    """

    dtype: torch.dtype
    out_dtype: torch.dtype
    weight: torch.Tensor
    scale: torch.Tensor | None
    bias: torch.Tensor | None
    compressed: object
    decode: object
    dense: torch.Tensor | None

    def __repr__(self) -> str:
        rows, k = self.weight.shape
        extra = [name for name in ("decode", "dense") if getattr(self, name) is not None]
        kept = f", also {' and '.join(extra)}" if extra else ""
        return f"PreparedWeight({rows}x{k} {self.dtype} -> {self.out_dtype}{kept})"


def prepare_weight(
    linear: nn.Linear,
    options: SparseOptions,
    backend: str = "cusparselt",
    out_dtype: torch.dtype | None = None,
    fp8_weight: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> PreparedWeight:
    """Check, quantize and compress ``linear``'s 2:4 weight as ``options`` ask.

    Parameters
    ----------
    linear : nn.Linear
        On a CUDA device, weight pruned 2:4 along ``in_features`` (zeros in place).
    options : SparseOptions
        ``dtype`` (None: the weight's own 16-bit dtype, float16 for float32), ``decode`` and
        ``keep_dense`` are read here.
    backend : {"cusparselt", "torch"}
    out_dtype : torch.dtype, optional
        The 8-bit paths' output dtype (int8: the activations' 16-bit dtype by default; fp8:
        bfloat16 or float32, never float16, which cannot hold the raw sums).
    fp8_weight : (torch.Tensor, torch.Tensor), optional
        With ``options.dtype`` float8_e4m3fn: the weight already quantized, float8_e4m3fn codes
        ``[out, in]`` (2:4) and float32 scales ``[out]`` (a checkpoint's), used as they are
        instead of quantizing ``linear.weight`` (:func:`~explorer.gpu.modules.fp8.quantize_weight`).

    Raises
    ------
    ValueError
        CPU weight, weight not 2:4, shape off the alignment rules, float16 fp8 output, or an
        ``fp8_weight`` for another dtype, of the wrong shape, not 2:4 or with bad scales.
    TypeError
        A dtype the chosen backend does not take.
    """
    w = linear.weight.detach()
    if w.device.type != "cuda":
        raise ValueError(
            f"{linear} is on {w.device}; SparseLinear needs a CUDA module. Hint: model.cuda()."
        )
    act_dtype = w.dtype if w.dtype in _SIXTEEN else torch.float16
    dtype = options.dtype or act_dtype
    if not C.is_24(w):
        raise ValueError(
            f"the weight of {linear} is not 2:4 along in_features. Hint: prune it first "
            "(explorer.prune or explorer.make_mask(weight, '2:4'))."
        )
    if fp8_weight is not None and dtype != fp8.FP8:
        raise ValueError(
            f"fp8_weight was given for a {dtype} layer; the stored codes and scales are "
            "float8_e4m3fn. Hint: pass dtype=torch.float8_e4m3fn."
        )
    scale = None
    if dtype == torch.int8:
        wq, scale = quant.quantize_per_channel(w)
        out_dtype = out_dtype or act_dtype
    elif dtype.itemsize == 1:  # fp8: per-channel weight scale, applied after the matmul
        if out_dtype == torch.float16:
            raise ValueError(
                "out_dtype float16 cannot hold the fp8 kernel's raw sums (up to 448 * 448 "
                "per product, before the scales). Hint: leave out_dtype unset (bfloat16) "
                "or pass torch.bfloat16 or torch.float32; the result is returned in the "
                "input's dtype."
            )
        if fp8_weight is None:
            wq, scale = fp8.quantize_weight(w, name=f"the weight of {linear}")
        else:  # quantized elsewhere: kept as they are (quantizing again can change codes)
            wq, scale = fp8.check_quantized_weight(*fp8_weight, w.shape, f"the weight of {linear}")
            wq, scale = wq.to(w.device), scale.to(w.device)
            if not C.is_24(wq.view(torch.uint8) & 0x7F):  # the bits of +-0 are 0x00 and 0x80
                raise ValueError(
                    f"the fp8 codes given for {linear} are not 2:4 along in_features. Hint: "
                    "pass the codes of the 2:4 weight (zeros in place)."
                )
        out_dtype = out_dtype or torch.bfloat16
    else:
        wq = w.to(dtype)
        out_dtype = dtype
    bias = None
    if linear.bias is not None:
        bias = linear.bias.detach().to(out_dtype).contiguous()
    if backend == "torch":
        if dtype.itemsize == 1:
            raise TypeError("backend='torch' here supports float16 and bfloat16 only")
        compressed = TB.compress(wq)
    else:
        C.check_weight(wq)
        compressed = C.compress(wq, check=False)
    dec = None
    if options.decode and backend == "cusparselt" and w.shape[1] % 16 == 0:
        if dtype in _SIXTEEN:
            dec = D.pack(wq.contiguous())
        elif dtype == torch.int8:  # weight-only int8: 16-bit activations on this route
            dec = D.pack(w.to(out_dtype).contiguous(), int8=True)
    dense = None
    if options.keep_dense:
        # fp8's dense route is FP8 dense on the same codes (zeros included), never bf16
        fp8_dense = dtype.itemsize == 1 and dtype != torch.int8
        dense = (wq if fp8_dense else w.to(out_dtype)).contiguous()
    return PreparedWeight(dtype, out_dtype, wq, scale, bias, compressed, dec, dense)


def stack_linears(*parts: nn.Linear) -> nn.Linear:
    """One ``nn.Linear`` whose outputs are those of ``parts`` in order (weights and biases stacked).

    For layers that read the same input and run as one product.

    Examples
    --------
    >>> a, b = nn.Linear(4, 2), nn.Linear(4, 3)
    >>> x = torch.randn(5, 4)
    >>> torch.allclose(stack_linears(a, b)(x), torch.cat([a(x), b(x)], dim=1), atol=1e-6)
    True
    """
    first = parts[0]
    if len({p.in_features for p in parts}) != 1 or len({p.bias is None for p in parts}) != 1:
        raise ValueError(
            "layers to stack must share in_features and bias presence; got "
            + ", ".join(f"{tuple(p.weight.shape)} bias={p.bias is not None}" for p in parts)
        )
    with torch.no_grad():
        stacked = nn.Linear(
            first.in_features,
            sum(p.out_features for p in parts),
            bias=first.bias is not None,
            device=first.weight.device,
            dtype=first.weight.dtype,
        )
        stacked.weight.copy_(torch.cat([p.weight for p in parts]))
        if first.bias is not None:
            stacked.bias.copy_(torch.cat([p.bias for p in parts]))
    return stacked
