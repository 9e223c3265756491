"""How ``sparsify`` puts the explorer's modules in a model's place, and takes them out again.

A q/k/v triple of a self-attention module becomes one
:class:`~explorer.gpu.modules.fused_qkv.SparseQKV` product (:func:`fuse_qkv_triples`), a SwiGLU
block one :class:`~explorer.gpu.modules.gated_mlp.SparseGatedMLP` (:func:`fuse_gated_mlps`), and
a ReLU or tanh-GELU that follows a ``SparseLinear`` in an ``nn.Sequential`` is folded into its
kernel (:func:`fuse_activations`). Each swap is a :class:`SwapUnit`, which knows how to put the original
modules back when measuring shows the swap does not pay.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from torch import nn

from explorer.gpu.modules.sparse_options import SparseOptions
from explorer.gpu.swap.eligibility import block_dtype

__all__ = [
    "SwapUnit",
    "fuse_activations",
    "fuse_gated_mlps",
    "fuse_qkv_triples",
    "part_name",
    "set_module",
    "swapping",
]


@dataclass
class SwapUnit:
    """One swapped module: its new module, how to put the old one back, the layers it runs.

    ``undo`` puts back what the swap changed beside the module itself (an activation folded
    into it, see :func:`fuse_activations`).
    """

    fqn: str
    new: nn.Module
    restore: dict  # place -> original module
    layers: dict  # fqn -> the nn.Linear it replaced
    undo: Callable[[], None] | None = None

    def put_back(self, model: nn.Module) -> None:
        """Put the original modules back in ``model``, and undo what was folded into the new one.

        Parameters
        ----------
        model : torch.nn.Module
            The model the unit was swapped into.

        Examples
        --------
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> first = model[0]
        >>> SwapUnit("0", nn.Identity(), {"0": first}, {"0": first}).put_back(model)
        >>> model[0] is first
        True
        """
        for place, mod in self.restore.items():
            set_module(model, place, mod)
        if self.undo is not None:
            self.undo()
            self.undo = None

    def also_undo(self, step: Callable[[], None]) -> None:
        """Add ``step`` to what :meth:`put_back` undoes (after the steps added before it).

        Parameters
        ----------
        step : callable
            Called without arguments.
        """
        before = self.undo
        self.undo = step if before is None else partial(_in_turn, before, step)


def part_name(unit: nn.Module, layer: nn.Module, index: int) -> str:
    """The name of ``layer`` inside the fused module ``unit`` (its ``index`` if it has none).

    Parameters
    ----------
    unit : torch.nn.Module
        A fused block.
    layer : torch.nn.Module
        One of its layers.
    index : int
        The layer's position, the name used when ``unit`` does not name it.

    Returns
    -------
    str
        For example ``"gate_up"``.

    Examples
    --------
    >>> block = nn.Sequential(nn.Linear(2, 2))
    >>> part_name(block, block[0], 0), part_name(block, nn.Linear(2, 2), 3)
    ('0', '3')
    """
    for name, mod in unit.named_modules():
        if mod is layer and name:
            return name
    return str(index)


def fuse_qkv_triples(model, targets, dtype, report, options: SparseOptions) -> list:
    """Swap eligible self-attention q/k/v triples for one ``SparseQKV`` each.

    Parameters
    ----------
    model : torch.nn.Module
        The model being sparsified; its attention modules gain a ``sparse_qkv`` child and their
        q/k/v places hold its parts.
    targets : list of (str, torch.nn.Linear)
        The Linear layers ``sparsify`` may swap, by name; a triple is fused only when all three
        are among them.
    dtype : torch.dtype or None
        The dtype asked of ``sparsify`` (None: each layer's own 16-bit dtype).
    report : SparsifyReport
        Gains the fused blocks' names, and a note for each triple that could not be fused.
    options : SparseOptions
        The build options of the sparse layers.

    Returns
    -------
    list of SwapUnit
        One unit per fused triple, each able to put the three Linear layers back.
    """
    from explorer.gpu.modules.fused_qkv import SparseQKV, find_qkv

    wanted = dict(targets)
    units = []
    for fqn, mod in list(model.named_modules()):
        names = find_qkv(mod)
        if names is None:
            continue
        fqns = [f"{fqn}.{n}" if fqn else n for n in names]
        if not all(f in wanted for f in fqns):
            continue
        parts = [wanted[f] for f in fqns]
        dt = block_dtype(parts, dtype)
        if dt is None:
            continue
        try:
            new = SparseQKV.from_modules(*parts, options, dtype=dt)
        except (ValueError, TypeError, RuntimeError) as exc:
            report.notes.append(f"{fqn}: q/k/v not fused ({exc}); layer by layer instead")
            continue
        mod.add_module("sparse_qkv", new)
        for name, part in zip(names, new.parts(), strict=True):
            setattr(mod, name, part)
        report.fused.append(f"{fqn}.sparse_qkv")
        layers = dict(zip(fqns, parts, strict=True))
        units.append(
            SwapUnit(f"{fqn}.qkv", new, layers, layers, partial(delattr, mod, "sparse_qkv"))
        )
    return units


def fuse_gated_mlps(model, targets, dtype, report, options: SparseOptions, backend: str) -> list:
    """Swap eligible SwiGLU blocks for ``SparseGatedMLP``.

    Parameters
    ----------
    model : torch.nn.Module
        The model being sparsified; each fused MLP's place holds its ``SparseGatedMLP``.
    targets : list of (str, torch.nn.Linear)
        The Linear layers ``sparsify`` may swap, by name; a block is fused only when its gate,
        up and down projections (or its stacked gate/up and down projections) are all among
        them.
    dtype : torch.dtype or None
        The dtype asked of ``sparsify`` (None: each layer's own 16-bit dtype).
    report : SparsifyReport
        Gains the fused blocks' names, and a note for each block that could not be fused.
    options : SparseOptions
        The build options of the sparse layers.
    backend : str
        The sparse backend of the fused block (``"cusparselt"`` or ``"torch"``).

    Returns
    -------
    list of SwapUnit
        One unit per fused MLP, each able to put the original block back.
    """
    from explorer.gpu.modules.gated_mlp import SparseGatedMLP, gated_mlp_parts

    wanted = dict(targets)
    units = []
    for fqn, mod in list(model.named_modules()):
        part_names = gated_mlp_parts(mod) if fqn else None
        if part_names is None:
            continue  # the root module cannot be swapped in place: its layers go one by one
        names = [f"{fqn}.{n}" for n in part_names]
        if not all(n in wanted for n in names):
            continue
        parts = [wanted[n] for n in names]
        dt = block_dtype(parts, dtype)
        if dt is None:
            continue
        # three parts: gate, up, down; two: a gate/up Linear already stacked (Phi-3, GLM)
        build = SparseGatedMLP.from_modules if len(parts) == 3 else SparseGatedMLP.from_fused
        try:
            new = build(*parts, options, dtype=dt, backend=backend)
        except (ValueError, TypeError, RuntimeError) as exc:
            report.notes.append(f"{fqn}: MLP not fused ({exc}); layer by layer instead")
            continue
        set_module(model, fqn, new)
        report.fused.append(fqn)
        units.append(SwapUnit(fqn, new, {fqn: mod}, dict(zip(names, parts, strict=True))))
    return units


def set_module(model: nn.Module, fqn: str, new: nn.Module) -> None:
    """Put ``new`` at the place ``fqn`` of ``model`` (a dotted name, as ``named_modules`` gives).

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    fqn : str
        Where, for example ``"model.layers.0.mlp"``.
    new : torch.nn.Module
        What goes there.

    Examples
    --------
    >>> model = nn.Sequential(nn.Sequential(nn.Linear(2, 2)))
    >>> set_module(model, "0.0", nn.Identity())
    >>> type(model[0][0]).__name__
    'Identity'
    """
    parent_name, _, child = fqn.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def swapping(model: nn.Module, originals) -> tuple[Callable[[], None], Callable[[], None]]:
    """Two calls: one puts ``originals`` in their places in ``model``, one puts back what is there.

    For timing a sparsified model against its dense self in one process.

    Parameters
    ----------
    model : torch.nn.Module
        The model, its swapped modules in place.
    originals : mapping of str to torch.nn.Module
        ``{place: original module}``, places as ``named_modules`` gives them.

    Returns
    -------
    (callable, callable)
        ``to_originals`` and ``to_swapped``, without arguments; each may be called again.

    Examples
    --------
    >>> model = nn.Sequential(nn.Identity())
    >>> to_originals, to_swapped = swapping(model, {"0": nn.Linear(2, 2)})
    >>> to_originals(); type(model[0]).__name__
    'Linear'
    >>> to_swapped(); type(model[0]).__name__
    'Identity'
    """
    now = {place: model.get_submodule(place) for place in originals}
    return partial(_place, model, dict(originals)), partial(_place, model, now)


def _place(model: nn.Module, table) -> None:
    for fqn, module in table.items():
        set_module(model, fqn, module)


def fuse_activations(model: nn.Module, units: list[SwapUnit] = ()) -> None:
    """In every nn.Sequential, fold ReLU/GELU(tanh) that follow a SparseLinear into it.

    Parameters
    ----------
    model : torch.nn.Module
        The sparsified model; a folded activation's place holds ``nn.Identity``.
    units : list of SwapUnit, optional
        The swaps that made the layers: putting one back (:meth:`SwapUnit.put_back`) puts its
        folded activation back in its place too.
    """
    from explorer.gpu.modules.sparse_linear import SparseLinear

    unit_of = {id(unit.new): unit for unit in units}

    for mod in model.modules():
        if not isinstance(mod, nn.Sequential):
            continue
        names = list(mod._modules)
        for a, b in itertools.pairwise(names):
            lin, act = mod._modules[a], mod._modules[b]
            if not isinstance(lin, SparseLinear) or lin.activation != "none":
                continue
            if lin.backend != "cusparselt" or lin.dtype.itemsize != 2:
                continue
            if isinstance(act, nn.ReLU):
                kind = "relu"
            elif isinstance(act, nn.GELU) and act.approximate == "tanh":
                kind = "gelu"
            else:
                continue
            lin.set_activation(kind)
            mod._modules[b] = nn.Identity()
            unit = unit_of.get(id(lin))
            if unit is not None:
                unit.also_undo(partial(setattr, mod, b, act))


def _in_turn(*steps: Callable[[], None]) -> None:
    for step in steps:
        step()
