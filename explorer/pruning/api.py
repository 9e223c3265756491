"""``prune``: one entry point for every pruning method."""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..errors import PruningCancelled, validate_cancel
from ..groupquant import Quantization
from ..patterns import Pattern
from .admm import admm_update, admm_update_on_grid
from .calibration import InputStats, as_batches, model_device, selected_linears
from .methods import (
    check_quantize,
    check_selection,
    check_steps,
    method_info,
    quantized_sparsegpt,
)
from .permute import permute_channels, undo_permutation
from .result import PruneResult
from .scale_refit import refit_scales
from .sequential import run_sequential

__all__ = ["prune"]


# ----------------------------------------------------------------------------- validation
def _warn_tied(model: nn.Module, chosen: dict[str, nn.Linear]) -> None:
    owners: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(param), []).append(name)
    for fqn, mod in chosen.items():
        names = owners.get(id(mod.weight), [])
        others = [n for n in names if n != f"{fqn}.weight"]
        if others:
            warnings.warn(
                f"{fqn}.weight is shared with {others[0]}; pruning it prunes both. "
                f"Skip it with filter_fn if that is not wanted",
                stacklevel=3,
            )


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    modes = {mod: mod.training for mod in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for mod, training in modes.items():
            mod.training = training


def _with_update(
    layer_fn: Callable[[str, nn.Linear, InputStats], torch.Tensor] | None,
    masks: dict[str, torch.Tensor],
    snapshot: dict[str, torch.Tensor],
    clock: dict[str, float],
    quant: Quantization | None = None,
    scales: dict[str, torch.Tensor] | None = None,
) -> Callable[[str, nn.Linear, InputStats], torch.Tensor]:
    """Choose the mask (``layer_fn``, or the precomputed one), then run the ADMM update.

    With ``quant``, ``layer_fn`` quantized the layer and put its scales in ``scales``: the
    update keeps the weights on that grid (:func:`admm_update_on_grid`), then refits the
    scales to the final codes (:func:`~explorer.pruning.scale_refit.refit_scales`), which
    replaces the layer's entry in ``scales``.
    """

    def update(fqn: str, mod: nn.Linear, stats: InputStats) -> torch.Tensor:
        mask = layer_fn(fqn, mod, stats) if layer_fn is not None else masks[fqn]
        started = time.perf_counter()
        dense = snapshot[fqn].to(mod.weight.device)
        if quant is None:
            new = admm_update(dense, mask, stats.hessian, start=mod.weight)
        else:
            new = admm_update_on_grid(
                dense, mask, stats.hessian, quant, scales[fqn], start=mod.weight
            )
            # then the scales that fit the final codes best (row by row, never worse)
            new, scales[fqn] = refit_scales(dense, new, stats.hessian, quant, scales[fqn])
        mod.weight.data.copy_(new)
        clock["update"] += time.perf_counter() - started
        return mask

    return update


def _check_update(update: Any, batches: Any, method: str) -> None:
    if update is not None and batches is None:
        raise ValueError(
            f"update={update!r} re-optimises the kept weights on calibration data: pass "
            f"calibration= (the same batches {method!r} would use), or update=None"
        )


# ----------------------------------------------------------------------------- prune
def prune(
    model: nn.Module,
    method: str = "magnitude",
    pattern: str | Pattern = "2:4",
    calibration: Any = None,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    inplace: bool = True,
    seed: int = 0,
    progress: bool = True,
    cancel: Any = None,
    permute: bool = False,
    update: str | None = None,
    permute_seconds: float = 60.0,
    quantize: str | None = None,
    group_size: int = 128,
) -> PruneResult:
    """Prune the model's Linear layers to a sparsity pattern.

    The contract: each pruned weight is left dense with zeros in place, and the result holds the
    bool keep-mask of each layer. If anything fails half way (an error, a cancellation), the
    selected weights are restored exactly as they were.

    Parameters
    ----------
    model : nn.Module
        The model; its selected layers are changed in place unless ``inplace=False``.
    method : str
        One of :data:`METHODS`: ``"random"``, ``"magnitude"`` (default), ``"weightnorm"``,
        ``"wanda"`` or ``"sparsegpt"`` (the last two need ``calibration``).
    pattern : str or Pattern
        ``"2:4"`` (default), ``"N:M"``, ``"unstructured:S"``, ``"unstructured-row:S"``,
        ``"blockB:S"`` or ``"rows:S"``; each method lists what it supports.
    calibration : iterable of batches, optional
        Inputs passed as ``model(batch)``, ``model(**batch)`` for dicts (tokenized Hugging Face
        input as it is) or ``model(*batch)`` for tuples; a single tensor or dict is one batch.
        With it, every method also reports per-layer reconstruction errors. Transformer models
        (with a repeated block list) are calibrated block by block, so later layers see the
        pruned model's activations.
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool`` asked about every ``nn.Linear``; default all of them.
    inplace : bool
        If False, prune a deep copy and leave ``model`` untouched (the copy is ``result.model``).
    seed : int
        Seed of the ``random`` method.
    progress : bool
        Show tqdm progress bars.
    cancel : threading.Event or object with ``is_set()``, optional
        Checked between batches and layers; when set, the model is restored and
        :class:`PruningCancelled` is raised.
    permute : bool
        N:M patterns only: first reorder input channels where that is free
        (:func:`permute_channels`), so the mask keeps more; the model's function is unchanged
        by the reordering. ``result.permutation`` says which layers were reordered.
    update : {None, "admm"}
        After the mask is chosen, re-optimise the kept weights of each layer on the
        calibration inputs (ADMM, Boža 2024); needs ``calibration``. Works after every method,
        and with ``quantize``, where the kept weights stay on their group's grid and scales
        (:func:`~explorer.pruning.admm.admm_update_on_grid`).
    permute_seconds : float
        Time budget of the channel search (positive).
    quantize : {None, "int4", "int8"}
        SparseGPT only: quantize the kept weights inside the column loop as well, group-wise
        symmetric (:mod:`explorer.groupquant`), with the rounding error fed back through the
        inverse Hessian (joint pruning and quantization). The columns go through the loop
        heaviest inputs first, in whole scale and N:M groups
        (:func:`~explorer.pruning.sparsegpt.importance_order`, GPTQ's act-order). Each weight
        then holds the dequantized values (zeros in place); ``result.scales`` holds the scales.
    group_size : int
        Input columns per quantization scale (a multiple of 4 dividing every selected layer's
        ``in_features``); used with ``quantize``.

    Returns
    -------
    PruneResult
        Masks, method, pattern, time taken (with the permutation and update times apart),
        per-layer reconstruction errors and layer names.

    Raises
    ------
    ValueError
        Unknown method, a pattern the method does not support, a method that needs calibration
        called without it, a filter that selects nothing, a layer width the pattern cannot
        divide, or calibration batches the model rejects.
    PruningCancelled
        When ``cancel`` was set; the model is restored first.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> net = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    >>> calib = [torch.randn(32, 16) for _ in range(2)]
    >>> result = prune(net, "sparsegpt", "2:4", calibration=calib, progress=False)
    >>> result.layers, result.density
    (('0', '2'), 0.5)
    >>> bool((net[0].weight[~result.masks["0"]] == 0).all())
    True
    """
    start = time.perf_counter()
    pattern = Pattern.parse(pattern)
    info = method_info(method, pattern)
    validate_cancel(cancel)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    batches = as_batches(calibration)
    if info.needs_calibration and batches is None:
        raise ValueError(
            f"method {method!r} needs calibration data: pass calibration= an iterable of input "
            f"batches (e.g. calibration=[x[:64], x[64:128]], or tokenized dicts for a language "
            f"model); magnitude, random and weightnorm work without it"
        )
    check_steps(permute, update, pattern)
    _check_update(update, batches, method)
    target = model if inplace else copy.deepcopy(model)
    chosen, names = selected_linears(target, filter_fn)
    check_selection(target, chosen, names, pattern)
    quant = check_quantize(quantize, group_size, info.name, pattern, chosen)
    scales: dict[str, torch.Tensor] = {}
    _warn_tied(target, chosen)
    permutation = None
    if permute:
        # 0. reorder channels first (undone below if anything later fails).
        permutation = permute_channels(
            target, pattern, batches, filter_fn, permute_seconds, progress, cancel
        )
    # 1. snapshot the selected weights so a failure can restore them bit for bit.
    snapshot = {fqn: mod.weight.detach().to("cpu", copy=True) for fqn, mod in chosen.items()}
    device = model_device(target)
    clock = {"update": 0.0}
    try:
        with torch.no_grad(), _eval_mode(target):
            if info.needs_calibration:
                layer_fn = info.layer_fn(pattern)
                if quant is not None:
                    layer_fn = quantized_sparsegpt(pattern, quant, scales)
                if update is not None:
                    layer_fn = _with_update(layer_fn, {}, snapshot, clock, quant, scales)
                # 2a. gather statistics (block by block where possible), prune, measure.
                driven = run_sequential(
                    target,
                    chosen,
                    batches,
                    layer_fn,
                    snapshot,
                    full=True if info.needs_hessian or update else None,
                    device=device,
                    cancel=cancel,
                    progress=progress,
                    desc=f"{info.name} {pattern.name}",
                )
                masks, errors, blocks = driven.masks, driven.errors, driven.blocks
            else:
                # 2b. prune from the weights alone, then measure on calibration if given.
                masks = info.data_free_masks(target, chosen, pattern, seed, cancel, progress)
                errors, blocks = {}, None
                if batches is not None:
                    measure = None if update is None else _with_update(None, masks, snapshot, clock)
                    driven = run_sequential(
                        target,
                        chosen,
                        batches,
                        measure,
                        snapshot,
                        masks,
                        full=True if update else None,
                        device=device,
                        cancel=cancel,
                        progress=progress,
                        desc="reconstruction error" if update is None else f"{update} update",
                    )
                    errors, blocks = driven.errors, driven.blocks
    except PruningCancelled as exc:
        _restore(target, snapshot, permutation)
        raise PruningCancelled(
            f"pruning with {method!r} was cancelled ({exc}); the model's weights were restored"
        ) from None
    except BaseException:
        _restore(target, snapshot, permutation)
        raise
    return PruneResult(
        masks={fqn: masks[fqn] for fqn in chosen},
        method=info.name,
        pattern=pattern,
        seconds=time.perf_counter() - start,
        errors={fqn: errors[fqn] for fqn in chosen if fqn in errors},
        layers=tuple(chosen),
        model=target,
        blocks=blocks,
        calibration_batches=0 if batches is None else len(batches),
        seed=seed,
        update=update,
        update_seconds=clock["update"],
        permutation=permutation,
        quantize=quantize,
        group_size=None if quant is None else quant.group_size,
        scales={fqn: scales[fqn] for fqn in chosen if fqn in scales},
    )


def _restore(model: nn.Module, snapshot: dict[str, torch.Tensor], permutation: Any = None) -> None:
    with torch.no_grad():
        for fqn, saved in snapshot.items():
            model.get_submodule(fqn).weight.data.copy_(saved)
    if permutation is not None:
        undo_permutation(model, permutation)
