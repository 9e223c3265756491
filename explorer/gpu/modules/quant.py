"""Symmetric int8 quantization for the sparse int8 flow.

Weights: per output channel, ``scale = max|w| / 127`` and ``q = round(w / scale)``; zeros stay
zeros, so a 2:4 weight stays 2:4. Activations: dynamically per token, the same rule per row.
The sparse int8 matmul folds the weight scale into cuSPARSELt's per-channel alpha vector and
the token scale is applied afterwards in one fused multiply(-add).
"""

from __future__ import annotations

import torch

from explorer.gpu.modules.reference import QuantReferenceLinear, swap_reference_linears

__all__ = [
    "Int8ReferenceLinear",
    "dequantize",
    "int8_reference",
    "quantize_per_channel",
    "quantize_per_token",
]

_EPS = 1e-12


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``weight[out, in]`` to int8 with one float32 scale per output channel.

    Parameters
    ----------
    weight : torch.Tensor
        The 2-D weight, ``[out, in]``.

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

    Parameters
    ----------
    x : torch.Tensor
        The activations, rows along the last dimension.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``q`` (int8, same shape) and ``scale`` (float32, ``x.shape[:-1]``).

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

    Parameters
    ----------
    q : torch.Tensor
        The 2-D int8 values.
    scale : torch.Tensor
        One scale per row of ``q``.

    Returns
    -------
    torch.Tensor
        float32, ``q``'s shape.

    Examples
    --------
    >>> dequantize(torch.tensor([[127]], dtype=torch.int8), torch.tensor([0.5])).tolist()
    [[63.5]]
    """
    return q.float() * scale.float()[:, None]


_EXACT_CHUNK = 1024  # 1024 * 127 * 127 < 2**24: float32 sums of int8 products stay exact


class Int8ReferenceLinear(QuantReferenceLinear):
    """What :func:`explorer.sparsify` with ``dtype=torch.int8`` computes, in plain torch.

    The weight is quantized per output channel, each input row per token (dynamic), the
    integer products are summed exactly, and both scales are applied after, as the sparse int8
    kernel does. It runs on any device, so int8 accuracy can be measured without a GPU;
    the GPU kernel differs from it only by rounding its output and the token scale to 16 bits.

    Examples
    --------
    >>> lin = torch.nn.Linear(8, 4)
    >>> ref = Int8ReferenceLinear(lin)
    >>> with torch.no_grad():
    ...     float((ref(torch.ones(2, 8)) - lin(torch.ones(2, 8))).abs().max()) < 0.05
    True
    """

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__(linear, *quantize_per_channel(linear.weight))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The emulated int8 product for ``x[..., in]``, in ``x``'s dtype."""
        lead = x.shape[:-1]
        q, token_scale = quantize_per_token(x.reshape(-1, self.in_features))
        acc = torch.zeros(q.shape[0], self.out_features, dtype=torch.float64, device=x.device)
        for start in range(0, self.in_features, _EXACT_CHUNK):
            part = slice(start, start + _EXACT_CHUNK)
            acc += (q[:, part].float() @ self.qweight[:, part].float().t()).double()
        y = (acc * self.scale.double()[None, :]).float() * token_scale[:, None]
        if self.bias is not None:
            y = y + self.bias.float()
        return y.to(x.dtype).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        """The text shown inside the module's repr."""
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 reference"


def int8_reference(
    model: torch.nn.Module, filter_fn=None, require_24: bool = True
) -> tuple[torch.nn.Module, list[str]]:
    """A copy of ``model`` whose int8-eligible Linears compute like the sparse int8 kernel.

    A layer is swapped where :func:`explorer.sparsify` would swap it in int8: accepted by
    ``filter_fn``, 2:4 along its inputs (unless ``require_24=False``, to see int8 alone on a
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

    Examples
    --------
    >>> m, names = int8_reference(torch.nn.Sequential(torch.nn.Linear(64, 32)))
    >>> names  # a dense weight is not 2:4, so it stays as it is
    []
    """
    return swap_reference_linears(
        model, lambda linear, fqn: Int8ReferenceLinear(linear), filter_fn, require_24
    )
