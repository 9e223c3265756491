"""The pruning methods: one registry entry a method, holding what it needs and how it runs.

Adding a method is one entry in :data:`METHODS`: a :class:`MethodInfo` with its metadata and
the function that prunes with it, either per layer from calibration statistics
(``calibrated``), per layer from the weights alone (``from_weights``), or over the whole
model at once (``whole_model``). :func:`explorer.pruning.prune` asks the entry, never the name.

Examples
--------
>>> METHODS["wanda"].needs_calibration, METHODS["magnitude"].needs_calibration
(True, False)
>>> method_info("weightnorm", Pattern.parse("unstructured-row:0.5"))
Traceback (most recent call last):
...
ValueError: method 'weightnorm' does not support pattern 'unstructured-row:0.5' (kind 'unstructured'); it supports "N:M", "unstructured:S" (per layer), "blockB:S". Use magnitude or random for any pattern kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from ..checks import check_pattern
from ..errors import check_cancel
from ..groupquant import Quantization
from ..patterns import Pattern
from .calibration import InputStats, progress_bar
from .magnitude import magnitude_mask
from .random import random_mask
from .sparsegpt import sparsegpt_prune, sparsegpt_quantize_prune
from .wanda import wanda_mask
from .weightnorm import weightnorm_masks

__all__ = [
    "METHODS",
    "UPDATES",
    "MethodInfo",
    "check_quantize",
    "check_selection",
    "check_steps",
    "method_info",
    "quantized_sparsegpt",
]

#: Weight updates that can follow any method once its mask is chosen (``prune(update=...)``).
UPDATES = ("admm",)

_ALL_KINDS = ("nm", "unstructured", "block", "rows")
_ANY = '"N:M", "unstructured:S", "unstructured-row:S", "blockB:S", "rows:S"'

#: ``calibrated(module, pattern, stats) -> mask``: prunes one layer in place from its inputs.
CalibratedFn = Callable[[nn.Linear, Pattern, InputStats], torch.Tensor]
#: ``from_weights(weight, pattern, seed, fqn) -> mask``: one layer's mask from its weight.
FromWeightsFn = Callable[[torch.Tensor, Pattern, int, str], torch.Tensor]
#: ``whole_model(model, chosen, pattern) -> masks``: every chosen layer's mask at once.
WholeModelFn = Callable[[nn.Module, dict, Pattern], dict]


@dataclass(frozen=True)
class MethodInfo:
    """A pruning method: what it needs and supports, and the function that runs it.

    Attributes
    ----------
    name : str
        The name to pass as ``method=``.
    kinds : tuple of str
        Pattern kinds it supports (see :class:`explorer.patterns.Pattern`).
    patterns : str
        The supported patterns in words, for messages and menus.
    needs_calibration : bool
        Whether it needs ``calibration=``.
    updates_weights : bool
        Whether it changes kept weights too (not only zeros the pruned ones).
    summary : str
        One line on what it does.
    calibrated, from_weights, whole_model : callable, optional
        How it prunes (exactly one is set): per layer from calibration statistics, per layer
        from the weight alone, or the whole model at once.
    needs_hessian : bool
        Whether the calibrated function reads the full input Hessian (not only column norms).
    row_patterns : bool
        Whether it supports ``unstructured-row:S`` (per output row) when it supports
        unstructured patterns.
    """

    name: str
    kinds: tuple[str, ...]
    patterns: str
    needs_calibration: bool
    updates_weights: bool
    summary: str
    calibrated: CalibratedFn | None = field(default=None, repr=False, compare=False)
    from_weights: FromWeightsFn | None = field(default=None, repr=False, compare=False)
    whole_model: WholeModelFn | None = field(default=None, repr=False, compare=False)
    needs_hessian: bool = False
    row_patterns: bool = True

    def supports(self, pattern: Pattern) -> bool:
        """Whether ``pattern`` is one this method can produce.

        Parameters
        ----------
        pattern : Pattern
            The sparsity pattern.

        Returns
        -------
        bool

        Examples
        --------
        >>> METHODS["wanda"].supports(Pattern.parse("block16:0.5"))
        False
        """
        if pattern.kind not in self.kinds:
            return False
        return self.row_patterns or not (pattern.kind == "unstructured" and pattern.per_row)

    def layer_fn(self, pattern: Pattern) -> Callable[[str, nn.Linear, InputStats], torch.Tensor]:
        """The per-layer step :func:`~explorer.pruning.sequential.run_sequential` calls.

        Parameters
        ----------
        pattern : Pattern
            The sparsity pattern each layer is pruned to.

        Returns
        -------
        callable
            ``step(fqn, module, stats) -> mask``: prunes one layer from its input statistics and
            returns its keep-mask.
        """
        if self.calibrated is None:
            raise ValueError(f"method {self.name!r} prunes without calibration statistics")
        run = self.calibrated
        return lambda fqn, mod, stats: run(mod, pattern, stats)

    def data_free_masks(
        self,
        model: nn.Module,
        chosen: dict[str, nn.Linear],
        pattern: Pattern,
        seed: int,
        cancel: Any,
        progress: bool,
    ) -> dict[str, torch.Tensor]:
        """Prune ``chosen`` in place from the weights alone; the keep-masks by layer.

        Parameters
        ----------
        model : torch.nn.Module
            The whole model (methods that prune the model at once read it).
        chosen : dict[str, torch.nn.Linear]
            The layers to prune, by name.
        pattern : Pattern
            The sparsity pattern.
        seed : int
            Seed for the methods that draw random numbers.
        cancel : threading.Event or object with ``is_set()``, optional
            Checked before each layer; None never cancels.
        progress : bool
            Whether to show a progress bar.

        Returns
        -------
        dict[str, torch.Tensor]
            The keep-mask of each pruned layer, by name.
        """
        if self.whole_model is not None:
            check_cancel(cancel, f"before {self.name}")
            return self.whole_model(model, chosen, pattern)
        if self.from_weights is None:
            raise ValueError(f"method {self.name!r} needs calibration statistics")
        masks = {}
        with progress_bar(len(chosen), f"{self.name} {pattern.name}", progress) as bar:
            for fqn, mod in chosen.items():
                check_cancel(cancel, f"before layer {fqn}")
                masks[fqn] = _apply(mod, self.from_weights(mod.weight, pattern, seed, fqn))
                bar.update()
        return masks


def _apply(module: nn.Linear, mask: torch.Tensor) -> torch.Tensor:
    module.weight.data.masked_fill_(~mask, 0)
    return mask


def _wanda(mod: nn.Linear, pattern: Pattern, stats: InputStats) -> torch.Tensor:
    return _apply(mod, wanda_mask(mod.weight, pattern, stats))


def _sparsegpt(mod: nn.Linear, pattern: Pattern, stats: InputStats) -> torch.Tensor:
    new, mask = sparsegpt_prune(mod.weight, stats.hessian, pattern)
    mod.weight.data.copy_(new)
    return mask


def quantized_sparsegpt(
    pattern: Pattern, quant: Quantization, scales: dict[str, torch.Tensor]
) -> Callable[[str, nn.Linear, InputStats], torch.Tensor]:
    """The per-layer step of SparseGPT with joint quantization; records each layer's scales.

    The layer's weight is set to the dequantized values (zeros in place) and ``scales[fqn]``
    to its float32 ``[out, in / group_size]`` scales.

    Parameters
    ----------
    pattern : Pattern
        The sparsity pattern.
    quant : Quantization
        The quantization format and group size.
    scales : dict[str, torch.Tensor]
        Filled with each layer's scales, by name, as the step runs.

    Returns
    -------
    callable
        ``step(fqn, module, stats) -> mask``, the per-layer step.
    """

    def step(fqn: str, mod: nn.Linear, stats: InputStats) -> torch.Tensor:
        new, mask, layer_scales = sparsegpt_quantize_prune(
            mod.weight, stats.hessian, pattern, quant
        )
        mod.weight.data.copy_(new)
        scales[fqn] = layer_scales.cpu()
        return mask

    return step


def check_steps(permute: Any, update: Any, pattern: Pattern) -> None:
    """Validate ``prune(permute=, update=)`` against the pattern (calibration is checked apart).

    Parameters
    ----------
    permute : Any
        The ``permute=`` argument of ``prune``.
    update : Any
        The ``update=`` argument (None for no update).
    pattern : Pattern
        The sparsity pattern.

    Raises
    ------
    ValueError
        ``permute`` for a pattern other than N:M, or an update not in :data:`UPDATES`.

    Examples
    --------
    >>> check_steps(True, "admm", Pattern.parse("2:4"))
    >>> check_steps(False, "sgd", Pattern.parse("2:4"))
    Traceback (most recent call last):
    ...
    ValueError: unknown weight update 'sgd'; choose one of 'admm' or None
    """
    if update is not None and update not in UPDATES:
        raise ValueError(
            f"unknown weight update {update!r}; choose one of {', '.join(map(repr, UPDATES))} "
            "or None"
        )
    if permute and pattern.kind != "nm":
        raise ValueError(
            f"permute=True reorders channels for N:M patterns; {pattern.name!r} does not depend "
            "on the channel order. Use permute=False"
        )


def check_quantize(
    quantize: Any, group_size: Any, method: str, pattern: Pattern, chosen: dict
) -> Quantization | None:
    """Validate ``prune(quantize=, group_size=)`` against the method, pattern and layers.

    Parameters
    ----------
    quantize : Any
        The ``quantize=`` argument of ``prune`` (None for no quantization).
    group_size : Any
        The ``group_size=`` argument.
    method : str
        The pruning method's name.
    pattern : Pattern
        The sparsity pattern.
    chosen : dict
        The layers to prune, by name.

    Returns
    -------
    Quantization or None
        None when ``quantize`` is None.

    Raises
    ------
    ValueError
        An unknown format, a bad group size, a method other than SparseGPT, a group size that
        N:M groups straddle, or a layer whose ``in_features`` the group
        size does not divide (naming the layer and how to skip it).

    Examples
    --------
    >>> check_quantize("int4", 128, "magnitude", Pattern.parse("2:4"), {})
    Traceback (most recent call last):
    ...
    ValueError: quantize='int4' quantizes inside SparseGPT's column loop; method 'magnitude' cannot. Use method='sparsegpt', or prune first and call explorer.groupquant.quantize_rtn on each layer
    """
    if quantize is None:
        return None
    quant = Quantization(quantize, group_size)
    if method != "sparsegpt":
        raise ValueError(
            f"quantize={quantize!r} quantizes inside SparseGPT's column loop; method {method!r} "
            "cannot. Use method='sparsegpt', or prune first and call "
            "explorer.groupquant.quantize_rtn on each layer"
        )
    if pattern.kind == "nm" and quant.group_size % pattern.m:
        raise ValueError(
            f"group_size={quant.group_size} is not a multiple of M={pattern.m} of "
            f"{pattern.name!r}; N:M groups must not straddle two scale groups"
        )
    for fqn, mod in chosen.items():
        quant.check_width(mod.weight.shape[1], f"layer {fqn!r} (its in_features)")
    return quant


def _weightnorm(model: nn.Module, chosen: dict, pattern: Pattern) -> dict[str, torch.Tensor]:
    masks = weightnorm_masks(model, chosen, pattern)
    for fqn, mask in masks.items():
        report = check_pattern(mask, pattern)
        if not report.valid:
            raise RuntimeError(
                f"WeightNormSparsifier's mask for {fqn!r} breaks {pattern.name!r} "
                f"({report.violations} violations, first at {report.first_violations[:3]})"
            )
    return masks


#: The pruning methods by name.
METHODS: MappingProxyType[str, MethodInfo] = MappingProxyType(
    {
        "random": MethodInfo(
            "random",
            _ALL_KINDS,
            _ANY,
            False,
            False,
            "random scores: the floor to beat",
            from_weights=random_mask,
        ),
        "magnitude": MethodInfo(
            "magnitude",
            _ALL_KINDS,
            _ANY,
            False,
            False,
            "keep the largest |w| the pattern allows",
            from_weights=lambda weight, pattern, seed, fqn: magnitude_mask(weight, pattern, fqn),
        ),
        "weightnorm": MethodInfo(
            "weightnorm",
            ("nm", "unstructured", "block"),
            '"N:M", "unstructured:S" (per layer), "blockB:S"',
            False,
            False,
            "torch.ao.pruning WeightNormSparsifier, the PyTorch tutorial's flow",
            whole_model=_weightnorm,
            row_patterns=False,
        ),
        "wanda": MethodInfo(
            "wanda",
            ("nm", "unstructured"),
            '"N:M", "unstructured:S", "unstructured-row:S" (compared per output row)',
            True,
            False,
            "|w| times the input column's activation norm, per output row",
            calibrated=_wanda,
        ),
        "sparsegpt": MethodInfo(
            "sparsegpt",
            ("nm", "unstructured"),
            '"N:M", "unstructured:S", "unstructured-row:S"',
            True,
            True,
            "optimal-brain-surgeon updates from the calibration Hessian",
            calibrated=_sparsegpt,
            needs_hessian=True,
        ),
    }
)


def method_info(method: Any, pattern: Pattern) -> MethodInfo:
    """The registry entry for ``method``, checked against ``pattern``.

    Parameters
    ----------
    method : Any
        The method's name.
    pattern : Pattern
        The sparsity pattern it must produce.

    Returns
    -------
    MethodInfo

    Raises
    ------
    ValueError
        For an unknown method, or a pattern the method cannot produce.

    Examples
    --------
    >>> method_info("magnitude", Pattern.parse("2:4")).name
    'magnitude'
    """
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(
            f"unknown pruning method {method!r}; choose one of {', '.join(map(repr, METHODS))}"
        )
    info = METHODS[method]
    if not info.supports(pattern):
        raise ValueError(
            f"method {method!r} does not support pattern {pattern.name!r} (kind {pattern.kind!r}); "
            f"it supports {info.patterns}. Use magnitude or random for any pattern kind."
        )
    return info


def check_selection(
    model: nn.Module, chosen: dict[str, nn.Linear], names: list[str], pattern: Pattern
) -> None:
    """Check the layers ``filter_fn`` chose: at least one, each shaped for ``pattern``.

    Parameters
    ----------
    model : torch.nn.Module
        The model (its module names are listed when no layer was chosen).
    chosen : dict[str, torch.nn.Linear]
        The selected layers, by name.
    names : list[str]
        The names of every ``nn.Linear`` of the model.
    pattern : Pattern
        The sparsity pattern.

    Raises
    ------
    ValueError
        Naming the layer and how to skip it with ``filter_fn``.

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(6, 4))
    >>> check_selection(net, dict(net.named_children()), ["0"], Pattern.parse("2:4"))
    Traceback (most recent call last):
    ...
    ValueError: layer '0' has in_features=6, which is not divisible by M=4 of pattern '2:4'; skip it with filter_fn (e.g. filter_fn=lambda mod, fqn: mod.in_features % 4 == 0)
    """
    if not chosen:
        if names:
            listed = ", ".join(repr(n) for n in names[:6]) + (" ..." if len(names) > 6 else "")
            where = f"the model's {len(names)} Linear layers are {listed}"
        else:
            others = [n for n, _ in model.named_modules() if n][:6]
            where = f"the model has no nn.Linear layers (its modules include {others})"
        raise ValueError(
            f"filter_fn selected no layers to prune; {where}. filter_fn(module, fqn) is asked "
            f'about every nn.Linear, e.g. filter_fn=lambda mod, fqn: "mlp" in fqn'
        )
    for fqn, mod in chosen.items():
        rows, cols = mod.weight.shape
        if pattern.kind == "nm" and cols % pattern.m:
            raise ValueError(
                f"layer {fqn!r} has in_features={cols}, which is not divisible by M={pattern.m} of "
                f"pattern {pattern.name!r}; skip it with filter_fn "
                f"(e.g. filter_fn=lambda mod, fqn: mod.in_features % {pattern.m} == 0)"
            )
        if pattern.kind == "block" and (rows % pattern.block or cols % pattern.block):
            raise ValueError(
                f"layer {fqn!r} has weight shape {rows}x{cols}, not divisible into "
                f"{pattern.block}x{pattern.block} blocks of pattern {pattern.name!r}; skip it with "
                f"filter_fn or choose a block size that divides both"
            )
        if mod.weight.is_meta:
            raise ValueError(f"layer {fqn!r} is on the meta device; load its weights first")
