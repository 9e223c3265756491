"""Helpers shared by the GPU tests."""

from __future__ import annotations

import torch

from explorer.masks import make_mask


def mask24(w: torch.Tensor) -> torch.Tensor:
    """Magnitude 2:4 along the last dimension (zeros in place): :func:`explorer.make_mask`."""
    return w.masked_fill(~make_mask(w, "2:4"), 0)


def relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
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
