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
