"""Which ``nn.Linear`` layers ``sparsify`` can swap, and the dtype each (or a fused block) runs in.

:func:`eligibility` gives the reason a layer cannot run 2:4 sparse (its device, its dtype, the
capability and alignment rules of :mod:`explorer.sparse_rules`, its weight's pattern) or None;
:func:`layer_dtype` and :func:`block_dtype` the dtype a swapped layer, or a fused block of
several, runs in.
"""

from __future__ import annotations

import torch
from torch import nn

from explorer.gpu.library import cusparselt as C
from explorer.sparse_rules import why_not_24

__all__ = ["block_dtype", "eligibility", "layer_dtype"]


def eligibility(linear: nn.Linear, dtype: torch.dtype) -> str | None:
    """Why ``linear`` cannot run 2:4 sparse in ``dtype`` (None when it can).

    The device and the dtype first, then the capability and alignment rules of
    :func:`explorer.sparse_rules.why_not_24` (the doctor's), then the weight's 2:4 pattern.

    Parameters
    ----------
    linear : torch.nn.Linear
        The layer.
    dtype : torch.dtype
        The dtype it would run in.

    Returns
    -------
    str or None
        The reason, or None.

    Examples
    --------
    >>> eligibility(nn.Linear(64, 10), torch.float16)
    'on cpu: cuSPARSELt needs the model on a CUDA GPU (model.cuda())'
    """
    w = linear.weight
    if w.device.type != "cuda":
        return f"on {w.device}: cuSPARSELt needs the model on a CUDA GPU (model.cuda())"
    if dtype not in C.CUSPARSELT_DTYPES:
        return f"dtype {dtype} has no sparse kernel (use float16, bfloat16, int8 or float8_e4m3fn)"
    # capability, then alignment: the rules of explorer.sparse_rules, as the doctor reads them
    why = why_not_24(
        linear.out_features,
        linear.in_features,
        dtype,
        capability=torch.cuda.get_device_capability(w.device),
        device_name=torch.cuda.get_device_name(w.device),
    )
    if why is not None:
        return why
    if not C.is_24(w.detach()):
        return "weight is not 2:4 along in_features (prune it first, or pass prune=True)"
    return None


def layer_dtype(mod: nn.Linear, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype ``mod`` runs in once swapped: ``dtype`` if given, else its own 16-bit dtype.

    Parameters
    ----------
    mod : torch.nn.Linear
        The layer.
    dtype : torch.dtype or None
        The dtype asked of ``sparsify``; None keeps a 16-bit layer's own, and runs any other
        (float32) in float16.

    Returns
    -------
    torch.dtype

    Examples
    --------
    >>> layer_dtype(nn.Linear(4, 4), None), layer_dtype(nn.Linear(4, 4), torch.bfloat16)
    (torch.float16, torch.bfloat16)
    """
    w = mod.weight
    return dtype or (w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16)


def block_dtype(parts, dtype) -> torch.dtype | None:
    """The one dtype a fused block runs in, or None if its layers cannot all run sparse.

    Parameters
    ----------
    parts : sequence of torch.nn.Linear
        The block's layers (q, k and v; or gate, up and down).
    dtype : torch.dtype or None
        The dtype asked of ``sparsify`` (None: each layer's own 16-bit dtype).

    Returns
    -------
    torch.dtype or None
        The dtype every part runs in, or None when the parts would run in different dtypes
        or one of them is not eligible (:func:`eligibility`).
    """
    dts = {layer_dtype(p, dtype) for p in parts}
    if len(dts) != 1:
        return None
    dt = dts.pop()
    if any(eligibility(p, dt) for p in parts):
        return None  # the layers go through the per-layer path, which says why
    return dt
