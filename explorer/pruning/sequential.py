"""Drivers that feed calibration data to the layers being pruned.

Two ways to gather each layer's inputs:

* **Block by block** (transformers): find the repeated block list (the largest ``nn.ModuleList``
  of same-class children, e.g. ``model.layers`` of a LLaMA-style model or ``encoder.layer`` of
  BERT), capture what block 0 receives (positional arguments and keyword arguments such as the
  attention mask and position embeddings) with a pre-hook that stops the forward pass, then for
  each block: record its selected Linears' inputs while running it on the cached inputs, prune
  them, and run it again to produce the next block's inputs. Later layers therefore see the
  pruned model's activations, and only one block's statistics are in memory at a time.
* **Whole model** (anything else, e.g. a plain MLP): hooks on every selected layer, one pass of
  the calibration set through the model.

Both call ``layer_fn(fqn, module, stats)`` to prune a layer (it changes the weight in place and
returns the keep-mask), then measure the layer's relative reconstruction error against the dense
weight kept in ``snapshot``. With ``layer_fn=None`` they only measure (for methods that pruned
without data).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import check_cancel
from .calibration import (
    InputStats,
    StopForward,
    call_model,
    progress_bar,
    reconstruction_error,
    record_inputs,
)

__all__ = ["DriverResult", "find_blocks", "run_sequential", "run_whole_model"]

LayerFn = Callable[[str, nn.Linear, InputStats], torch.Tensor]


@dataclass
class DriverResult:
    """What a driver produced: masks and errors by layer, and whether it went block by block."""

    masks: dict[str, torch.Tensor] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    blocks: str | None = None


def find_blocks(
    model: nn.Module, selected: Mapping[str, nn.Module]
) -> tuple[str, nn.ModuleList] | None:
    """The largest ``nn.ModuleList`` (by parameters) of same-class blocks holding selected layers.

    Lists of bare Linears are not blocks (the model may apply functions between them).

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    selected : Mapping[str, torch.nn.Module]
        The selected layers, by fully qualified name.

    Returns
    -------
    tuple of (str, torch.nn.ModuleList) or None
        The block list's name and the list, or None when the model has none.

    Examples
    --------
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.layers = nn.ModuleList(nn.Sequential(nn.Linear(4, 4)) for _ in range(2))
    >>> net = Net()
    >>> find_blocks(net, {"layers.0.0": net.layers[0][0]})[0]
    'layers'
    """
    best = None
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.ModuleList) or len(mod) < 2:
            continue
        if len({type(child) for child in mod}) != 1 or isinstance(mod[0], nn.Linear):
            continue
        prefix = f"{name}." if name else ""
        if not any(fqn.startswith(prefix) for fqn in selected):
            continue
        key = (sum(p.numel() for p in mod.parameters()), len(mod))
        if best is None or key > best[0]:
            best = (key, name, mod)
    return None if best is None else (best[1], best[2])


# ----------------------------------------------------------------------------- block inputs
def _clean(value: Any, key: str = "") -> Any:
    """Drop key/value caches from captured block arguments so blocks can be re-run."""
    if key == "use_cache":
        return False
    if type(value).__name__.endswith("Cache"):
        return None
    return value


def _hidden(args: tuple, kwargs: dict) -> torch.Tensor | None:
    value = args[0] if args else kwargs.get("hidden_states")
    return value if isinstance(value, torch.Tensor) else None


def _with_hidden(args: tuple, kwargs: dict, hidden: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


def _first(output: Any) -> torch.Tensor:
    if isinstance(output, tuple | list):
        output = output[0]
    if not isinstance(output, torch.Tensor):
        output = getattr(output, "last_hidden_state", output)
    return output


def _run(block: nn.Module, inputs: tuple[tuple, dict]) -> torch.Tensor:
    args, kwargs = inputs
    return _first(block(*args, **kwargs))


def _capture(
    model: nn.Module,
    blocks: nn.ModuleList,
    batches: Sequence[Any],
    device: torch.device | None,
    cancel: Any,
    progress: bool,
) -> list[tuple[tuple, dict]] | None:
    """Inputs of block 0 for every batch, or None when the blocks do not chain.

    On the first batch the inputs of block 1 are captured too, and block 0 is re-run on its
    cached inputs: its output must equal what block 1 received, else the model does work
    between blocks (or calls them unusually) and the caller falls back to whole-model hooks.
    """
    cached: list[tuple[tuple, dict]] = []
    seen: dict[int, tuple[tuple, dict]] = {}
    stop_at = {1}

    def make_hook(index: int):
        def hook(_mod, args, kwargs):
            if index not in seen:
                seen[index] = (
                    tuple(_clean(a) for a in args),
                    {k: _clean(v, k) for k, v in kwargs.items()},
                )
            if index in stop_at:
                raise StopForward

        return hook

    handles = [
        blocks[0].register_forward_pre_hook(make_hook(0), with_kwargs=True),
        blocks[1].register_forward_pre_hook(make_hook(1), with_kwargs=True),
    ]
    try:
        with progress_bar(len(batches), "calibration: block inputs", progress) as bar:
            for index, batch in enumerate(batches):
                check_cancel(cancel, "while capturing calibration inputs")
                seen.clear()
                stop_at = {1} if index == 0 else {0}
                try:
                    call_model(model, batch, index, device)
                except StopForward:
                    pass
                if 0 not in seen or (index == 0 and 1 not in seen):
                    return None
                cached.append(seen[0])
                if index == 0 and not _chains(blocks[0], seen[0], seen[1]):
                    return None
                bar.update()
    finally:
        for handle in handles:
            handle.remove()
    return cached


def _chains(block0: nn.Module, in0: tuple[tuple, dict], in1: tuple[tuple, dict]) -> bool:
    h0, h1 = _hidden(*in0), _hidden(*in1)
    if h0 is None or h1 is None:
        return False
    try:
        out = _run(block0, in0)
    except Exception:  # a block that cannot be re-run on its own: use whole-model hooks
        return False
    if not isinstance(out, torch.Tensor) or out.shape != h1.shape:
        return False
    scale = float(h1.detach().abs().float().max()) if h1.numel() else 0.0
    return torch.allclose(out.float(), h1.float(), rtol=1e-3, atol=1e-5 + 1e-4 * scale)


# ----------------------------------------------------------------------------- drivers
def _prune_layers(
    modules: Mapping[str, nn.Linear],
    stats: dict[str, InputStats],
    layer_fn: LayerFn | None,
    snapshot: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor],
    result: DriverResult,
    cancel: Any,
) -> None:
    for fqn, module in modules.items():
        check_cancel(cancel, f"before layer {fqn}")
        if layer_fn is not None:
            result.masks[fqn] = layer_fn(fqn, module, stats[fqn])
        elif fqn in masks:
            result.masks[fqn] = masks[fqn]
        result.errors[fqn] = reconstruction_error(snapshot[fqn], module.weight.detach(), stats[fqn])
        del stats[fqn]


def run_whole_model(
    model: nn.Module,
    modules: Mapping[str, nn.Linear],
    batches: Sequence[Any],
    layer_fn: LayerFn | None,
    snapshot: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor] | None = None,
    full: bool | None = None,
    device: torch.device | None = None,
    cancel: Any = None,
    progress: bool = True,
    desc: str = "calibration",
) -> DriverResult:
    """Hook every layer in ``modules``, run the calibration set once, then prune and measure.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    modules : Mapping[str, torch.nn.Linear]
        The layers to prune or measure, by name.
    batches : Sequence[Any]
        The calibration batches.
    layer_fn : callable or None
        ``layer_fn(fqn, module, stats) -> mask`` prunes one layer; None only measures.
    snapshot : Mapping[str, torch.Tensor]
        Each layer's dense weight, by name, for the reconstruction error.
    masks : Mapping[str, torch.Tensor] or None, optional
        Masks already made (when ``layer_fn`` is None), copied into the result.
    full : bool or None, optional
        Keep the full ``X^T X`` of each layer (see :class:`InputStats`).
    device : torch.device or None, optional
        Where to move each batch before the forward pass.
    cancel : threading.Event or object with ``is_set()``, optional
        Checked before each batch and each layer; None never cancels.
    progress : bool, optional
        Whether to show a progress bar.
    desc : str, optional
        The progress bar's label.

    Returns
    -------
    DriverResult
    """
    result = DriverResult()
    with record_inputs(modules, full) as stats:
        with progress_bar(len(batches), desc, progress) as bar:
            for index, batch in enumerate(batches):
                check_cancel(cancel, f"before calibration batch {index}")
                call_model(model, batch, index, device)
                bar.update()
    _prune_layers(modules, stats, layer_fn, snapshot, masks or {}, result, cancel)
    return result


def run_sequential(
    model: nn.Module,
    modules: Mapping[str, nn.Linear],
    batches: Sequence[Any],
    layer_fn: LayerFn | None,
    snapshot: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor] | None = None,
    full: bool | None = None,
    device: torch.device | None = None,
    cancel: Any = None,
    progress: bool = True,
    desc: str = "pruning",
) -> DriverResult:
    """Prune (or measure) block by block where the model has a block list, else whole-model.

    Layers outside the block list (e.g. a classifier head) are handled afterwards by one
    whole-model pass, so they too see the pruned blocks' outputs.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    modules : Mapping[str, torch.nn.Linear]
        The layers to prune or measure, by name.
    batches : Sequence[Any]
        The calibration batches.
    layer_fn : callable or None
        ``layer_fn(fqn, module, stats) -> mask`` prunes one layer; None only measures.
    snapshot : Mapping[str, torch.Tensor]
        Each layer's dense weight, by name, for the reconstruction error.
    masks : Mapping[str, torch.Tensor] or None, optional
        Masks already made (when ``layer_fn`` is None), copied into the result.
    full : bool or None, optional
        Keep the full ``X^T X`` of each layer (see :class:`InputStats`).
    device : torch.device or None, optional
        Where to move each batch before the forward pass.
    cancel : threading.Event or object with ``is_set()``, optional
        Checked between batches and layers; None never cancels.
    progress : bool, optional
        Whether to show a progress bar.
    desc : str, optional
        The progress bar's label.

    Returns
    -------
    DriverResult
    """
    masks = masks or {}
    found = find_blocks(model, modules)
    cached = None
    if found is not None:
        cached = _capture(model, found[1], batches, device, cancel, progress)
        if cached is None:
            warnings.warn(
                f"the blocks in {found[0]!r} do not feed each other directly; "
                "gathering calibration inputs with whole-model hooks instead",
                stacklevel=3,
            )
    if found is None or cached is None:
        return run_whole_model(
            model, modules, batches, layer_fn, snapshot, masks, full, device, cancel, progress, desc
        )
    name, blocks = found
    result = DriverResult(blocks=name)
    per_block = [
        {f: m for f, m in modules.items() if f.startswith(f"{name}.{i}.")}
        for i in range(len(blocks))
    ]
    rest = {f: m for f, m in modules.items() if not any(f in group for group in per_block)}
    last = max(i for i, group in enumerate(per_block) if group)
    inputs = cached
    with progress_bar(last + 1, f"{desc}: blocks of {name}", progress) as bar:
        for i in range(last + 1):
            block, group = blocks[i], per_block[i]
            outputs = None
            if group:
                # 1. record the selected layers' inputs while running the block.
                keep = layer_fn is None
                with record_inputs(group, full) as stats:
                    outs = []
                    for j, inp in enumerate(inputs):
                        check_cancel(cancel, f"in block {i}, batch {j}")
                        out = _run(block, inp)
                        if keep:
                            outs.append(out)
                outputs = outs if keep else None
                # 2. prune each layer from its statistics and measure its error.
                _prune_layers(group, stats, layer_fn, snapshot, masks, result, cancel)
            if i < last:
                # 3. the (pruned) block's outputs are the next block's inputs.
                if outputs is None:
                    outputs = []
                    for j, inp in enumerate(inputs):
                        check_cancel(cancel, f"in block {i}, batch {j}")
                        outputs.append(_run(block, inp))
                inputs = [_with_hidden(*inp, out) for inp, out in zip(inputs, outputs, strict=True)]
            bar.update()
    del inputs
    if rest:
        tail = run_whole_model(
            model, rest, batches, layer_fn, snapshot, masks, full, device, cancel, progress, desc
        )
        result.masks.update(tail.masks)
        result.errors.update(tail.errors)
    return result
