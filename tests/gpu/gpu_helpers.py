"""Helpers shared by the GPU tests."""

from __future__ import annotations

import torch

from explorer.masks import make_mask


def mask24(w: torch.Tensor) -> torch.Tensor:
    """Magnitude 2:4 along the last dimension (zeros in place): :func:`explorer.make_mask`."""
    return w.masked_fill(~make_mask(w, "2:4"), 0)


def coded_weight(n: int, k: int, group: int = 128, fmt: str = "int4", device: str = "cuda"):
    """A random ``[n, k]`` 2:4 weight packed for the low-bit decode kernel (int4 or int8 codes)."""
    from explorer.gpu.cuda import decode_int4

    pack = decode_int4.pack_int4_weight if fmt == "int4" else decode_int4.pack_int8_weight
    return pack(mask24(torch.randn(n, k, device=device)), group_size=group)


def coded_exact(x: torch.Tensor, packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """float64 ``x @ W_deq^T (+ b)`` of the operands the low-bit decode kernel reads."""
    ref = x.double() @ packed.decompress().double().t()
    return ref if bias is None else ref + bias.double()


def relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def captured(fn):
    """``fn()`` warmed up on a side stream, then captured in a CUDA graph: (graph, its output).

    Replaying the graph recomputes the output in place from whatever its inputs then hold.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up outside the capture (plans, launches and routes set up there)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out
