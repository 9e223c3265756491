"""``ResultStore``: every measurement in one SQLite file, with provenance on every row.

The file uses WAL mode and a busy timeout, so several processes may write at once; every write
is one short ``BEGIN IMMEDIATE`` transaction. A file that is not one of ours, is corrupt, or
was written by a newer explorer is never overwritten: opening it runs SQLite's ``quick_check``
and reads the schema version, and a failure raises :class:`StoreError` naming the file and the
way out (``sparsity-explorer store check|recover``). Any SQLite error met later is a
:class:`StoreError` too, and a store found damaged is not written to again.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

from explorer import _html
from explorer.errors import OutputPathError
from explorer.output_paths import is_sqlite_file, replacing
from explorer.results.store import schema
from explorer.results.store.canonical import canonical_json, to_jsonable
from explorer.results.store.files import check_output
from explorer.results.store.location import (
    StoreError,
    damaged,
    default_path,
    explain,
    reference_path,
)
from explorer.results.store.provenance import provenance as _provenance
from explorer.results.store.table import ResultTable, Row

__all__ = ["ResultStore"]

_FILTERS = ("kind", "status", "sweep_id", "cell_key", *schema.INDEXED_COLUMNS)
_TEXT_INDEXED = ("model", "method", "pattern", "dtype")
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
_COLUMNS = "id, kind, status, error, sweep_id, cell_key, created, config, metrics, provenance"


def _refuse_side_files(path: Path) -> None:
    # SQLite owns "<db>-wal" and "<db>-journal": a store under such a name would be replaced
    # by the next write to <db>, and a store there makes <db> unsafe to open.
    if path.name.endswith(_SIDE_SUFFIXES):
        raise StoreError(
            f"results database {path}: SQLite keeps a database's side files under names ending "
            "in -wal, -shm and -journal and may overwrite them; pass a name such as results.db"
        )
    for suffix in _SIDE_SUFFIXES:
        if is_sqlite_file(f"{path}{suffix}"):
            raise StoreError(
                f"results database {path}: {path}{suffix} is an SQLite database, which opening "
                f"{path} would overwrite as its {suffix[1:]} file; move it to a name such as "
                "rescued.db first"
            )


def _refuse_special(path: Path) -> None:
    # SQLite would read a FIFO forever, and write "<device>-journal" beside a device node.
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise StoreError(
            f"results database {path} is not a regular file (a device, FIFO or socket); "
            "SQLite would write side files beside it; pass a file path such as results.db"
        )


def _is_shipped(path: Path) -> bool:
    # The package's own reference database is opened immutable: nothing is written beside it.
    shipped = reference_path()
    try:
        return shipped is not None and path.resolve() == shipped.resolve()
    except OSError:
        return False


class ResultStore:
    """An SQLite results database with provenance on every row.

    Parameters
    ----------
    path : str or Path, optional
        The database file; created when missing. Defaults to :func:`default_path`.
        ``":memory:"`` gives a private in-memory store.
    readonly : bool, optional
        Open without ever writing (SQLite's ``mode=ro``; ``immutable=1`` on read-only media).
    timeout : float, optional
        Seconds to wait for another writer before giving up.
    source : str, optional
        The label of this store's rows (``row.source``); ``"reference"`` for a read-only
        store and ``"local"`` otherwise, unless given.
    check : bool, optional
        Run SQLite's ``quick_check`` on opening a file (a full read of it; skip it only for a
        file just checked).

    Raises
    ------
    StoreError
        The file is corrupt, not SQLite, SQLite without our schema, written by a newer
        explorer, a device, FIFO or socket (nothing is written beside it), or its path cannot
        be opened or written; the message says what to do. The shipped reference database
        is opened immutable, so nothing is ever written into the installed package.

    Examples
    --------
    >>> store = ResultStore(":memory:")
    >>> rid = store.record("prune", {"model": "digits-mlp", "method": "magnitude",
    ...                              "pattern": "2:4"}, {"accuracy": 0.93})
    >>> row = store.query(kind="prune")[0]
    >>> row.metrics["accuracy"], "torch" in row.provenance
    (0.93, True)
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        readonly: bool = False,
        timeout: float = 30.0,
        source: str | None = None,
        check: bool = True,
    ):
        memory = str(path) == ":memory:"
        if path is None:
            path = default_path()
            if not readonly:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(
                        f"cannot create the results folder {path.parent} ({exc}); pass a "
                        "writable path or set SPARSITY_EXPLORER_CACHE"
                    ) from exc
        self.path = Path(path) if memory else Path(path).expanduser()
        self.readonly = readonly
        self.timeout = float(timeout)
        self.source = source or ("reference" if readonly else "local")
        self._check = bool(check)
        self._damaged: str | None = None
        self._lock = threading.RLock()
        self._references: list[ResultStore] = []
        if not memory and self.path.is_dir():
            raise StoreError(
                f"results database {self.path} is a folder, expected a file; pass a file path "
                f"such as {self.path / 'results.db'}"
            )
        if not memory:
            _refuse_special(self.path)
        if readonly and not memory and not self.path.is_file():
            raise StoreError(f"results database {self.path} does not exist; check the path")
        if not memory:
            _refuse_side_files(self.path)
        self._conn = self._open(memory)

    # -- opening -------------------------------------------------------------------------------
    def _open(self, memory: bool) -> sqlite3.Connection:
        if self.readonly and not memory:
            if _is_shipped(self.path):
                return self._open_target(f"file:{quote(str(self.path.resolve()))}?immutable=1")
            try:
                return self._open_target(f"file:{quote(str(self.path.resolve()))}?mode=ro")
            except StoreError as exc:
                if "unable to open" not in str(exc) and "readonly" not in str(exc):
                    raise
            # Read-only media: the WAL index cannot be created; nobody can write there either.
            return self._open_target(f"file:{quote(str(self.path.resolve()))}?immutable=1")
        return self._open_target(":memory:" if memory else str(self.path))

    def _open_target(self, target: str) -> sqlite3.Connection:
        memory = target == ":memory:"
        try:
            conn = sqlite3.connect(
                target,
                timeout=self.timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=target.startswith("file:"),
            )
        except sqlite3.Error as exc:
            raise explain(exc, self.path, self.timeout) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            self._check_identity(conn)
            if self._check and not memory:
                self._quick_check(conn)
            if self.readonly:
                return self._readonly_upgrade(conn)
            if not memory:
                self._enable_wal(conn)
            self._migrate(conn)
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise explain(exc, self.path, self.timeout) from exc
        return conn

    def _quick_check(self, conn: sqlite3.Connection) -> None:
        # SQLite's quick_check reads every page: a store damaged in the middle is caught here,
        # before anything is written to it.
        problems = [r[0] for r in conn.execute("PRAGMA quick_check(5)").fetchall()]
        if problems != ["ok"]:
            raise damaged(self.path, "; ".join(map(str, problems)))

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL needs a moment alone with it and does not wait on the busy
        # handler: another process creating the schema at the same time makes it fail at once.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _check_identity(self, conn: sqlite3.Connection) -> None:
        # 1. Read the identity in one statement, so it comes from one consistent snapshot even
        #    while another process creates the schema; a non-SQLite file fails here.
        app_id, version, tables = conn.execute(
            "SELECT a.application_id, v.user_version, (SELECT count(*) FROM sqlite_master) "
            "FROM pragma_application_id() AS a, pragma_user_version() AS v"
        ).fetchone()
        # 2. Ours, or empty (a new file): fine. Anything else is someone else's data.
        if app_id != schema.APPLICATION_ID and (app_id != 0 or tables or version):
            raise StoreError(
                f"{self.path} is an SQLite database but not a sparsity-explorer results "
                f"database (application_id {app_id}, {tables} schema objects); it was left "
                "untouched: pass a new path (ResultStore('results.db') or --db results.db)"
            )
        # 3. A newer explorer wrote it: reading it could misread columns; refuse.
        if version > schema.SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has results schema version {version}, newer than this explorer "
                f"reads ({schema.SCHEMA_VERSION}); upgrade with pip install -U "
                "sparsity-explorer, or pass a new path"
            )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        if conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION:
            return
        # Re-read inside the write lock: another process may have migrated meanwhile.
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._check_identity(conn)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            schema.migrate(conn, version)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _readonly_upgrade(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        # An older read-only file is migrated in a private in-memory copy.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == schema.SCHEMA_VERSION:
            return conn
        memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.backup(memory)
        conn.close()
        self._migrate(memory)
        return memory

    # -- writing -------------------------------------------------------------------------------
    def record(
        self,
        kind: str,
        config: Mapping,
        metrics: Mapping | None = None,
        status: str = "ok",
        error: str | None = None,
        sweep_id: str | None = None,
        cell_key: str | None = None,
        provenance: Mapping | None = None,
    ) -> int:
        """Write one measurement and commit it; provenance is attached automatically.

        Parameters
        ----------
        kind : str
            What was measured (``"prune"``, ``"dense"``, ``"layer-speed"``, ...).
        config : dict
            The full configuration (model, method, pattern, layers, dtype, tokens, shape...).
            The keys model, method, pattern, dtype and tokens also go to indexed columns.
        metrics : dict, optional
            The measured values.
        status : str, optional
            ``"ok"``, ``"failed"`` or ``"skipped"``.
        error : str, optional
            Why a measurement failed or was skipped.
        sweep_id, cell_key : str, optional
            The sweep and cell this row belongs to; a (sweep_id, cell_key) pair is unique.
        provenance : dict, optional
            Where it was measured; defaults to this process's
            :func:`~explorer.results.store.provenance.provenance`.

        Returns
        -------
        int
            The new row's id.

        Examples
        --------
        >>> ResultStore(":memory:").record("dense", {"model": "digits-mlp"}, {"accuracy": 0.97})
        1
        """
        entry = {
            "kind": kind,
            "config": config,
            "metrics": metrics,
            "status": status,
            "error": error,
            "cell_key": cell_key,
            "provenance": provenance,
        }
        return self.record_many([entry], sweep_id=sweep_id)[0]

    def record_many(
        self,
        entries: Iterable[Mapping],
        sweep_id: str | None = None,
        replace: bool = False,
        writer: str | None = None,
    ) -> list[int]:
        """Write several rows in one transaction: all of them are committed, or none.

        Parameters
        ----------
        entries : iterable of dict
            Each with the keyword arguments of :meth:`record` (``kind`` and ``config`` needed).
        sweep_id : str, optional
            The sweep the rows belong to.
        replace : bool, optional
            First delete this sweep's rows with the same cell keys (and their ``key#n`` rows),
            to redo a skipped or failed cell.
        writer : str, optional
            A sweep writer's id: its leases on these cells are released in the same
            transaction (see :mod:`explorer.results.store.leases`).

        Returns
        -------
        list of int
            The new rows' ids.

        Raises
        ------
        sqlite3.IntegrityError
            A (sweep_id, cell_key) pair is already present (the cell was counted already).
        """
        values = [self._values(dict(e), sweep_id) for e in entries]
        sql = (
            "INSERT INTO results (kind, status, error, sweep_id, cell_key, created, model, "
            "method, pattern, dtype, tokens, gpu, config, metrics, provenance) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        with self.transaction() as conn:
            if replace and sweep_id is not None:
                for key in {v[4] for v in values if v[4]}:
                    conn.execute(
                        "DELETE FROM results WHERE sweep_id = ? AND "
                        "(cell_key = ? OR cell_key LIKE ? ESCAPE '\\')",
                        (sweep_id, key, key.replace("%", "\\%").replace("_", "\\_") + "#%"),
                    )
            ids = [conn.execute(sql, v).lastrowid for v in values]
            if writer is not None and sweep_id is not None:
                conn.executemany(
                    "DELETE FROM leases WHERE sweep_id = ? AND cell_key = ? AND writer = ?",
                    [(sweep_id, v[4], writer) for v in values if v[4]],
                )
            return ids

    def _values(self, entry: dict, sweep_id: str | None) -> tuple:
        kind = entry.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"kind={kind!r}: expected a non-empty string such as 'prune'")
        status = entry.get("status") or "ok"
        if status not in ("ok", "failed", "skipped"):
            raise ValueError(f"status={status!r}: expected 'ok', 'failed' or 'skipped'")
        config = dict(entry.get("config") or {})
        if not isinstance(config.get("pattern"), (str, type(None))):
            config["pattern"] = getattr(config["pattern"], "name", config["pattern"])
        config = to_jsonable(config)
        metrics = to_jsonable(dict(entry.get("metrics") or {}))
        prov = to_jsonable(dict(entry.get("provenance") or _provenance()))
        tokens = config.get("tokens")
        return (
            kind,
            status,
            None if entry.get("error") is None else str(entry["error"]),
            sweep_id,
            entry.get("cell_key"),
            prov.get("time") or _provenance()["time"],
            *(None if config.get(c) is None else str(config[c]) for c in _TEXT_INDEXED),
            tokens if isinstance(tokens, int) else None,
            prov.get("gpu"),
            canonical_json(config),
            canonical_json(metrics),
            canonical_json(prov),
        )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any error.

        Every write to the store goes through it (the store's own, its leases and recovery).

        Yields
        ------
        sqlite3.Connection
            The store's connection, inside the transaction and under the store's lock.

        Raises
        ------
        StoreError
            For a store opened read-only or found damaged, or an SQLite error, explained.
        """
        if self.readonly:
            raise StoreError(f"results database {self.path} was opened read-only; cannot write")
        with self._lock:
            if self._damaged:
                raise damaged(self.path, self._damaged)
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._explain(exc) from exc
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                if self._conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                    exc, sqlite3.IntegrityError
                ):
                    raise self._explain(exc) from exc
                raise

    def _explain(self, exc: sqlite3.Error) -> StoreError:
        # Corruption found while working marks the store damaged: it is not written to again.
        if not isinstance(exc, sqlite3.OperationalError) or "malformed" in str(exc):
            self._damaged = str(exc)
        return explain(exc, self.path, self.timeout)

    def _read(self, sql: str, params: Iterable = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.DatabaseError as exc:
                raise self._explain(exc) from exc

    def add_sweep(self, sweep_id: str, config: Mapping) -> None:
        """Remember a sweep's grid (kept from its first run).

        Parameters
        ----------
        sweep_id : str
            The sweep's id.
        config : Mapping
            The sweep's grid, stored as canonical JSON.
        """
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO sweeps (sweep_id, created, config) VALUES (?, ?, ?)",
                (sweep_id, _provenance()["time"], canonical_json(config)),
            )

    # -- reading -------------------------------------------------------------------------------
    def done_cells(self, sweep_id: str) -> dict[str, str]:
        """``{cell_key: status}`` of a sweep's cells (their first rows) already in the store.

        Parameters
        ----------
        sweep_id : str
            The sweep's id.

        Returns
        -------
        dict[str, str]
        """
        rows = self._read(
            "SELECT cell_key, status FROM results WHERE sweep_id = ? AND cell_key IS NOT NULL "
            "AND cell_key NOT LIKE '%#%'",
            (sweep_id,),
        )
        return dict(rows)

    def sweeps(self) -> list[dict]:
        """Every sweep in the store: ``sweep_id``, ``created``, ``config`` and row counts."""
        rows = self._read(
            "SELECT s.sweep_id, s.created, s.config, count(r.id), "
            "sum(r.status = 'failed') FROM sweeps s LEFT JOIN results r "
            "ON r.sweep_id = s.sweep_id GROUP BY s.sweep_id ORDER BY s.created"
        )
        return [
            {"sweep_id": s, "created": c, "config": json.loads(g), "rows": n, "failed": f or 0}
            for s, c, g, n, f in rows
        ]

    def query(self, kind: str | None = None, *, include_reference: bool = True, **filters):
        """The rows matching every filter, oldest first, as a :class:`ResultTable`.

        Parameters
        ----------
        kind : str, optional
            Only rows of this kind.
        include_reference : bool, optional
            Also return rows of the attached reference databases (``row.source ==
            "reference"``); see :meth:`attach_reference`.
        **filters
            Equality on ``status``, ``sweep_id``, ``cell_key``, ``model``, ``method``,
            ``pattern``, ``dtype``, ``tokens`` or ``gpu``; a list or tuple means any of them.

        Examples
        --------
        >>> s = ResultStore(":memory:")
        >>> _ = s.record("prune", {"model": "a", "pattern": "2:4"}, {"x": 1})
        >>> _ = s.record("prune", {"model": "b", "pattern": "4:8"}, {"x": 2})
        >>> [r.model for r in s.query(pattern=["2:4", "8:16"])]
        ['a']
        """
        if kind is not None:
            filters["kind"] = kind
        clauses, params = [], []
        for name, value in filters.items():
            if name not in _FILTERS:
                raise ValueError(
                    f"cannot filter results on {name!r}: expected one of {', '.join(_FILTERS)}; "
                    "filter other fields with ResultTable.where(...)"
                )
            if value is None:
                clauses.append(f"{name} IS NULL")
            elif isinstance(value, (list, tuple, set, frozenset)):
                items = [str(to_jsonable(v)) if name != "tokens" else v for v in value]
                clauses.append(f"{name} IN ({', '.join('?' * len(items)) or 'NULL'})")
                params.extend(items)
            else:
                clauses.append(f"{name} = ?")
                params.append(value if name == "tokens" else str(to_jsonable(value)))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._read(f"SELECT {_COLUMNS} FROM results{where} ORDER BY id", params)
        table = ResultTable(
            Row(*r[:7], json.loads(r[7]), json.loads(r[8]), json.loads(r[9]), self.source)
            for r in rows
        )
        if include_reference:
            for ref in self._references:
                table = table + ref.query(include_reference=False, **filters)
        return table

    def __len__(self) -> int:
        return self._read("SELECT count(*) FROM results")[0][0]

    @property
    def schema_version(self) -> int:
        """The database's schema version (``PRAGMA user_version``)."""
        return self._read("PRAGMA user_version")[0][0]

    def export_csv(self, path: str | Path, *, force: bool = False, **filters) -> Path:
        """Write the rows (see :meth:`query` for filters) to a flat CSV file.

        The file is written whole or not at all; this store, or any SQLite file, at ``path``
        is refused unless ``force=True``.

        Parameters
        ----------
        path : str or pathlib.Path
            The CSV file.
        force : bool, optional
            Write even over an SQLite file or a store.
        **filters
            Passed to :meth:`query`.

        Returns
        -------
        pathlib.Path
            The file written.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> db = pathlib.Path(tempfile.mkdtemp()) / "results.db"
        >>> ResultStore(db).export_csv(db)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        explorer.results.store.files.OutputRefused: refusing to write the CSV export to ...
        """
        protect = [self.path, *(r.path for r in self._references)]
        check_output(path, protect=protect, force=force, what="CSV export")
        return self.query(**filters).to_csv(path, force=force, protect=protect)

    def export_json(self, path: str | Path, *, force: bool = False, **filters) -> Path:
        """Write the rows (see :meth:`query` for filters) to a JSON file (as :meth:`export_csv`).

        Parameters
        ----------
        path : str or pathlib.Path
            The JSON file.
        force : bool, optional
            Write even over an SQLite file or a store.
        **filters
            Passed to :meth:`query`.

        Returns
        -------
        pathlib.Path
            The file written.
        """
        protect = [self.path, *(r.path for r in self._references)]
        check_output(path, protect=protect, force=force, what="JSON export")
        return self.query(**filters).to_json(path, force=force, protect=protect)

    # -- reference -----------------------------------------------------------------------------
    @classmethod
    def reference(cls) -> ResultStore | None:
        """The shipped reference database, read-only, or ``None`` when none is shipped.

        Examples
        --------
        >>> with ResultStore.reference() as ref:
        ...     ref.readonly, ref.path.name
        (True, 'reference.db')
        """
        path = reference_path()
        return None if path is None else cls(path, readonly=True)

    def attach_reference(self, path: str | Path | None = None) -> ResultStore | None:
        """Show another database's rows (default: the shipped reference) in :meth:`query`.

        Returns the attached read-only store, or ``None`` when ``path`` is omitted and no
        reference database is shipped.

        Parameters
        ----------
        path : str or pathlib.Path or None, optional
            The database to attach, opened read-only; None for the shipped reference.

        Returns
        -------
        ResultStore or None
        """
        ref = ResultStore(path, readonly=True) if path is not None else ResultStore.reference()
        if ref is not None:
            self._references.append(ref)
        return ref

    @property
    def references(self) -> tuple[ResultStore, ...]:
        """The read-only databases attached with :meth:`attach_reference`."""
        return tuple(self._references)

    def snapshot(self, dest: str | Path) -> Path:
        """Copy the whole database to ``dest`` as one self-contained file (no WAL side files).

        This is how a reference database is made from a measured ``results.db``.

        Parameters
        ----------
        dest : str or pathlib.Path
            The new file; an existing path is refused.

        Returns
        -------
        pathlib.Path
            ``dest``.
        """
        dest = Path(dest).expanduser()
        if os.path.lexists(dest):
            raise StoreError(f"{dest} exists already; pass a new path or remove it first")
        try:
            with replacing(dest, what="database snapshot") as part:
                out = sqlite3.connect(part, isolation_level=None)
                try:
                    with self._lock:
                        self._conn.backup(out)
                    out.execute("PRAGMA journal_mode = DELETE")
                finally:
                    out.close()
        except OutputPathError as exc:
            raise StoreError(str(exc)) from None
        finally:
            for side in ("-wal", "-shm", "-journal"):
                for part_file in dest.parent.glob(f".{dest.name}.*.part{side}"):
                    part_file.unlink(missing_ok=True)
        return dest

    # -- lifetime and display ------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (and those of attached references)."""
        with self._lock:
            self._conn.close()
        for ref in self._references:
            ref.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = ", read-only" if self.readonly else ""
        refs = f", {len(self._references)} reference" if self._references else ""
        return f"ResultStore({str(self.path)!r}, {len(self)} rows{mode}{refs})"

    def _repr_html_(self) -> str:
        counts = self._read(
            "SELECT kind, status, count(*) FROM results GROUP BY kind, status ORDER BY kind"
        )
        return _html.table(["kind", "status", "rows"], counts, caption=repr(self))
