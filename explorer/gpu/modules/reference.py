"""What the int8 and FP8 reference layers share: a quantized weight, and swapping them in.

:class:`QuantReferenceLinear` holds a Linear's quantized weight, its per-channel scales and its
bias as buffers; a subclass (:class:`explorer.gpu.modules.quant.Int8ReferenceLinear`,
:class:`explorer.gpu.modules.fp8.Fp8ReferenceLinear`) says how the weight is quantized and computes
its forward pass. :func:`swap_reference_linears` replaces the Linears a sparse kernel would take in
a copy of a model. This module imports only torch and the core, so the references run on a CPU.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from explorer.sparse_rules import sparse_multiple

__all__ = ["QuantReferenceLinear", "swap_reference_linears"]


class QuantReferenceLinear(torch.nn.Module):
    """A Linear's quantized weight (``qweight``), its scales (``scale``) and bias, as buffers.

    Parameters
    ----------
    linear : nn.Linear
        The layer to emulate; its sizes are kept and its bias is copied.
    qweight, scale : torch.Tensor
        Its weight quantized per output channel, and the float32 scale of each channel.

    Examples
    --------
    >>> lin = torch.nn.Linear(4, 2)
    >>> ref = QuantReferenceLinear(lin, torch.zeros(2, 4), torch.ones(2))
    >>> ref.in_features, ref.out_features, ref.bias.shape
    (4, 2, torch.Size([2]))
    """

    def __init__(self, linear: torch.nn.Linear, qweight: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale)
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias)


def swap_reference_linears(
    model: torch.nn.Module,
    make_layer: Callable[[torch.nn.Linear, str], torch.nn.Module],
    filter_fn=None,
    require_24: bool = True,
) -> tuple[torch.nn.Module, list[str]]:
    """A copy of ``model`` with ``make_layer(linear, fqn)`` in place of each eligible Linear.

    A Linear is eligible where :func:`explorer.sparsify` would swap it: accepted by
    ``filter_fn``, 2:4 along its inputs (unless ``require_24=False``), and both sizes multiples
    of 32 (:func:`explorer.sparse_rules.sparse_multiple` of 8-bit types).

    Parameters
    ----------
    model : torch.nn.Module
        The model to copy; it is left unchanged.
    make_layer : callable
        ``make_layer(linear, fqn)``: the module that replaces an eligible Linear.
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
    >>> m = torch.nn.Sequential(torch.nn.Linear(64, 32))
    >>> swap_reference_linears(m, lambda lin, fqn: torch.nn.Identity(), require_24=False)[1]
    ['0']
    """
    out = copy.deepcopy(model)
    swapped = []
    mult = sparse_multiple(torch.int8)  # int8 and fp8 alike
    for fqn, mod in list(out.named_modules()):
        if not isinstance(mod, torch.nn.Linear):
            continue
        if filter_fn is not None and not filter_fn(mod, fqn):
            continue
        if mod.in_features % mult or mod.out_features % mult:
            continue
        w = mod.weight.detach()
        if require_24 and bool(((w.reshape(-1, 4) != 0).sum(1) > 2).any()):
            continue
        parent, _, child = fqn.rpartition(".")
        setattr(out.get_submodule(parent) if parent else out, child, make_layer(mod, fqn))
        swapped.append(fqn)
    return out, swapped
