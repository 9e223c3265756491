"""Leases on sweep cells, so several sweeps on one store split the work instead of repeating it.

A writer claims a cell before computing it: one row in the ``leases`` table with the writer's
id (``host:pid:random``) and the time, refreshed while the cell runs. Another writer skips a
cell leased by a live writer, and reclaims it when the lease is stale: older than the timeout,
or held by a process of this host that no longer exists (a killed sweep's cells are taken over
at once on its own machine).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from explorer.results.store.db import ResultStore

__all__ = ["CLAIMED", "DONE", "HELD", "LeaseKeeper", "claim_cell", "new_writer_id", "release"]

CLAIMED, DONE, HELD = "claimed", "done", "held by another writer"


def new_writer_id() -> str:
    """A writer id unique to this process and call: ``host:pid:random``.

    Examples
    --------
    >>> new_writer_id().count(":") >= 2
    True
    """
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _dead_here(writer: str) -> bool:
    # A writer of this host whose process is gone holds nothing any more.
    parts = writer.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or os.name != "posix":
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    return False


def claim_cell(
    store: ResultStore,
    sweep_id: str,
    cell_key: str,
    writer: str,
    *,
    finished: Iterable[str] = ("ok", "failed"),
    stale_after: float = 120.0,
) -> str:
    """Claim one sweep cell for ``writer`` in one transaction.

    Parameters
    ----------
    store : ResultStore
        The results store.
    sweep_id, cell_key : str
        The cell.
    writer : str
        This writer's id (:func:`new_writer_id`).
    finished : iterable of str, optional
        Statuses that count as done (``("ok",)`` when retrying failed cells).
    stale_after : float, optional
        Seconds after which another writer's unrefreshed lease is taken over.

    Returns
    -------
    str
        :data:`CLAIMED` (compute it), :data:`DONE` (its row is in the store) or :data:`HELD`
        (another live writer is computing it).

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> store = ResultStore(":memory:")
    >>> claim_cell(store, "s", "c1", "a:1:x"), claim_cell(store, "s", "c1", "b:2:y")
    ('claimed', 'held by another writer')
    """
    finished = tuple(finished)
    with store.transaction() as conn:
        row = conn.execute(
            "SELECT status FROM results WHERE sweep_id = ? AND cell_key = ?", (sweep_id, cell_key)
        ).fetchone()
        if row is not None and row[0] in finished:
            return DONE
        now = time.time()
        lease = conn.execute(
            "SELECT writer, claimed FROM leases WHERE sweep_id = ? AND cell_key = ?",
            (sweep_id, cell_key),
        ).fetchone()
        if lease is not None and lease[0] != writer:
            if now - lease[1] < stale_after and not _dead_here(lease[0]):
                return HELD
        conn.execute(
            "INSERT OR REPLACE INTO leases (sweep_id, cell_key, writer, claimed) "
            "VALUES (?, ?, ?, ?)",
            (sweep_id, cell_key, writer, now),
        )
        return CLAIMED


def release(store: ResultStore, writer: str, sweep_id: str | None = None) -> None:
    """Drop ``writer``'s leases (of one sweep, or all).

    Parameters
    ----------
    store : ResultStore
        The store holding the leases.
    writer : str
        The writer whose leases are dropped.
    sweep_id : str or None, optional
        Only this sweep's leases; None drops all of the writer's.
    """
    with store.transaction() as conn:
        if sweep_id is None:
            conn.execute("DELETE FROM leases WHERE writer = ?", (writer,))
        else:
            conn.execute("DELETE FROM leases WHERE writer = ? AND sweep_id = ?", (writer, sweep_id))


class LeaseKeeper:
    """Refresh a writer's leases in a background thread while its cells run.

    Parameters
    ----------
    store : ResultStore
        The results store.
    writer : str
        The writer whose leases are refreshed.
    every : float
        Seconds between refreshes (a quarter of the stale timeout is a good choice).

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> with LeaseKeeper(ResultStore(":memory:"), "a:1:x", every=60):
    ...     pass
    """

    def __init__(self, store: ResultStore, writer: str, every: float):
        self.store, self.writer, self.every = store, writer, float(every)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def _run(self) -> None:
        from explorer.results.store.location import StoreError

        while not self._stop.wait(self.every):
            try:
                with self.store.transaction() as conn:
                    conn.execute(
                        "UPDATE leases SET claimed = ? WHERE writer = ?",
                        (time.time(), self.writer),
                    )
            except StoreError:
                # A busy or damaged store: the sweep's own next write reports it; an
                # unrefreshed lease only lets another writer take the cell over.
                continue

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def __repr__(self) -> str:
        return f"LeaseKeeper({self.writer!r}, every {self.every:g} s)"
