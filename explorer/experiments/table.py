"""The accuracy table's rows: one line of ``docs/accuracy.md`` per measured store row.

:func:`table_rows` reads the rows a named grid left in the store (:mod:`explorer.sweeps.named`)
as :class:`Row` lines of the accuracy table; :class:`Results` holds them with the run's settings,
writes them to JSON and merges runs. The JSON form is the one ``docs/accuracy.json`` keeps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from explorer.sweeps.steps import STEP_METRICS

__all__ = ["Results", "Row", "table_rows"]


@dataclass(frozen=True)
class Row:
    """One line of the accuracy table: a model pruned by one method to one pattern.

    ``method="dense"`` is the model as it was. Built by :func:`table_rows` from the store's rows.

    Examples
    --------
    >>> Row("m", "wanda", "2:4", "accuracy", 0.9, {}, 1.0, 0.1, 0.5, variant="permute").label
    'wanda + permute'
    """

    model: str
    method: str
    pattern: str
    metric: str
    value: float
    metrics: dict[str, float]
    prune_seconds: float
    eval_seconds: float
    density: float
    finetuned: float | None = None
    finetune_seconds: float | None = None
    error: str | None = None
    higher_is_better: bool = True
    variant: str = ""
    permute_seconds: float | None = None
    update_seconds: float | None = None
    permute_gain: float | None = None
    finetune_steps: int | None = None
    recovered: bool = False

    @property
    def label(self) -> str:
        """The method with its variant, e.g. ``"sparsegpt + permute + admm"``."""
        parts = [self.method, *filter(None, self.variant.split("+"))]
        return " + ".join(parts + (["recovery"] if self.recovered else []))


_FLOATS = {"value", "prune_seconds", "eval_seconds", "density"}


@dataclass
class Results:
    """All rows of a run plus where and how it ran."""

    rows: list[Row] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"meta": self.meta, "rows": [asdict(r) for r in self.rows]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        """Inverse of :meth:`to_dict` (``null`` numbers come back as NaN).

        Parameters
        ----------
        data : dict
            A dict made by :meth:`to_dict` (``rows`` and optionally ``meta``).

        Returns
        -------
        Results
            The result set.
        """
        rows = []
        for row in data["rows"]:
            fixed = {k: (math.nan if v is None and k in _FLOATS else v) for k, v in row.items()}
            rows.append(Row(**fixed))
        return cls(rows=rows, meta=dict(data.get("meta", {})))

    @classmethod
    def merge(cls, parts: Sequence[Results]) -> Results:
        """One result set from runs of different models (their rows and model settings).

        Parameters
        ----------
        parts : sequence of Results
            The runs to merge; a row measured in two of them keeps the first one's value.

        Returns
        -------
        Results
            The merged result set.
        """
        if not parts:
            raise ValueError("merge needs at least one Results")
        meta = dict(parts[0].meta)
        meta["models"] = {}
        meta["total_seconds"] = 0.0
        for part in parts:
            for model, info in part.meta.get("models", {}).items():
                # a later run's settings add to an earlier one's (e.g. its recovery settings)
                known = meta["models"].setdefault(model, {})
                known.update({k: v for k, v in info.items() if v is not None or k not in known})
            meta["total_seconds"] += float(part.meta.get("total_seconds", 0.0))
        meta["total_seconds"] = round(meta["total_seconds"], 1)
        meta["runs"] = [
            run
            for part in parts
            for run in part.meta.get("runs")
            or [{k: part.meta.get(k) for k in ("date", "command", "total_seconds")}]
        ]
        meta["variants"] = list(
            dict.fromkeys(v for part in parts for v in part.meta.get("variants", [""]))
        )
        meta["methods"] = list(
            dict.fromkeys(m for part in parts for m in part.meta.get("methods", []))
        )
        meta["patterns"] = list(
            dict.fromkeys(p for part in parts for p in part.meta.get("patterns", []))
        )
        rows: dict[tuple[str, str, str, str, bool], Row] = {}
        for part in parts:
            for r in part.rows:
                # 1. A row measured twice (e.g. dense in two partial runs) keeps its first value.
                key = (r.model, r.method, r.pattern, r.variant, r.recovered)
                rows.setdefault(key, r)
        return cls(rows=list(rows.values()), meta=meta)

    def __repr__(self) -> str:
        models = sorted({r.model for r in self.rows})
        return f"Results({len(self.rows)} rows, models={models})"


def _number(value: Any, default: float | None = math.nan) -> float | None:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
    )


def _fields(row: Any) -> tuple[str, dict, dict, str, str | None]:
    # A store row, or a cell's row as committed (a dict with the same fields).
    if isinstance(row, dict):
        return (
            row["kind"],
            row["config"],
            row.get("metrics") or {},
            row.get("status", "ok"),
            row.get("error"),
        )
    return row.kind, row.config, row.metrics or {}, row.status, row.error


def table_rows(rows: Iterable[Any], headline: dict | None = None) -> list[Row]:
    """The accuracy table's lines from a named grid's rows (dense rows first per model).

    ``rows`` are the store's rows (:class:`explorer.results.store.Row`) or the cells' rows as
    committed (dicts with the same fields).

    A failed cell becomes a line with its ``error``, the metric named by its model's dense row
    (kept in ``headline``, ``{model: (metric, higher_is_better)}``, across calls when given).

    Parameters
    ----------
    rows : iterable
        Store rows or committed cell rows (dicts with the same fields).
    headline : dict, optional
        ``{model: (metric, higher_is_better)}``, filled from dense rows and read for the others.

    Returns
    -------
    list of Row
        One line per row.

    Examples
    --------
    >>> from explorer.results.store import Row as StoreRow
    >>> dense = StoreRow(1, "dense", "ok", None, None, "k", "", {"model": "m"},
    ...                  {"metric": "accuracy", "accuracy": 0.9, "higher_is_better": True})
    >>> failed = StoreRow(2, "prune", "failed", "ValueError: no", None, "j", "",
    ...                   {"model": "m", "method": "wanda", "pattern": "2:4", "update": "admm"})
    >>> [(r.label, r.value, r.error) for r in table_rows([dense, failed])]
    [('dense', 0.9, None), ('wanda + admm', nan, 'ValueError: no')]
    """
    out: list[Row] = []
    headline = {} if headline is None else headline
    for row in rows:
        kind, config, metrics, status, error = _fields(row)
        dense = kind == "dense"
        if "metric" in metrics:
            headline[config["model"]] = (metrics["metric"], bool(metrics["higher_is_better"]))
        metric, higher = headline.get(config["model"], ("?", True))
        steps = ["permute"] if config.get("permute") else []
        steps += [config["update"]] if config.get("update") else []
        out.append(
            Row(
                model=config["model"],
                method="dense" if dense else config["method"],
                pattern="-" if dense else config["pattern"],
                metric=metric,
                value=_number(metrics.get(metric)),
                metrics={
                    k: float(v)
                    for k, v in metrics.items()
                    if k not in STEP_METRICS and _number(v, None) is not None
                },
                prune_seconds=_number(metrics.get("prune_seconds", 0.0 if dense else None)),
                eval_seconds=_number(metrics.get("eval_seconds"), 0.0),
                density=_number(metrics.get("density", 1.0 if dense else None)),
                finetuned=_number(metrics.get("finetuned"), None),
                finetune_seconds=_number(metrics.get("finetune_seconds"), None),
                error=error if status != "ok" else None,
                higher_is_better=higher,
                variant="+".join(steps),
                permute_seconds=_number(metrics.get("permute_seconds"), None),
                update_seconds=_number(metrics.get("update_seconds"), None),
                permute_gain=_number(metrics.get("permute_gain"), None),
                finetune_steps=metrics.get("finetune_steps"),
                recovered=bool(config.get("recovery")) and not config.get("finetune"),
            )
        )
    return out
