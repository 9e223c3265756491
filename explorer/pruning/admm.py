"""The ADMM weight update: re-optimise the kept weights once the mask is fixed.

Boža, "Fast and Optimal Weight Update for Pruned Large Language Models" (2024). With the mask
fixed, the best kept weights of a layer solve a least-squares problem on the calibration
inputs ``X``: minimise ``||W0 X - W X||^2`` over weights ``W`` that are zero off the mask. The
alternating direction method of multipliers splits it into an unconstrained least-squares step
(one matrix product with a precomputed inverse) and a projection onto the mask:

1. Scale each input column by its norm (``H = X^T X`` gets a unit diagonal) and damp ``H`` by a
   fraction of its mean diagonal, as the reference implementation does.
2. Precompute ``(H + rho I)^-1`` once, with ``rho = 1``.
3. Iterate: ``Z = mask * (W + U)``; ``U += W - Z``; ``W = (H + rho I)^-1 (H W0 + rho (Z - U))``.
4. Finish with a few conjugate-gradient steps on the kept weights alone (the problem restricted
   to the mask is a positive-definite quadratic), which drives the remaining ADMM gap to the
   exact optimum faster than more ADMM iterations would.
5. Keep the result only if its reconstruction error (undamped) is below the starting weights';
   otherwise return the start unchanged. The update therefore never makes a layer worse on the
   calibration data.
"""

from __future__ import annotations

import torch

__all__ = ["admm_update", "reconstruction_loss"]


def reconstruction_loss(dense: torch.Tensor, weight: torch.Tensor, hessian: torch.Tensor) -> float:
    """``tr((W0 - W) H (W0 - W)^T)``: the squared output error on the recorded inputs.

    Parameters
    ----------
    dense : torch.Tensor
        The dense weight ``W0``.
    weight : torch.Tensor
        The pruned or updated weight ``W``, same shape.
    hessian : torch.Tensor
        ``H = X^T X`` of the layer's recorded inputs, ``(in_features, in_features)``.

    Returns
    -------
    float
        The loss, computed in float64.

    Examples
    --------
    >>> h = torch.eye(2)
    >>> reconstruction_loss(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 0.0]]), h)
    4.0
    """
    d = (dense.float() - weight.float()).double()
    return float(((d @ hessian.double()) * d).sum())


def admm_update(
    dense: torch.Tensor,
    mask: torch.Tensor,
    hessian: torch.Tensor,
    start: torch.Tensor | None = None,
    iterations: int = 20,
    cg_steps: int = 10,
    percdamp: float = 0.1,
    rho: float = 1.0,
) -> torch.Tensor:
    """Re-optimise the weights kept by ``mask`` to reconstruct the dense layer's outputs.

    Parameters
    ----------
    dense : torch.Tensor
        The layer's dense weight ``W0``, shape ``(out, in)``.
    mask : torch.Tensor
        Bool keep-mask of the same shape; it is not changed.
    hessian : torch.Tensor
        ``X^T X`` of the layer's calibration inputs, shape ``(in, in)``.
    start : torch.Tensor, optional
        The pruned weight to improve on (e.g. SparseGPT's); default ``dense * mask``.
    iterations : int
        ADMM iterations (20 in the reference implementation).
    cg_steps : int
        Conjugate-gradient steps on the kept weights after ADMM.
    percdamp : float
        Damping as a fraction of the mean (normalised) diagonal; 0.1 in the reference.
    rho : float
        ADMM penalty on the normalised problem.

    Returns
    -------
    torch.Tensor
        The new weight, zero wherever ``mask`` is False, dtype of ``dense``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(256, 8, generator=g) @ torch.randn(8, 8, generator=g)
    >>> w = torch.randn(4, 8, generator=g)
    >>> mask = torch.rand(4, 8, generator=g) > 0.5
    >>> h = x.T @ x
    >>> new = admm_update(w, mask, h)
    >>> reconstruction_loss(w, new, h) < reconstruction_loss(w, w * mask, h)
    True
    >>> bool((new[~mask] == 0).all())
    True
    """
    if dense.shape != mask.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from weight {tuple(dense.shape)}")
    cols = dense.shape[1]
    if hessian.shape != (cols, cols):
        raise ValueError(
            f"hessian must be ({cols}, {cols}) for a weight with {cols} inputs, "
            f"got {tuple(hessian.shape)}"
        )
    device = dense.device
    keep = mask.to(device, torch.bool)
    w0 = dense.detach().float()
    h = hessian.to(device, torch.float32)
    first = (w0 * keep) if start is None else start.detach().float() * keep
    if iterations <= 0 and cg_steps <= 0:
        return first.to(dense.dtype)
    # 1. normalise the input columns; inputs never seen keep a unit diagonal.
    diag = h.diagonal().clamp_min(0)
    dead = diag == 0
    norm = torch.where(dead, torch.ones_like(diag), diag.sqrt())
    hn = h / norm[:, None] / norm[None, :]
    hn.diagonal()[dead] = 1.0
    hn.diagonal().add_(percdamp * float(hn.diagonal().mean()))
    target = w0 * norm  # W0 in the scaled coordinates
    hw0 = target @ hn
    w = first * norm
    # 2. one inverse for every ADMM step (float64 for a stable factorisation).
    system = hn.double().clone()
    system.diagonal().add_(rho)
    inverse = torch.cholesky_inverse(torch.linalg.cholesky(system)).float()
    z, u = w.clone(), torch.zeros_like(w)
    # 3. ADMM: least-squares step, projection on the mask, dual update.
    for _ in range(max(0, iterations)):
        w = (hw0 + rho * (z - u)) @ inverse
        z = (w + u) * keep
        u += w - z
    w = z if iterations > 0 else w
    # 4. conjugate gradient on the kept weights (gradient of tr((W-W0) Hn (W-W0)^T) / 2).
    resid = (hw0 - w @ hn) * keep
    direction = resid.clone()
    rr = float((resid.double() ** 2).sum())
    for _ in range(max(0, cg_steps)):
        if rr <= 1e-20:
            break
        hd = (direction @ hn) * keep
        curv = float((direction.double() * hd.double()).sum())
        if curv <= 0:
            break
        alpha = rr / curv
        w = w + alpha * direction
        resid = resid - alpha * hd
        rr_new = float((resid.double() ** 2).sum())
        direction = resid + (rr_new / rr) * direction
        rr = rr_new
    new = (w / norm) * keep
    new[:, dead] = first[:, dead]
    # 5. never worse than the start on the (undamped) calibration error.
    if reconstruction_loss(w0, new, h) < reconstruction_loss(w0, first, h):
        return new.to(dense.dtype)
    return first.to(dense.dtype)
