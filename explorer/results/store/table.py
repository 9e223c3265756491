"""Rows read back from the results store, and a small pandas-free table of them."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from explorer import _html
from explorer.results.store.files import atomic_output, check_output

__all__ = ["ResultTable", "Row"]

_BASE = ("source", "id", "kind", "status", "error", "sweep_id", "cell_key", "created")
_VERSIONS = (("torch", "torch"), ("cusparselt", "cuSPARSELt"))


@dataclass(frozen=True)
class Row:
    """One measurement: its kind, status, configuration, metrics and provenance.

    Attributes
    ----------
    id : int
        Row number inside its database.
    kind : str
        What was measured: ``"dense"``, ``"prune"``, ``"layer-speed"``, ...
    status : str
        ``"ok"``, ``"failed"`` (``error`` says why) or ``"skipped"``.
    error : str or None
        Why the measurement failed or was skipped.
    sweep_id, cell_key : str or None
        The sweep and the cell of its grid that recorded the row (None outside a sweep).
    created : str
        When the row was recorded (ISO 8601 text).
    config, metrics, provenance : dict
        The full configuration, the measured values, and where and when it was measured.
    source : str
        ``"local"`` for the user's own database, ``"reference"`` for the shipped one.

    Examples
    --------
    >>> Row(1, "prune", "ok", None, None, None, "2026-01-01", {"model": "m"}, {"accuracy": 0.9},
    ...     {"gpu": "cpu"}).get("accuracy")
    0.9
    """

    id: int
    kind: str
    status: str
    error: str | None
    sweep_id: str | None
    cell_key: str | None
    created: str
    config: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    source: str = "local"

    def get(self, name: str, default: object = None) -> object:
        """Look ``name`` up in the row's fields, then metrics, config and provenance.

        Parameters
        ----------
        name : str
            A field, metric, config or provenance name.
        default : object, optional
            Returned when the name is found nowhere.

        Returns
        -------
        object
        """
        if name in _BASE:
            return getattr(self, name)
        for part in (self.metrics, self.config, self.provenance):
            if name in part:
                return part[name]
        return default

    @property
    def model(self) -> str | None:
        """The ``model`` entry of the configuration (None if it has none)."""
        return self.config.get("model")

    @property
    def method(self) -> str | None:
        """The ``method`` entry of the configuration (None if it has none)."""
        return self.config.get("method")

    @property
    def pattern(self) -> str | None:
        """The ``pattern`` entry of the configuration (None if it has none)."""
        return self.config.get("pattern")

    @property
    def gpu(self) -> str | None:
        """The ``gpu`` entry of the provenance (None if it has none)."""
        return self.provenance.get("gpu")

    @property
    def origin(self) -> str:
        """Where the row comes from, for labels: ``"local"`` or the reference's GPU, versions, date.

        Examples
        --------
        >>> Row(1, "layer-speed", "ok", None, None, None, "2026-11-20T01:02:03+00:00", {}, {},
        ...     {"gpu": "NVIDIA H100", "torch": "2.11.0", "cusparselt": "0.8.0"}, "reference").origin
        'reference: NVIDIA H100, torch 2.11.0, cuSPARSELt 0.8.0, 2026-11-20'
        """
        if self.source == "local":
            return "local"
        p = self.provenance
        parts = [str(p.get("gpu") or "unknown GPU")]
        parts += [f"{name} {p[key]}" for key, name in _VERSIONS if p.get(key)]
        return f"{self.source}: {', '.join(parts)}, {str(self.created)[:10]}"

    def flat(self) -> dict:
        """The row as one flat dict: base fields, then ``config.*``, ``metrics.*``, ``provenance.*``."""
        out = {name: getattr(self, name) for name in _BASE}
        for prefix, part in (
            ("config", self.config),
            ("metrics", self.metrics),
            ("provenance", self.provenance),
        ):
            for key, value in part.items():
                out[f"{prefix}.{key}"] = value
        return out

    def __repr__(self) -> str:
        what = " ".join(
            str(v) for v in (self.model, self.method, self.pattern, self.config.get("dtype")) if v
        )
        shown = ", ".join(f"{k}={_short(v)}" for k, v in list(self.metrics.items())[:3])
        error = f" error={self.error!r}" if self.error else ""
        return f"Row({self.source}#{self.id} {self.kind} {self.status} {what} {shown}{error})"


def _short(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = json.dumps(value, default=str) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


class ResultTable(Sequence):
    """An ordered, read-only sequence of :class:`Row` with a notebook view and exports.

    Parameters
    ----------
    rows : iterable of Row
        The rows, in the order the table keeps (a store's queries give them by id).

    Examples
    --------
    >>> t = ResultTable([])
    >>> len(t), t.columns
    (0, [])
    """

    def __init__(self, rows: Iterable[Row]):
        self._rows = list(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ResultTable(self._rows[index])
        return self._rows[index]

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)

    def __add__(self, other: ResultTable) -> ResultTable:
        return ResultTable([*self._rows, *other])

    @property
    def columns(self) -> list[str]:
        """Every flat column name present in at least one row, in first-seen order."""
        seen: dict[str, None] = {}
        for row in self._rows:
            seen.update(dict.fromkeys(row.flat()))
        return list(seen)

    def records(self) -> list[dict]:
        """The rows as flat dicts (see :meth:`Row.flat`)."""
        return [row.flat() for row in self._rows]

    def where(self, **equals: object) -> ResultTable:
        """The rows whose :meth:`Row.get` equals every given value."""
        return ResultTable(r for r in self._rows if all(r.get(k) == v for k, v in equals.items()))

    def to_pandas(self):
        """A ``pandas.DataFrame`` of :meth:`records` (needs pandas: ``pip install pandas``)."""
        try:
            import pandas
        except ImportError as exc:
            from explorer.errors import MissingExtraError

            raise MissingExtraError(
                f"ResultTable.to_pandas needs pandas, which is not installed ({exc}); install "
                "it with: pip install pandas (or use .records() for plain dicts)"
            ) from exc
        return pandas.DataFrame(self.records(), columns=self.columns)

    def to_csv(
        self, path: str | Path, *, force: bool = False, protect: Iterable[str | Path] = ()
    ) -> Path:
        """Write the flat rows to ``path`` as CSV (dicts and lists as JSON text).

        The file is written beside ``path`` and renamed over it, so a crash never leaves half
        a file. An SQLite file (or a store in ``protect``) there is refused unless ``force``.

        Parameters
        ----------
        path : str or pathlib.Path
            The CSV file.
        force : bool, optional
            Write even over an SQLite file or a protected store.
        protect : Iterable of str or pathlib.Path, optional
            Store files that must not be overwritten.

        Returns
        -------
        pathlib.Path
            The file written.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "rows.csv"
        >>> ResultTable([]).to_csv(out).exists()
        True
        """
        path = check_output(path, protect=protect, force=force, what="CSV export")
        columns = self.columns
        with atomic_output(path) as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for record in self.records():
                writer.writerow(
                    {
                        k: json.dumps(v) if isinstance(v, (list, dict)) else v
                        for k, v in record.items()
                    }
                )
        return path

    def to_json(
        self, path: str | Path, *, force: bool = False, protect: Iterable[str | Path] = ()
    ) -> Path:
        """Write the rows to ``path`` as a JSON list of nested objects (safely, as :meth:`to_csv`).

        Parameters
        ----------
        path : str or pathlib.Path
            The JSON file.
        force : bool, optional
            Write even over an SQLite file or a protected store.
        protect : Iterable of str or pathlib.Path, optional
            Store files that must not be overwritten.

        Returns
        -------
        pathlib.Path
            The file written.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "rows.json"
        >>> ResultTable([]).to_json(out).read_text()
        '[]'
        """
        path = check_output(path, protect=protect, force=force, what="JSON export")
        rows = [{**{name: getattr(r, name) for name in _BASE}, **_parts(r)} for r in self._rows]
        with atomic_output(path) as handle:
            handle.write(json.dumps(rows, indent=1, default=str))
        return path

    def __repr__(self) -> str:
        kinds: dict[str, int] = {}
        for row in self._rows:
            kinds[row.kind] = kinds.get(row.kind, 0) + 1
        failed = sum(r.status == "failed" for r in self._rows)
        parts = ", ".join(f"{k}={n}" for k, n in kinds.items())
        return f"ResultTable({len(self)} rows{': ' + parts if parts else ''}, failed={failed})"

    def _repr_html_(self, limit: int = 50) -> str:
        header = ["source", "id", "kind", "status", "model", "method", "pattern", "dtype"]
        header += ["tokens", "metrics", "gpu", "created"]
        rows = []
        for r in self._rows[:limit]:
            level = {"ok": "ok", "failed": "error"}.get(r.status, "warn")
            metrics = ", ".join(f"{k}={_short(v)}" for k, v in r.metrics.items())
            status = _html.badge(r.status, level)
            if r.error:
                status += " " + _html.escape(r.error)
            rows.append(
                [
                    r.source,
                    r.id,
                    r.kind,
                    status,
                    r.model or "",
                    r.method or "",
                    r.pattern or "",
                    r.config.get("dtype", ""),
                    r.config.get("tokens", ""),
                    metrics,
                    r.gpu or "",
                    r.created,
                ]
            )
        more = f" (first {limit} shown)" if len(self) > limit else ""
        return _html.table(header, rows, caption=repr(self) + more, raw_columns=[3])


def _parts(row: Row) -> dict:
    return {"config": row.config, "metrics": row.metrics, "provenance": row.provenance}
