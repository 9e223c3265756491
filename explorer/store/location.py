"""Where results databases live, and the one error type that names a file and a way out."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

__all__ = ["StoreError", "default_path", "explain", "reference_path"]


class StoreError(ValueError):
    """The results database cannot be used as asked; the message names the file and a way out."""


def default_path() -> Path:
    """Where results go by default.

    ``$SPARSITY_EXPLORER_CACHE`` (a folder, or a file path ending in ``.db``), else
    ``$XDG_CACHE_HOME/sparsity-explorer/results.db``, else
    ``~/.cache/sparsity-explorer/results.db``.

    Examples
    --------
    >>> default_path().name
    'results.db'
    """
    env = os.environ.get("SPARSITY_EXPLORER_CACHE")
    if env:
        path = Path(env).expanduser()
        return path if path.suffix == ".db" else path / "results.db"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "sparsity-explorer" / "results.db"


def reference_path() -> Path | None:
    """The reference database shipped in the package (``explorer/data/reference.db``), if any.

    Examples
    --------
    >>> p = reference_path()
    >>> p is None or p.name == "reference.db"
    True
    """
    path = Path(__file__).resolve().parents[1] / "data" / "reference.db"
    return path if path.is_file() else None


def explain(exc: sqlite3.Error, path: Path, timeout: float) -> StoreError:
    """Turn an SQLite error into a :class:`StoreError` naming ``path`` and what to do."""
    text = str(exc)
    low = text.lower()
    if "disk is full" in low:
        hint = "the disk holding it is full; free some space or pass a path on another disk"
    elif "readonly" in low or "read-only" in low:
        hint = (
            "it is read-only; pass a writable path (ResultStore('results.db') or --db "
            "results.db) or make the file and its folder writable"
        )
    elif "unable to open" in low:
        hint = (
            "its folder is missing or not writable; pass a writable path (ResultStore("
            "'results.db') or --db results.db) or set SPARSITY_EXPLORER_CACHE to a writable folder"
        )
    elif "locked" in low or "busy" in low:
        hint = (
            f"another process held it locked for more than {timeout:g} s; wait for it to "
            "finish or pass a longer timeout"
        )
    elif "not a database" in low or "malformed" in low or "corrupt" in low:
        hint = (
            "it is corrupt or not an SQLite database; pass a new path, or move the file aside "
            f"(mv '{path}' '{path}.bak') and run again"
        )
    else:
        hint = "pass a new path, or move the file aside and run again"
    return StoreError(f"results database {path}: {text} ({hint})")
