"""torch.ao.pruning's WeightNormSparsifier, run the way the PyTorch 2:4 tutorial runs it.

The classic flow: build the sparsifier, ``prepare`` it on the model with one config entry per
selected weight (this attaches a mask parametrization), ``step`` to compute the masks from the
weight norms, ``squash_mask`` to bake the zeros into the weights and drop the parametrizations.
For 2:4 the tutorial uses ``sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2``;
N:M generalises this to ``(1, M)`` blocks with ``M - N`` zeros. Square blocks map to
``(B, B)`` blocks that are zeroed whole, and per-layer unstructured sparsity to ``(1, 1)``
blocks.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from .._threads import fair_cpu_threads
from .._validate import check_scores
from ..patterns import Pattern

__all__ = ["sparsifier_arguments", "weightnorm_masks"]


def sparsifier_arguments(pattern: Pattern) -> dict:
    """WeightNormSparsifier's arguments for ``pattern``.

    Parameters
    ----------
    pattern : Pattern
        ``N:M``, ``unstructured:S`` (not per row) or ``blockB:S``.

    Returns
    -------
    dict
        ``sparsity_level``, ``sparse_block_shape`` and ``zeros_per_block``.

    Examples
    --------
    >>> sparsifier_arguments(Pattern.parse("2:4"))
    {'sparsity_level': 1.0, 'sparse_block_shape': (1, 4), 'zeros_per_block': 2}
    """
    if pattern.kind == "nm":
        return {
            "sparsity_level": 1.0,
            "sparse_block_shape": (1, pattern.m),
            "zeros_per_block": pattern.m - pattern.n,
        }
    if pattern.kind == "block":
        b = pattern.block
        return {
            "sparsity_level": pattern.sparsity,
            "sparse_block_shape": (b, b),
            "zeros_per_block": b * b,
        }
    if pattern.kind == "unstructured" and not pattern.per_row:
        return {
            "sparsity_level": pattern.sparsity,
            "sparse_block_shape": (1, 1),
            "zeros_per_block": 1,
        }
    raise ValueError(
        f"weightnorm has no WeightNormSparsifier setting for pattern {pattern.name!r}; "
        'use "N:M", "unstructured:S" or "blockB:S"'
    )


def weightnorm_masks(
    model: nn.Module, modules: Mapping[str, nn.Linear], pattern: Pattern
) -> dict[str, torch.Tensor]:
    """Run prepare / step / squash_mask on the selected layers and return their keep-masks.

    The weights are left with zeros in place and no parametrization; if anything fails, the
    parametrizations are removed without applying their masks. Weights holding NaN or Inf are
    refused before anything changes (the sparsifier would keep NaNs and rank by them).

    Parameters
    ----------
    model : nn.Module
        The model holding the layers.
    modules : mapping of str to nn.Linear
        The selected layers by fully qualified name.
    pattern : Pattern
        ``nm``, ``block`` or per-layer ``unstructured``.

    Returns
    -------
    dict of str to torch.Tensor
        Bool keep-masks by layer name.

    Raises
    ------
    ValueError
        A selected weight holds NaN or Inf (the message names the layer and the first one).

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(8, 4))
    >>> masks = weightnorm_masks(net, {"0": net[0]}, Pattern.parse("2:4"))
    >>> masks["0"].sum().item(), int((net[0].weight == 0).sum())
    (16, 16)
    """
    from torch.ao.pruning import WeightNormSparsifier
    from torch.nn.utils import parametrize

    # 0. refuse non-finite weights while nothing has changed yet.
    for fqn, module in modules.items():
        check_scores(module.weight.detach(), f"the weight of layer {fqn!r}")
    # 1. the sparsifier, configured as in the tutorial.
    sparsifier = WeightNormSparsifier(**sparsifier_arguments(pattern))
    config = [{"tensor_fqn": f"{fqn}.weight"} for fqn in modules]
    done = False
    try:
        # 2. prepare attaches a FakeSparsity parametrization to each selected weight.
        sparsifier.prepare(model, config)
        # 3. step computes the masks from the weight norms (threads capped at the free cores).
        device = next(iter(modules.values())).weight.device if modules else "cpu"
        with fair_cpu_threads(device):
            sparsifier.step()
        masks = {
            fqn: sparsifier.state[f"{fqn}.weight"]["mask"].detach().to(torch.bool).clone()
            for fqn in modules
        }
        # 4. squash_mask writes the zeros into the weights and removes the parametrizations.
        sparsifier.squash_mask()
        done = True
    finally:
        if not done:
            for module in modules.values():
                if parametrize.is_parametrized(module, "weight"):
                    parametrize.remove_parametrizations(module, "weight", leave_parametrized=False)
    return masks
