"""List the prunable layers of a model.

Linear layers are first class: they are what cuSPARSELt's 2:4 matmul accelerates. Conv1d and
Conv2d layers are listed too (their weight flattened to ``(out, in * kernel)``), marked as not
accelerated by the sparse matmul path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from . import _html
from .checks import PatternReport, check_pattern
from .dtypes import dtype_name
from .sparse_rules import GROUP

__all__ = ["LayerInfo", "LayerTable", "default_filter", "layers", "matrix_view"]

PRUNABLE = (nn.Linear, nn.Conv1d, nn.Conv2d)


def default_filter(module: nn.Module, fqn: str) -> bool:
    """The default layer filter: every ``nn.Linear``.

    Parameters
    ----------
    module : torch.nn.Module
        The module.
    fqn : str
        Its fully qualified name (not read).

    Returns
    -------
    bool
    """
    return isinstance(module, nn.Linear)


def matrix_view(module: nn.Module) -> torch.Tensor:
    """The layer's weight as a 2-D ``(out, in)`` matrix (Conv weights are flattened).

    Parameters
    ----------
    module : torch.nn.Module
        A layer with a ``weight``.

    Returns
    -------
    torch.Tensor
    """
    weight = module.weight
    return weight if weight.dim() == 2 else weight.flatten(1)


@dataclass(frozen=True)
class LayerInfo:
    """One prunable layer.

    Attributes
    ----------
    name : str
        Fully qualified name, as in ``model.get_submodule(name)``.
    kind : str
        ``"Linear"``, ``"Conv1d"`` or ``"Conv2d"``.
    shape : tuple of int
        The weight's shape as stored.
    matrix_shape : tuple of int
        ``(out, in)`` of the weight as a matrix.
    dtype : torch.dtype
    device : str
    params : int
        Parameters in the weight (and bias).
    valid_24 : bool or None
        Whether the weight already follows 2:4 (None if its width is not a multiple of 4 or it
        lives on the meta device).
    density : float or None
        Fraction of nonzero weights.
    accelerated : bool
        Whether the cuSPARSELt sparse matmul path applies (Linear layers only).
    module : nn.Module
        The layer itself (not shown in the repr).
    pattern : PatternReport or None
        The weight's check against 2:4 (:func:`explorer.check_pattern`), made once here and
        carried, so the doctor and ``sparsify`` read it rather than checking again; None when
        ``valid_24`` is None.
    """

    name: str
    kind: str
    shape: tuple[int, ...]
    matrix_shape: tuple[int, int]
    dtype: torch.dtype
    device: str
    params: int
    valid_24: bool | None
    density: float | None
    accelerated: bool
    module: nn.Module = field(repr=False, compare=False)
    pattern: PatternReport | None = field(default=None, repr=False, compare=False)

    @property
    def out_features(self) -> int:
        """Rows of the weight as a matrix (``matrix_shape[0]``)."""
        return self.matrix_shape[0]

    @property
    def in_features(self) -> int:
        """Columns of the weight as a matrix (``matrix_shape[1]``)."""
        return self.matrix_shape[1]

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape))
        valid = {True: "2:4", False: "not 2:4", None: "2:4 n/a"}[self.valid_24]
        note = "" if self.accelerated else ", not accelerated"
        return f"LayerInfo({self.name!r}, {self.kind} {shape}, {dtype_name(self.dtype)}, {valid}{note})"


class LayerTable:
    """The prunable layers of a model, in module order; index by position or by name.

    :func:`layers` builds it; ``len(table)`` and iteration go over the rows.

    Parameters
    ----------
    rows : list of LayerInfo
        One row per layer, in module order.

    Examples
    --------
    >>> from torch import nn
    >>> table = layers(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
    >>> table.names
    ['0', '2']
    >>> table["2"].matrix_shape
    (4, 16)
    """

    def __init__(self, rows: list[LayerInfo]):
        self._rows = list(rows)
        self._by_name = {row.name: row for row in self._rows}

    @property
    def names(self) -> list[str]:
        """The layers' fully qualified names."""
        return [row.name for row in self._rows]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[LayerInfo]:
        return iter(self._rows)

    def __getitem__(self, key: int | str) -> LayerInfo:
        if isinstance(key, str):
            if key not in self._by_name:
                close = [n for n in self.names if key in n or n in key][:5] or self.names[:5]
                raise KeyError(f"no prunable layer named {key!r}; some layers: {close}")
            return self._by_name[key]
        return self._rows[key]

    def filter(self, fn: Callable[[nn.Module, str], bool]) -> LayerTable:
        """The layers for which ``fn(module, fqn)`` is true.

        Parameters
        ----------
        fn : callable
            ``fn(module, fqn) -> bool``.

        Returns
        -------
        LayerTable
        """
        return LayerTable([row for row in self._rows if fn(row.module, row.name)])

    @property
    def params(self) -> int:
        """Total parameters of the listed layers."""
        return sum(row.params for row in self._rows)

    def to_records(self) -> list[dict]:
        """Plain dicts (no module), e.g. for a DataFrame or JSON."""
        return [
            {
                "name": r.name,
                "kind": r.kind,
                "shape": list(r.shape),
                "dtype": dtype_name(r.dtype),
                "params": r.params,
                "valid_24": r.valid_24,
                "density": r.density,
                "accelerated": r.accelerated,
            }
            for r in self._rows
        ]

    def __repr__(self) -> str:
        linear = sum(r.accelerated for r in self._rows)
        valid = sum(bool(r.valid_24) for r in self._rows)
        return (
            f"LayerTable({len(self)} layers, {linear} Linear, {self.params:,} params, "
            f"{valid} already 2:4)"
        )

    def _repr_html_(self) -> str:
        rows = []
        for r in self._rows:
            valid = {True: _html.badge("2:4", "ok"), False: _html.badge("dense", "warn")}.get(
                r.valid_24, _html.badge("n/a", "info")
            )
            accel = _html.badge("cuSPARSELt", "ok") if r.accelerated else _html.badge("no", "warn")
            rows.append(
                (
                    r.name,
                    r.kind,
                    " x ".join(map(str, r.shape)),
                    dtype_name(r.dtype),
                    f"{r.params:,}",
                    "" if r.density is None else f"{r.density:.3f}",
                    valid,
                    accel,
                )
            )
        return _html.table(
            ("layer", "kind", "shape", "dtype", "params", "density", "pattern", "accelerated"),
            rows,
            caption=repr(self),
            raw_columns=(6, 7),
        )


def layers(model: nn.Module) -> LayerTable:
    """List the prunable layers of any ``torch.nn.Module``.

    Parameters
    ----------
    model : torch.nn.Module
        The model to inspect (it is not changed).

    Returns
    -------
    LayerTable
        One :class:`LayerInfo` per Linear, Conv1d and Conv2d layer, in module order.

    Raises
    ------
    TypeError
        If ``model`` is not an ``nn.Module``.
    ValueError
        If the model has no prunable layers.

    Examples
    --------
    >>> from torch import nn
    >>> layers(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
    LayerTable(2 layers, 2 Linear, 212 params, 0 already 2:4)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module, got {type(model).__name__}; "
            f"for a single weight tensor use explorer.check_pattern(weight)"
        )
    rows = []
    for name, module in model.named_modules():
        if not isinstance(module, PRUNABLE) or getattr(module, "weight", None) is None:
            continue
        weight = module.weight
        matrix = matrix_view(module)
        density = report = None
        if not weight.is_meta and matrix.numel():
            with torch.no_grad():
                density = float((matrix != 0).float().mean())
                if matrix.shape[1] % GROUP == 0:
                    report = check_pattern(matrix.detach(), "2:4")
        bias = getattr(module, "bias", None)
        rows.append(
            LayerInfo(
                name=name,
                kind=type(module).__name__,
                shape=tuple(weight.shape),
                matrix_shape=tuple(matrix.shape),
                dtype=weight.dtype,
                device=weight.device.type,
                params=weight.numel() + (bias.numel() if bias is not None else 0),
                valid_24=None if report is None else report.valid,
                density=density,
                accelerated=isinstance(module, nn.Linear),
                module=module,
                pattern=report,
            )
        )
    if not rows:
        raise ValueError(
            f"{type(model).__name__} has no prunable layers (nn.Linear, nn.Conv1d or nn.Conv2d); "
            f"pass the model that holds them, e.g. the whole network rather than one block"
        )
    return LayerTable(rows)
