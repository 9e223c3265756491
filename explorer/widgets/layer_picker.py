"""The layer picker: a model's layers with shape, dtype, 2:4 validity and the doctor's verdict.

Each row carries two verdicts: the doctor's on the weight as it is now (a dense weight is
"unsupported" because it is not 2:4 yet) and the one it would give once the layer is pruned to
2:4 (shape, dtype, token count and target GPU only). The picker shows the second, which is what
tells a visitor where pruning can pay off.
"""

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
    """One row of the picker.

    Attributes
    ----------
    name : str
        The layer's fully qualified name.
    kind : str
        ``"Linear"``, ``"Conv1d"`` or ``"Conv2d"``.
    shape : tuple of int
        The weight's shape.
    dtype : str
        The weight's dtype, by name.
    params : int
        Parameters in the weight (and bias).
    valid_24 : bool
        Whether the weight already follows 2:4.
    verdict, reason : str
        The doctor's verdict for the layer as it is, and the findings behind it.
    verdict_24, reason_24 : str
        The verdict once pruned to 2:4 (see :func:`explorer.diagnosis.verdict_once_24`), and why.
    """

    name: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    params: int
    valid_24: bool
    verdict: str
    reason: str
    verdict_24: str = "not checked"
    reason_24: str = ""

    @property
    def label(self) -> str:
        """Dropdown label: name, shape and the verdict once pruned to 2:4."""
        return f"{self.name}  {'x'.join(map(str, self.shape))}  [{self.verdict_24} at 2:4]"


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
    """Rows for every layer with a 2-D weight, with the doctor's verdicts.

    The layers come from :mod:`explorer.prunable_layers`, the verdicts from
    :mod:`explorer.diagnosis`.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    dtype : torch.dtype, optional
        The dtype the doctor judges the layers in.
    tokens : int, optional
        The token count the doctor judges the layers at.

    Returns
    -------
    list of LayerRow

    Examples
    --------
    >>> from torch import nn
    >>> row = layer_rows(nn.Sequential(nn.Linear(4096, 4096)), tokens=4096)[0]
    >>> row.verdict, row.verdict_24
    ('unsupported', 'fast')
    """
    try:
        from explorer.prunable_layers import layers
    except ImportError:
        return _fallback_rows(model)
    try:
        from explorer.diagnosis import doctor, verdict_once_24

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
            verdict_24, reason_24 = verdict_once_24(reasons, report.notes)
        else:
            verdict, reason = "not checked", "the doctor is not available"
            verdict_24, reason_24 = verdict, reason
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
                verdict_24=verdict_24,
                reason_24=reason_24,
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
    rows : sequence of LayerRow, optional
        Rows already computed for this model, dtype and token count (from a cache); the
        doctor then runs only on :meth:`refresh`.

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
        self,
        model: nn.Module,
        dtype: torch.dtype = torch.float16,
        tokens: int = 1024,
        rows=None,
    ) -> None:
        self.dtype, self.tokens = dtype, tokens
        self._listeners: list[Callable[[str | None], None]] = []
        self.selected: str | None = None
        self.model = model
        self.rows: list[LayerRow] = []
        self.reason = ""
        if rows:
            self.rows = list(rows)
        else:
            self.refresh(model)

    def refresh(self, model: nn.Module | None = None) -> None:
        """Re-read the layers (after pruning, validity changes); keeps the selection if it exists.

        Parameters
        ----------
        model : torch.nn.Module or None, optional
            A new model to read; None re-reads the current one.
        """
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
        """The row of layer ``name``.

        Parameters
        ----------
        name : str
            The layer's name.

        Returns
        -------
        LayerRow
        """
        for row in self.rows:
            if row.name == name:
                return row
        raise ValueError(
            f"no layer named {name!r} with a 2-D weight; expected one of {self.names[:8]}"
            f"{' ...' if len(self.names) > 8 else ''}"
        )

    def on_select(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(name)`` whenever the selection changes.

        Parameters
        ----------
        callback : callable
            Called with the selected layer's name, or None.
        """
        self._listeners.append(callback)

    def select(self, name: str | None) -> None:
        """Select layer ``name`` (None clears the selection).

        Parameters
        ----------
        name : str or None
            The layer's name.
        """
        if name is not None:
            self.row(name)
        self.selected = name
        for callback in list(self._listeners):
            callback(name)

    def counts(self) -> dict[str, int]:
        """How many layers get each verdict once pruned to 2:4.

        Examples
        --------
        >>> from torch import nn
        >>> LayerPicker(nn.Sequential(nn.Linear(64, 32)), tokens=1024).counts()
        {'fast': 0, 'slow': 1, 'unsupported': 0}
        """
        counts = {"fast": 0, "slow": 0, "unsupported": 0}
        for row in self.rows:
            counts[row.verdict_24] = counts.get(row.verdict_24, 0) + 1
        return counts

    def html(self) -> str:
        """The table as HTML, the selected row in bold; hover a verdict for the doctor's reasons.

        Names lose the prefix every layer shares (the caption names it), and a dtype every
        layer shares goes to the caption too, so the table fits a narrow column.
        """
        if not self.rows:
            return f"<div>{_html.escape(self.reason)}</div>"
        prefix = _common_prefix([r.name for r in self.rows])
        dtypes = {r.dtype for r in self.rows}
        one_dtype = len(dtypes) == 1
        body = []
        for r in self.rows:
            name = _html.escape(r.name[len(prefix) :])
            row = [
                f"<b>{name}</b>" if r.name == self.selected else name,
                "x".join(map(str, r.shape)),
                *([] if one_dtype else [r.dtype]),
                _html.badge("2:4", "ok") if r.valid_24 else _html.badge("dense", "info"),
                f'<span title="{_html.escape(r.reason_24)}">'
                f"{_html.badge(r.verdict_24, _VERDICT_LEVEL.get(r.verdict_24, 'info'))}</span>",
            ]
            body.append(row)
        where = f"under {prefix}, " if prefix else ""
        caption = (
            f"{len(self.rows)} layers {where}{dtypes.pop() + ', ' if one_dtype else ''}"
            f"verdict once 2:4 at {self.tokens} tokens"
        )
        header = ["layer", "shape", *([] if one_dtype else ["dtype"]), "now", "at 2:4"]
        raw = (0, len(header) - 2, len(header) - 1)
        return _html.table(header, body, caption=caption, raw_columns=raw)

    def __repr__(self) -> str:
        return f"LayerPicker({len(self.rows)} layers, selected={self.selected!r})"

    def _repr_html_(self) -> str:
        return self.html()


def _common_prefix(names: list[str]) -> str:
    """The dotted prefix all ``names`` share, ending with a dot ("" when none or one name).

    Examples
    --------
    >>> _common_prefix(["bert.encoder.layer.0.query", "bert.encoder.layer.1.key"])
    'bert.encoder.layer.'
    >>> _common_prefix(["0", "2"])
    ''
    """
    if len(names) < 2:
        return ""
    parts = [n.split(".")[:-1] for n in names]
    shared = []
    for pieces in zip(*parts, strict=False):
        if len(set(pieces)) != 1:
            break
        shared.append(pieces[0])
    return ".".join(shared) + "." if shared else ""
