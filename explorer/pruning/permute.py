"""``permute_channels``: reorder input channels so an N:M mask keeps more, without changing the model.

A layer's input channels can be reordered for free when the layer that produces them can have
its output rows reordered the same way and nothing else reads those outputs. Then the model
computes exactly the same function (up to the order of float additions), while each N:M group
of the consumer holds a different set of channels. Where this holds:

* **gated MLPs** (LLaMA-style ``gate_proj``/``up_proj`` -> ``down_proj``): reorder the rows of
  gate and up and the columns of down; the activation and product are element-wise;
* **BERT-style MLPs** (``intermediate.dense`` -> ``output.dense``) and **plain**
  ``nn.Sequential`` MLPs (Linear, element-wise activations or dropout, Linear);
* **attention output projections** (``v_proj`` -> ``o_proj``; ``attention.self.value`` ->
  ``attention.output.dense``): only within each head, because the attention weights mix
  positions, not dimensions. With grouped-query attention one value head serves several query
  heads, so those heads' columns of the output projection share one order.

Every other layer (those reading the residual stream after a norm, for instance) is left alone,
and the result says why. The order itself comes from
:func:`explorer.pruning.permutation_search.search_permutation`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import check_cancel, validate_cancel
from ..patterns import Pattern
from .calibration import (
    as_batches,
    call_model,
    model_device,
    progress_bar,
    record_inputs,
    selected_linears,
)
from .permutation_result import PermutationResult, PermutedLayer
from .permutation_search import search_permutation
from .permute_producers import ChannelGroup, find_producers

__all__ = ["full_column_order", "permute_channels", "undo_permutation"]


def _shared(model: nn.Module, names: Sequence[str]) -> str | None:
    """A reason to skip when a weight of ``names`` is also used under another name (tied)."""
    owners: dict[int, list[str]] = {}
    for pname, param in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(param), []).append(pname)
    for name in names:
        for param_name, param in model.get_submodule(name).named_parameters(recurse=False):
            others = [o for o in owners.get(id(param), []) if o != f"{name}.{param_name}"]
            if others:
                return (
                    f"{name}.{param_name} is tied to {others[0]}; reordering it would change both"
                )
    return None


def full_column_order(group: ChannelGroup, orders: list[torch.Tensor], width: int) -> torch.Tensor:
    """The whole column order of a consumer ``width`` wide, from each segment's order.

    Parameters
    ----------
    group : ChannelGroup
        The consumer and its producers; its segments say where each order applies.
    orders : list of torch.Tensor
        One order per segment, each a permutation of ``range(length)``.
    width : int
        The consumer's ``in_features``; columns outside every segment keep their place.

    Returns
    -------
    torch.Tensor
        ``cols`` such that ``weight[:, cols]`` is the reordered weight.
    """
    full = torch.arange(width)
    for (length, offsets, _), order in zip(group.segments, orders, strict=True):
        for off in offsets:
            full[off : off + length] = order + off
    return full


def _apply(model: nn.Module, group: ChannelGroup, orders: list[torch.Tensor]) -> None:
    """Reorder the consumer's columns and the producers' rows (and biases)."""
    consumer = model.get_submodule(group.consumer)
    cols = full_column_order(group, orders, consumer.in_features)
    with torch.no_grad():
        consumer.weight.copy_(consumer.weight[:, cols.to(consumer.weight.device)])
        for pname in group.producers:
            producer = model.get_submodule(pname)
            rows = torch.arange(producer.out_features)
            for (length, _, offsets), order in zip(group.segments, orders, strict=True):
                for off in offsets:
                    rows[off : off + length] = order + off
            idx = rows.to(producer.weight.device)
            producer.weight.copy_(producer.weight[idx])
            if producer.bias is not None:
                producer.bias.copy_(producer.bias[idx])


def _inverse(orders: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.argsort(o) for o in orders]


def _scores(weight: torch.Tensor, norms: torch.Tensor | None) -> torch.Tensor:
    s = weight.detach().abs().float().cpu()
    return s if norms is None else s * norms.clamp_min(0).sqrt().cpu().reshape(1, -1)


def _column_norms(
    model: nn.Module, consumers: dict[str, nn.Linear], batches: list, cancel: Any, progress: bool
) -> dict[str, torch.Tensor]:
    """``||X_j||^2`` of every consumer's input columns over the calibration batches."""
    device = model_device(model)
    with torch.no_grad(), record_inputs(consumers, full=False) as stats:
        with progress_bar(len(batches), "permutation: input norms", progress) as bar:
            for index, batch in enumerate(batches):
                check_cancel(cancel, f"before calibration batch {index}")
                call_model(model, batch, index, device)
                bar.update()
        return {name: st.col_norms_sq.clone() for name, st in stats.items()}


def _outputs(model: nn.Module, batch: Any) -> torch.Tensor | None:
    with torch.no_grad():
        out = call_model(model, batch, 0, model_device(model))
    out = getattr(out, "logits", out)
    if isinstance(out, tuple | list):
        out = out[0]
    return out.detach().float() if isinstance(out, torch.Tensor) else None


def permute_channels(
    model: nn.Module,
    pattern: str | Pattern = "2:4",
    calibration: Any = None,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    seconds: float = 60.0,
    progress: bool = True,
    cancel: Any = None,
    max_rounds: int = 50,
    inplace: bool = True,
) -> PermutationResult:
    """Reorder input channels (and their producers' outputs) so an N:M mask keeps more score.

    The model is changed in place but computes the same function: every reordered input
    channel of a layer is matched by the same reordering of the rows (and bias) of the layer
    that produces it. Only layers with such a free producer are reordered (gated, BERT-style and
    ``nn.Sequential`` MLPs; attention output projections within heads); the result lists the
    others with the reason.

    Parameters
    ----------
    model : nn.Module
        The (dense) model; changed in place.
    pattern : str or Pattern
        An N:M pattern such as ``"2:4"``.
    calibration : iterable of batches, optional
        With it, channels are scored as Wanda does (``|W| * ||X_j||``), else by ``|W|``. The
        first batch is also used to check that the outputs did not change.
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool``: which Linears are candidates (as in ``prune``).
    seconds : float
        Time budget of the search over all layers (must be positive); a layer whose turn comes
        after it is spent is left as it is and listed as skipped. The search stops at the
        budget, so on a slower or busier machine it may do fewer rounds and find a slightly
        different order; pass ``max_rounds`` with a generous budget for a reproducible result.
    progress : bool
        Show tqdm progress bars.
    cancel : threading.Event or object with ``is_set()``, optional
        Checked between layers; when set, every reordering is undone and
        :class:`PruningCancelled` is raised.
    max_rounds : int
        At most this many assignment rounds (over the M slots) per layer (positive).
    inplace : bool
        If False, reorder a deep copy (``result.model``) and leave ``model`` untouched.

    Returns
    -------
    PermutationResult
        The reordered layers with their kept score before and after, the skipped ones and why.

    Raises
    ------
    ValueError
        A pattern that is not N:M, a non-positive time budget, or outputs that changed (the
        reordering is undone first).

    Examples
    --------
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))
    >>> x = torch.randn(4, 8)
    >>> before = net(x)
    >>> result = permute_channels(net, "2:4", progress=False)
    >>> list(result.permuted), result.mean_gain > 0, torch.allclose(net(x), before, atol=1e-6)
    (['2'], True, True)
    """
    start = time.perf_counter()
    pattern = Pattern.parse(pattern)
    if pattern.kind != "nm":
        raise ValueError(
            f"channel permutation helps only N:M patterns, got {pattern.name!r}; an unstructured "
            "or block mask does not depend on the channel order. Use e.g. pattern='2:4'"
        )
    if not isinstance(seconds, int | float) or not seconds > 0:
        raise ValueError(
            f"seconds (the time budget) must be a positive number, got {seconds!r}; "
            "e.g. seconds=60 (skip the step instead of passing 0)"
        )
    if not isinstance(max_rounds, int) or max_rounds < 1:
        raise ValueError(f"max_rounds must be a positive int, got {max_rounds!r}; e.g. 50")
    validate_cancel(cancel)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    batches = as_batches(calibration)
    if not inplace:
        import copy

        model = copy.deepcopy(model)
    chosen, _ = selected_linears(model, filter_fn)
    groups, notes = find_producers(model)
    skipped: dict[str, str] = {}
    todo: dict[str, ChannelGroup] = {}
    # 1. decide which selected layers can be reordered, and why not.
    for name, mod in chosen.items():
        group = groups.get(name)
        if group is None:
            skipped[name] = notes.get(
                name,
                "no free producer: its input is not made by a Linear whose output rows can be "
                "reordered (e.g. it reads the residual stream after a norm)",
            )
            continue
        bad = [ln for ln, _, _ in group.segments if ln % pattern.m]
        if bad:
            skipped[name] = f"{bad[0]} channels per reorderable segment, not a multiple of M"
            continue
        tied = _shared(model, (name, *group.producers))
        if tied:
            skipped[name] = tied
            continue
        if mod.weight.is_meta:
            skipped[name] = "on the meta device"
            continue
        todo[name] = group
    modes = {mod: mod.training for mod in model.modules()}
    model.eval()
    try:
        return _run(
            model,
            pattern,
            batches,
            chosen,
            todo,
            skipped,
            (seconds, max_rounds),
            progress,
            cancel,
            start,
        )
    finally:
        for mod, training in modes.items():
            mod.training = training


def _run(
    model: nn.Module,
    pattern: Pattern,
    batches: list | None,
    chosen: dict[str, nn.Linear],
    todo: dict[str, ChannelGroup],
    skipped: dict[str, str],
    budget: tuple[float, int],
    progress: bool,
    cancel: Any,
    start: float,
) -> PermutationResult:
    reference = _outputs(model, batches[0]) if batches and todo else None
    norms = (
        _column_norms(model, {n: chosen[n] for n in todo}, batches, cancel, progress)
        if (batches and todo)
        else {}
    )
    done: dict[str, PermutedLayer] = {}
    applied: list[tuple[ChannelGroup, list[torch.Tensor]]] = []
    seconds, max_rounds = budget
    deadline = time.perf_counter() + seconds
    try:
        with (
            torch.no_grad(),
            progress_bar(len(todo), f"permutation {pattern.name}", progress) as bar,
        ):
            for k, (name, group) in enumerate(todo.items()):
                check_cancel(cancel, f"before layer {name}")
                left = deadline - time.perf_counter()
                if left <= 0:
                    skipped[name] = "the time budget was spent before its turn"
                    bar.update()
                    continue
                t0 = time.perf_counter()
                scores = _scores(chosen[name].weight, norms.get(name))
                share = left / (len(todo) - k) / len(group.segments)
                orders, before, after = [], 0.0, 0.0
                # 2. search each segment's order on the stacked columns that share it.
                for length, offsets, _ in group.segments:
                    stacked = torch.cat([scores[:, o : o + length] for o in offsets])
                    order, b, a, _ = search_permutation(
                        stacked, pattern.n, pattern.m, share, max_rounds
                    )
                    orders.append(order)
                    before, after = before + b, after + a
                # 3. reorder the consumer's columns and its producers' rows.
                _apply(model, group, orders)
                applied.append((group, orders))
                done[name] = PermutedLayer(
                    name, group.producers, group.kind, before, after, time.perf_counter() - t0
                )
                bar.update()
        # 4. the outputs must not change (beyond float rounding).
        if reference is not None:
            check_cancel(cancel, "before the output check")
            after_out = _outputs(model, batches[0])
            scale = float(reference.abs().max()) if reference.numel() else 0.0
            if after_out is None or not torch.allclose(
                after_out, reference, rtol=1e-3, atol=1e-4 * max(scale, 1.0)
            ):
                diff = float((after_out - reference).abs().max()) if after_out is not None else 0.0
                raise ValueError(
                    f"reordering channels changed the model's outputs (max difference {diff:.3g});"
                    " a layer named like a known producer is used differently in this model. The"
                    " reordering was undone; choose layers with filter_fn"
                )
    except BaseException:
        _undo(model, applied)
        raise
    return PermutationResult(
        pattern=pattern,
        permuted=done,
        skipped=skipped,
        seconds=time.perf_counter() - start,
        orders={g.consumer: (g, o) for g, o in applied},
        scored_by="|W| * ||X||" if norms else "|W|",
        model=model,
    )


def _undo(model: nn.Module, applied: list[tuple[ChannelGroup, list[torch.Tensor]]]) -> None:
    for group, orders in reversed(applied):
        _apply(model, group, _inverse(orders))


def undo_permutation(model: nn.Module, result: PermutationResult) -> None:
    """Put every channel back in its original order (exactly: reordering only moves values).

    Parameters
    ----------
    model : nn.Module
        The model :func:`permute_channels` reordered, changed in place.
    result : PermutationResult
        What :func:`permute_channels` returned for it.

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    >>> saved = {k: v.clone() for k, v in net.state_dict().items()}
    >>> undo_permutation(net, permute_channels(net, "2:4", progress=False))
    >>> all(torch.equal(saved[k], v) for k, v in net.state_dict().items())
    True
    """
    _undo(model, list(result.orders.values()))
