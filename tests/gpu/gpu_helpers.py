"""Helpers shared by the GPU tests."""

from __future__ import annotations

import torch


def mask24(w: torch.Tensor) -> torch.Tensor:
    """Magnitude 2:4 along the last dimension (zeros in place)."""
    g = w.reshape(-1, 4)
    idx = g.float().abs().topk(2, dim=1).indices
    keep = torch.zeros_like(g, dtype=torch.bool).scatter_(1, idx, True)
    return (g * keep).reshape(w.shape)


def relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))
