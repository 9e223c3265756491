"""Check a results database and copy every readable row out of a damaged one.

Both open the file read-only and never write to it. :func:`recover_store` reads the rows by
row id in batches; when SQLite meets a damaged page it falls back to one row at a time and
probes past the damage, so the rows on healthy pages are all found. The copy is built in a
temporary file beside the destination and renamed into place when complete.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from explorer import _html
from explorer.errors import OutputPathError
from explorer.output_paths import is_sqlite_file, replacing
from explorer.results.store import schema
from explorer.results.store.location import StoreError

__all__ = ["RecoveryResult", "StoreHealth", "check_store", "recover_store"]

_RESULT_COLUMNS = (
    "kind status error sweep_id cell_key created model method pattern dtype tokens gpu "
    "config metrics provenance"
).split()
_BATCH = 500
_GAP_LIMIT = 100_000  # ids tried one by one across a damaged stretch


@dataclass(frozen=True)
class StoreHealth:
    """What :func:`check_store` found.

    Attributes
    ----------
    path : Path
        The file checked.
    ok : bool
        True when SQLite's ``integrity_check`` passes, the file is ours and its schema is one
        this explorer reads.
    schema_version : int or None
        ``PRAGMA user_version`` (None when unreadable).
    problems : tuple of str
        What is wrong, in SQLite's words (at most 20 lines) and ours.
    readable_rows, unreadable_rows : int
        Result rows that can be read back whole, and rows found but not readable (their
        configuration, metrics or provenance cannot be decoded).
    missing_ids : int
        Row ids below the largest readable one that were not found: rows deleted earlier (a
        retried sweep cell replaces its rows) or rows on damaged pages; an upper bound on loss.
    """

    path: Path
    ok: bool
    schema_version: int | None
    problems: tuple[str, ...]
    readable_rows: int = 0
    unreadable_rows: int = 0
    missing_ids: int = 0

    def __repr__(self) -> str:
        state = "ok" if self.ok else f"damaged: {'; '.join(self.problems[:3])}"
        return (
            f"StoreHealth({str(self.path)!r}, {state}, schema {self.schema_version}, "
            f"{self.readable_rows} readable rows, {self.unreadable_rows} unreadable, "
            f"{self.missing_ids} ids missing)"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("file", _html.escape(self.path)),
            ("state", _html.badge("ok" if self.ok else "damaged", "ok" if self.ok else "error")),
            ("schema version", self.schema_version),
            ("readable rows", self.readable_rows),
            ("unreadable rows", self.unreadable_rows),
            ("ids missing (deleted or lost)", self.missing_ids),
            *(("problem", _html.escape(p)) for p in self.problems),
        ]
        return _html.table(["", ""], rows, caption="Results database check", raw_columns=[1])


@dataclass(frozen=True)
class RecoveryResult:
    """What :func:`recover_store` copied.

    Attributes
    ----------
    source, dest : Path
        The damaged file (untouched) and the new one.
    rows, sweeps : int
        Result rows and sweep grids copied.
    unreadable_rows : int
        Rows found but not readable whole (left behind).
    missing_ids : int
        Row ids not found below the largest copied one (deleted earlier, or lost).
    problems : tuple of str
        Problems to report beside the counts (none from :func:`recover_store` itself).
    """

    source: Path
    dest: Path
    rows: int
    sweeps: int
    unreadable_rows: int
    missing_ids: int
    problems: tuple[str, ...] = field(default=())

    def __repr__(self) -> str:
        return (
            f"RecoveryResult({str(self.source)!r} -> {str(self.dest)!r}: {self.rows} rows and "
            f"{self.sweeps} sweeps copied, {self.unreadable_rows} unreadable rows left, "
            f"{self.missing_ids} ids missing)"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("from", self.source),
            ("to", self.dest),
            ("rows copied", self.rows),
            ("sweeps copied", self.sweeps),
            ("unreadable rows left", self.unreadable_rows),
            ("ids missing (deleted or lost)", self.missing_ids),
        ]
        return _html.table(["", ""], [(k, _html.escape(v)) for k, v in rows], caption="Recovery")


def _connect(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise StoreError(f"results database {path} does not exist; check the path")
    if not is_sqlite_file(path):
        raise StoreError(
            f"{path} is not an SQLite database (its first bytes are not SQLite's header), so "
            "there is nothing to check or recover; check the path"
        )
    last: sqlite3.Error | None = None
    for mode in ("mode=ro", "immutable=1"):  # immutable: read-only media
        try:
            conn = sqlite3.connect(
                f"file:{quote(str(path.resolve()))}?{mode}", uri=True, isolation_level=None
            )
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error as exc:
            last = exc
    raise StoreError(
        f"results database {path} cannot be read at all ({last}): its first page or schema is "
        "damaged, and no rows can be found without it"
    )


def _scan(conn: sqlite3.Connection, table: str) -> Iterator[tuple[int, dict | None]]:
    """Yield ``(rowid, row or None)`` for every row found; None for a row that fails to read."""
    last = 0
    while True:
        try:
            cursor = conn.execute(
                f"SELECT rowid, * FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT {_BATCH}",
                (last,),
            )
            names = [d[0] for d in cursor.description]
            batch = cursor.fetchall()
        except sqlite3.DatabaseError:
            batch = None
        if batch is not None:
            if not batch:
                return
            for values in batch:
                yield values[0], dict(zip(names, values, strict=True))
            last = batch[-1][0]
            continue
        # 1. The batch met a damaged page: probe past it with growing steps.
        step, found = 1, None
        while step < 2**62:
            try:
                row = conn.execute(
                    f"SELECT rowid FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 1",
                    (last + step,),
                ).fetchone()
            except sqlite3.DatabaseError:
                step *= 2
                continue
            found = None if row is None else row[0]
            break
        # 2. Try each id across the damaged stretch on its own.
        end = found if found is not None else last + min(step, _GAP_LIMIT)
        for rowid in range(last + 1, min(end, last + 1 + _GAP_LIMIT)):
            try:
                cursor = conn.execute(f"SELECT rowid, * FROM {table} WHERE rowid = ?", (rowid,))
                names = [d[0] for d in cursor.description]
                values = cursor.fetchone()
            except sqlite3.DatabaseError:
                continue
            if values is not None:
                yield rowid, dict(zip(names, values, strict=True))
        if found is None:
            return
        last = found - 1


def _result_row(rowid: int, raw: dict) -> tuple | None:
    # A row is copied only when its JSON parts decode and its kind is present.
    try:
        parts = [json.loads(raw.get(k) or "{}") for k in ("config", "metrics", "provenance")]
    except (TypeError, ValueError):
        return None
    if (
        not isinstance(raw.get("kind"), str)
        or not raw["kind"]
        or not all(isinstance(p, dict) for p in parts)
    ):
        return None
    values = {**raw, "gpu": raw.get("gpu", parts[2].get("gpu"))}
    return (rowid, *(values.get(c) for c in _RESULT_COLUMNS))


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _walk(conn: sqlite3.Connection) -> tuple[list[tuple], list[tuple], int, int]:
    rows, unreadable, top = [], 0, 0
    for rowid, raw in _scan(conn, "results"):
        row = None if raw is None else _result_row(rowid, raw)
        if row is None:
            unreadable += 1
        else:
            rows.append(row)
            top = max(top, rowid)
    missing = top - len(rows) - unreadable if rows else 0
    sweeps = []
    if "sweeps" in _tables(conn):
        for _, raw in _scan(conn, "sweeps"):
            if raw is not None and isinstance(raw.get("sweep_id"), str):
                sweeps.append(
                    (raw["sweep_id"], raw.get("created") or "", raw.get("config") or "{}")
                )
    return rows, sweeps, unreadable, max(missing, 0)


def check_store(path: str | Path) -> StoreHealth:
    """Say whether a results database is healthy, and what is damaged if not.

    Runs SQLite's ``integrity_check`` and reads every result row back, on a read-only
    connection: the file is never written to.

    Parameters
    ----------
    path : str or Path
        The results database.

    Returns
    -------
    StoreHealth

    Raises
    ------
    StoreError
        The file is missing, not SQLite, or so damaged that nothing can be read.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from explorer.results.store import ResultStore
    >>> db = pathlib.Path(tempfile.mkdtemp()) / "results.db"
    >>> ResultStore(db).record("dense", {"model": "m"}, {"accuracy": 0.9})
    1
    >>> check_store(db).ok
    True
    """
    path = Path(path).expanduser()
    conn = _connect(path)
    try:
        problems: list[str] = []
        try:
            found = [r[0] for r in conn.execute("PRAGMA integrity_check(20)").fetchall()]
        except sqlite3.DatabaseError as exc:
            found = [str(exc)]
        if found != ["ok"]:
            problems += [line for item in found for line in str(item).splitlines() if line]
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            app_id, version = None, None
            problems.append(f"the header cannot be read: {exc}")
        if app_id not in (None, schema.APPLICATION_ID):
            problems.append(f"not a sparsity-explorer results database (application_id {app_id})")
        if version is not None and version > schema.SCHEMA_VERSION:
            problems.append(f"schema version {version} is newer than this explorer reads")
        rows, unreadable, missing = [], 0, 0
        try:
            if "results" in _tables(conn):
                rows, _, unreadable, missing = _walk(conn)
            elif app_id == schema.APPLICATION_ID:
                problems.append("the results table is missing")
        except sqlite3.DatabaseError as exc:
            problems.append(f"the schema cannot be read: {exc}")
        if unreadable:
            problems.append(f"{unreadable} result rows cannot be decoded")
        return StoreHealth(
            path, not problems, version, tuple(problems), len(rows), unreadable, missing
        )
    finally:
        conn.close()


def recover_store(path: str | Path, dest: str | Path) -> RecoveryResult:
    """Copy every readable row of a (damaged) results database into a new file.

    The source is opened read-only and left as it is; ``dest`` must not exist. Rows keep
    their ids, sweep grids are copied too, and the new file is a healthy store of the current
    schema, renamed into place only once complete.

    Parameters
    ----------
    path : str or Path
        The damaged results database.
    dest : str or Path
        The new file.

    Returns
    -------
    RecoveryResult

    Raises
    ------
    StoreError
        ``dest`` exists, or the source is missing, not SQLite or unreadable from its first page.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from explorer.results.store import ResultStore
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> ResultStore(folder / "a.db").record("dense", {"model": "m"}, {"accuracy": 0.9})
    1
    >>> recover_store(folder / "a.db", folder / "b.db").rows
    1
    """
    from explorer.results.store.db import ResultStore

    if str(dest) == ":memory:":
        raise StoreError(
            "store recover needs a file to copy the rows into, got ':memory:' (the rows would "
            "vanish at once); pass a new path such as rescued.db"
        )
    path, dest = Path(path).expanduser(), Path(dest).expanduser()
    if os.path.lexists(dest) or Path(f"{dest}-wal").exists():
        raise StoreError(f"{dest} exists already; recover into a new file (pass a new path)")
    if dest.name.endswith(("-wal", "-shm", "-journal")):
        raise StoreError(
            f"{dest}: SQLite keeps a database's side files under names ending in -wal, -shm "
            "and -journal, and may replace such a file; recover into a name such as rescued.db"
        )
    if not dest.parent.is_dir():
        raise StoreError(f"the folder {dest.parent} does not exist; create it or pass another path")
    conn = _connect(path)
    try:
        try:
            if "results" not in _tables(conn):
                raise StoreError(f"{path} has no results table: nothing to recover")
            rows, sweeps, unreadable, missing = _walk(conn)
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"results database {path}: its schema cannot be read ({exc}); no rows can be "
                "found without it"
            ) from exc
    finally:
        conn.close()
    part = None
    try:
        with replacing(dest, what="recovered store") as part:
            with ResultStore(part) as store, store.transaction() as out:
                columns = ", ".join(["id", *_RESULT_COLUMNS])
                marks = ", ".join("?" * (len(_RESULT_COLUMNS) + 1))
                out.executemany(f"INSERT OR IGNORE INTO results ({columns}) VALUES ({marks})", rows)
                out.executemany(
                    "INSERT OR IGNORE INTO sweeps (sweep_id, created, config) VALUES (?, ?, ?)",
                    sweeps,
                )
    except OutputPathError as exc:
        raise StoreError(str(exc)) from None
    finally:
        for side in ("-wal", "-shm", "-journal"):
            if part is not None:
                Path(f"{part}{side}").unlink(missing_ok=True)
    return RecoveryResult(path, dest, len(rows), len(sweeps), unreadable, missing)
