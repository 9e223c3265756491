"""Least-squares scales for a 2:4 + int4 (or int8) layer whose codes are fixed.

A quantized layer's weight is ``W = S * Q``: integer codes ``Q`` and one float32 scale per row
and group of ``G`` input columns. The joint SparseGPT loop and the ADMM update on the grid
(:func:`explorer.pruning.admm.admm_update_on_grid`) choose the codes for scales fixed when each
group was entered; once the codes are final, the scales are free to move. The calibration error
``tr((W0 - W) H (W0 - W)^T)`` separates by rows, and within a row it is a quadratic in the row's
``K / G`` scales, so the best scales solve one small linear system per row:

``A s = b`` with ``A[g, h] = q_g^T H[g, h] q_h`` and ``b[g] = q_g^T (H W0^T)[g]``,

where ``q_g`` are the row's codes in group ``g``. A row keeps its old scales where the new ones
are not all positive and finite, or do not lower that row's error on the (undamped) calibration
inputs, so :func:`refit_scales` never makes a row worse on the calibration data. The codes do
not change, so the layer compresses exactly with the new scales.
"""

from __future__ import annotations

import torch

from ..groupquant import Quantization, round_to_grid

__all__ = ["refit_scales"]


def _row_losses(dense: torch.Tensor, weight: torch.Tensor, hessian: torch.Tensor) -> torch.Tensor:
    """Each row's ``(w0 - w)^T H (w0 - w)``, in float64."""
    d = (dense - weight).double()
    return ((d @ hessian.double()) * d).sum(dim=1)


def refit_scales(
    dense: torch.Tensor,
    weight: torch.Tensor,
    hessian: torch.Tensor,
    quant: Quantization,
    scales: torch.Tensor,
    percdamp: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The scales that minimise the calibration error for the codes of ``weight``, row by row.

    Parameters
    ----------
    dense : torch.Tensor
        The layer's dense weight ``W0``, ``(out, in)``.
    weight : torch.Tensor
        The pruned and quantized weight, on the grid of ``scales`` (a 16-bit copy of grid values
        is read back to its codes).
    hessian : torch.Tensor
        ``X^T X`` of the layer's calibration inputs, ``(in, in)``.
    quant : Quantization
        The format and group size of the grid.
    scales : torch.Tensor
        The float32 scales, ``(out, in / group_size)``, positive.
    percdamp : float
        Damping added to ``H``'s diagonal for the solve, as a fraction of its mean diagonal
        (the acceptance test uses the undamped ``H``).

    Returns
    -------
    weight : torch.Tensor
        ``codes * new scales`` (zero where ``weight`` is), dtype of ``dense``.
    scales : torch.Tensor
        The new float32 scales, ``(out, in / group_size)``; a row's old ones where the refit
        did not lower that row's calibration error.

    Raises
    ------
    ValueError
        Shapes that do not match, or scales that are not positive and finite.

    Examples
    --------
    >>> from explorer.groupquant import Quantization, quantize_rtn
    >>> from explorer.pruning.admm import reconstruction_loss
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(512, 16, generator=g) @ torch.randn(16, 16, generator=g)
    >>> w = torch.randn(8, 16, generator=g)
    >>> mask = torch.ones(8, 16, dtype=torch.bool)
    >>> mask[:, ::2] = False
    >>> rounded, scales = quantize_rtn(w * mask, mask, "int4", 8)
    >>> h = x.T @ x
    >>> new, new_scales = refit_scales(w, rounded, h, Quantization("int4", 8), scales)
    >>> reconstruction_loss(w, new, h) < reconstruction_loss(w, rounded, h)
    True
    >>> full = scales.repeat_interleave(8, dim=1)
    >>> torch.equal(round_to_grid(rounded, full, 7), round_to_grid(new, new_scales.repeat_interleave(8, dim=1), 7))
    True
    """
    rows, cols = dense.shape
    if weight.shape != dense.shape:
        raise ValueError(f"weight shape {tuple(weight.shape)} differs from {tuple(dense.shape)}")
    if hessian.shape != (cols, cols):
        raise ValueError(
            f"hessian must be ({cols}, {cols}) for a weight with {cols} inputs, "
            f"got {tuple(hessian.shape)}"
        )
    quant.check_scales(scales, rows, cols)
    size = quant.group_size
    groups = cols // size
    device = dense.device
    old = scales.to(device, torch.float32)
    full = old.repeat_interleave(size, dim=1)
    codes = round_to_grid(weight.detach().float(), full, quant.qmax)
    w0 = dense.detach().float()
    h = hessian.to(device, torch.float32)
    damped = h.clone()
    damped.diagonal().add_(percdamp * float(h.diagonal().clamp_min(0).mean()))
    # A[r, g, :] and b[r, g], one group of rows of H at a time: (codes in g) @ H[g, :]
    system = torch.empty(rows, groups, groups, dtype=torch.float64, device=device)
    rhs = torch.empty(rows, groups, dtype=torch.float64, device=device)
    for g in range(groups):
        cols_g = slice(g * size, (g + 1) * size)
        through = codes[:, cols_g] @ damped[cols_g, :]  # (rows, cols)
        system[:, g, :] = (through * codes).view(rows, groups, size).sum(-1).double()
        rhs[:, g] = (through * w0).sum(-1).double()
    # a group with no nonzero code has no say: it keeps its scale, alone on its row of A
    empty = (codes.view(rows, groups, size) == 0).all(-1)
    system.masked_fill_(empty[:, :, None] | empty[:, None, :], 0.0)
    eye = torch.eye(groups, dtype=torch.bool, device=device).expand(rows, groups, groups)
    system[eye & empty[:, :, None]] = 1.0
    rhs[empty] = old[empty].double()
    solved, info = torch.linalg.solve_ex(system, rhs)
    new = solved.float()
    usable = (info == 0) & torch.isfinite(new).all(-1) & (new > 0).all(-1)
    new = torch.where(usable[:, None], new, old)
    refit, current = codes * new.repeat_interleave(size, dim=1), codes * full
    better = (_row_losses(w0, refit, h) < _row_losses(w0, current, h))[:, None]
    return torch.where(better, refit, current).to(dense.dtype), torch.where(better, new, old)
