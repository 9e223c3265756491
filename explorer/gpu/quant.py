"""Symmetric int8 quantization for the sparse int8 flow.

Weights: per output channel, ``scale = max|w| / 127`` and ``q = round(w / scale)``; zeros stay
zeros, so a 2:4 weight stays 2:4. Activations: dynamically per token, the same rule per row.
The sparse int8 matmul folds the weight scale into cuSPARSELt's per-channel alpha vector and
the token scale is applied afterwards in one fused multiply(-add).
"""

from __future__ import annotations

import torch

__all__ = ["dequantize", "quantize_per_channel", "quantize_per_token"]

_EPS = 1e-12


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``weight[out, in]`` to int8 with one float32 scale per output channel.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``q`` (int8, same shape, zeros kept) and ``scale`` (float32 ``[out]``).

    Examples
    --------
    >>> q, s = quantize_per_channel(torch.tensor([[0.0, 1.0, -2.0, 0.0]]))
    >>> q.tolist(), s.tolist()
    ([[0, 64, -127, 0]], [0.015748031437397003])
    """
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D (out, in), got shape {tuple(weight.shape)}")
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp_min(_EPS) / 127.0
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x[tokens, in]`` to int8 with one scale per token (row).

    Examples
    --------
    >>> q, s = quantize_per_token(torch.tensor([[1.0, -0.5]]))
    >>> q.tolist()
    [[127, -64]]
    """
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(_EPS) / 127.0
    q = torch.round(x.float() / scale).clamp_(-127, 127).to(torch.int8)
    return q, scale.squeeze(-1)


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``q * scale`` per row (float32).

    Examples
    --------
    >>> dequantize(torch.tensor([[127]], dtype=torch.int8), torch.tensor([0.5])).tolist()
    [[63.5]]
    """
    return q.float() * scale.float()[:, None]
