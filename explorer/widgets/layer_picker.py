"""The layer picker: a model's layers with shape, dtype, 2:4 validity and the doctor's verdict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from explorer import _html
from explorer.dtypes import dtype_name

__all__ = ["LayerPicker", "LayerRow"]

_VERDICT_LEVEL = {"fast": "ok", "slow": "warn", "unsupported": "error"}


@dataclass(frozen=True)
class LayerRow:
    """One row of the picker."""

    name: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    params: int
    valid_24: bool
    verdict: str
    reason: str

    @property
    def label(self) -> str:
        """Dropdown label: name, shape and verdict."""
        return f"{self.name}  {'x'.join(map(str, self.shape))}  [{self.verdict}]"


def _weight(module: nn.Module) -> torch.Tensor | None:
    weight = getattr(module, "weight", None)
    return weight if isinstance(weight, torch.Tensor) else None


def _fallback_rows(model: nn.Module) -> list[LayerRow]:
    rows = []
    for name, module in model.named_modules():
        w = _weight(module)
        if isinstance(module, nn.Linear) and w is not None:
            rows.append(
                LayerRow(
                    name,
                    "Linear",
                    tuple(w.shape),
                    dtype_name(w.dtype),
                    w.numel(),
                    False,
                    "not checked",
                    "the layer table is not available",
                )
            )
    return rows


def layer_rows(model: nn.Module, dtype: torch.dtype = torch.float16, tokens: int = 1024):
    """Rows for every layer with a 2-D weight, from :mod:`explorer.layers` and :mod:`explorer.doctor`."""
    try:
        from explorer.layers import layers
    except ImportError:
        return _fallback_rows(model)
    try:
        from explorer.doctor import doctor

        report = doctor(model, dtype=dtype, tokens=tokens)
    except ImportError:
        report = None
    rows = []
    for info in layers(model):
        if len(tuple(info.shape)) != 2:
            continue
        if report is not None:
            verdict = str(report.verdict(info.name))
            reasons = report.reasons(info.name)
            reason = "; ".join(map(str, reasons)) if not isinstance(reasons, str) else reasons
        else:
            verdict, reason = "not checked", "the doctor is not available"
        rows.append(
            LayerRow(
                name=info.name,
                kind=str(info.kind),
                shape=tuple(int(s) for s in info.shape),
                dtype=dtype_name(info.dtype),
                params=int(info.params),
                valid_24=bool(info.valid_24),
                verdict=verdict,
                reason=reason,
            )
        )
    return rows


class LayerPicker:
    """A table of a model's layers; selecting one calls the listeners with its name.

    Parameters
    ----------
    model : torch.nn.Module
    dtype : torch.dtype
        Dtype the doctor judges the layers for.
    tokens : int
        Token count the doctor judges the layers for.

    Examples
    --------
    >>> from torch import nn
    >>> picker = LayerPicker(nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8)))
    >>> [row.name for row in picker.rows]
    ['0', '2']
    >>> picker.select("2"); picker.selected
    '2'
    """

    def __init__(
        self, model: nn.Module, dtype: torch.dtype = torch.float16, tokens: int = 1024
    ) -> None:
        self.dtype, self.tokens = dtype, tokens
        self._listeners: list[Callable[[str | None], None]] = []
        self.selected: str | None = None
        self.model = model
        self.rows: list[LayerRow] = []
        self.refresh(model)

    def refresh(self, model: nn.Module | None = None) -> None:
        """Re-read the layers (after pruning, validity changes); keeps the selection if it exists."""
        self.model = self.model if model is None else model
        self.reason = ""
        try:
            self.rows = layer_rows(self.model, self.dtype, self.tokens)
        except ValueError as exc:  # the layer table refuses models with nothing to prune
            self.rows, self.reason = [], str(exc)
        if not self.rows and not self.reason:
            self.reason = "this model has no layers with a 2-D weight, so there is nothing to prune"
        if self.selected not in self.names:
            self.selected = None

    @property
    def names(self) -> list[str]:
        """Layer names in model order."""
        return [row.name for row in self.rows]

    def row(self, name: str) -> LayerRow:
        """The row of layer ``name``."""
        for row in self.rows:
            if row.name == name:
                return row
        raise ValueError(
            f"no layer named {name!r} with a 2-D weight; expected one of {self.names[:8]}"
            f"{' ...' if len(self.names) > 8 else ''}"
        )

    def on_select(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(name)`` whenever the selection changes."""
        self._listeners.append(callback)

    def select(self, name: str | None) -> None:
        """Select layer ``name`` (None clears the selection)."""
        if name is not None:
            self.row(name)
        self.selected = name
        for callback in list(self._listeners):
            callback(name)

    def html(self) -> str:
        """The table as HTML, the selected row in bold."""
        if not self.rows:
            return f"<div>{_html.escape(self.reason)}</div>"
        body = []
        for r in self.rows:
            name = _html.escape(r.name)
            body.append(
                [
                    f"<b>{name}</b>" if r.name == self.selected else name,
                    "x".join(map(str, r.shape)),
                    r.dtype,
                    _html.badge("2:4", "ok") if r.valid_24 else _html.badge("dense", "info"),
                    f'<span title="{_html.escape(r.reason)}">'
                    f"{_html.badge(r.verdict, _VERDICT_LEVEL.get(r.verdict, 'info'))}</span>",
                ]
            )
        return _html.table(
            ["layer", "shape", "dtype", "pattern", f"verdict ({self.tokens} tokens)"],
            body,
            raw_columns=(0, 3, 4),
        )

    def __repr__(self) -> str:
        return f"LayerPicker({len(self.rows)} layers, selected={self.selected!r})"

    def _repr_html_(self) -> str:
        return self.html()
