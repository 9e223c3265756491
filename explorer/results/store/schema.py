"""The results database's schema: its version, its identity and its ordered migrations.

A results database is an SQLite file whose ``PRAGMA application_id`` is :data:`APPLICATION_ID`
and whose ``PRAGMA user_version`` is the schema version. Version 0 means a brand new, empty
file. Each migration moves the schema up by one version inside the caller's transaction, so
two processes opening the same new file at once cannot both create it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

__all__ = ["APPLICATION_ID", "INDEXED_COLUMNS", "MIGRATIONS", "SCHEMA_VERSION", "migrate"]

#: ``PRAGMA application_id`` of a sparsity-explorer results database ("SPEX" in ASCII).
APPLICATION_ID = 0x53504558

#: Configuration keys copied into their own indexed columns (besides ``kind``).
INDEXED_COLUMNS = ("model", "method", "pattern", "dtype", "tokens", "gpu")


def _v1(conn: sqlite3.Connection) -> None:
    # 1. One row per measurement; configuration, metrics and provenance as JSON text.
    # 2. UNIQUE(sweep_id, cell_key) makes counting a sweep cell twice impossible
    #    (SQLite treats NULLs as distinct, so rows outside sweeps are unconstrained).
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(
        """
        CREATE TABLE results (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'ok',
            error TEXT,
            sweep_id TEXT,
            cell_key TEXT,
            created TEXT NOT NULL,
            model TEXT,
            method TEXT,
            pattern TEXT,
            dtype TEXT,
            tokens INTEGER,
            config TEXT NOT NULL DEFAULT '{}',
            metrics TEXT NOT NULL DEFAULT '{}',
            provenance TEXT NOT NULL DEFAULT '{}',
            UNIQUE (sweep_id, cell_key)
        )
        """
    )
    for column in ("kind", "model", "method", "pattern", "dtype", "tokens"):
        conn.execute(f"CREATE INDEX results_{column} ON results ({column})")


def _v2(conn: sqlite3.Connection) -> None:
    # 1. The GPU gets its own indexed column, back-filled from the provenance JSON.
    # 2. A sweeps table remembers each sweep's grid, so a report can name it.
    conn.execute("ALTER TABLE results ADD COLUMN gpu TEXT")
    conn.execute("UPDATE results SET gpu = json_extract(provenance, '$.gpu')")
    conn.execute("CREATE INDEX results_gpu ON results (gpu)")
    conn.execute(
        """
        CREATE TABLE sweeps (
            sweep_id TEXT PRIMARY KEY,
            created TEXT NOT NULL,
            config TEXT NOT NULL DEFAULT '{}'
        )
        """
    )


def _v3(conn: sqlite3.Connection) -> None:
    # 1. A lease per sweep cell being computed: which writer claimed it and when (Unix time,
    #    refreshed while it runs), so concurrent sweeps on one store split the work.
    conn.execute(
        """
        CREATE TABLE leases (
            sweep_id TEXT NOT NULL,
            cell_key TEXT NOT NULL,
            writer TEXT NOT NULL,
            claimed REAL NOT NULL,
            PRIMARY KEY (sweep_id, cell_key)
        )
        """
    )


#: ``MIGRATIONS[i]`` moves a database from schema version ``i`` to ``i + 1``.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3)

#: The schema version this explorer writes and reads.
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, current: int, target: int = SCHEMA_VERSION) -> int:
    """Apply the migrations from ``current`` up to ``target`` on an open transaction.

    Parameters
    ----------
    conn : sqlite3.Connection
        A connection inside a write transaction (``BEGIN IMMEDIATE``); the caller commits.
    current : int
        The database's schema version now (``PRAGMA user_version``).
    target : int, optional
        The version to reach; defaults to :data:`SCHEMA_VERSION`.

    Returns
    -------
    int
        The version reached.

    Examples
    --------
    >>> conn = sqlite3.connect(":memory:")
    >>> migrate(conn, 0)
    3
    >>> conn.execute("PRAGMA user_version").fetchone()[0]
    3
    """
    if not 0 <= current <= target <= SCHEMA_VERSION:
        raise ValueError(
            f"cannot migrate a results database from schema version {current} to {target}: "
            f"this explorer knows versions 0 to {SCHEMA_VERSION}"
        )
    for version in range(current, target):
        MIGRATIONS[version](conn)
        conn.execute(f"PRAGMA user_version = {version + 1}")
    return target
