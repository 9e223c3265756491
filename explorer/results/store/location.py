"""Where results databases live, and the one error type that names a file and a way out."""

from __future__ import annotations

import os
import shlex
import sqlite3
from pathlib import Path

__all__ = [
    "CACHE_ENV",
    "StoreError",
    "cache_dir",
    "damaged",
    "default_path",
    "explain",
    "reference_path",
]

#: The environment variable naming the cache folder (or a results file ending in ``.db``).
CACHE_ENV = "SPARSITY_EXPLORER_CACHE"


class StoreError(ValueError):
    """The results database cannot be used as asked; the message names the file and a way out."""


def cache_dir() -> Path:
    """The per-user cache folder: weights, tuned algorithms, exports and the results file.

    ``$SPARSITY_EXPLORER_CACHE`` names the folder, or a results file ending in ``.db`` whose
    folder is then the cache; else ``$XDG_CACHE_HOME/sparsity-explorer``, else
    ``~/.cache/sparsity-explorer``.

    Examples
    --------
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {CACHE_ENV: "/data/cache"}):
    ...     str(cache_dir())
    '/data/cache'
    >>> with mock.patch.dict(os.environ, {CACHE_ENV: "/data/runs.db"}):
    ...     str(cache_dir()), str(default_path())
    ('/data', '/data/runs.db')
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        path = Path(env).expanduser()
        return path.parent if path.suffix == ".db" else path
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "sparsity-explorer"


def default_path() -> Path:
    """Where results go by default: ``results.db`` in :func:`cache_dir`.

    Where ``$SPARSITY_EXPLORER_CACHE`` names a file ending in ``.db``, that file.

    Examples
    --------
    >>> default_path().name
    'results.db'
    """
    env = os.environ.get(CACHE_ENV)
    if env and Path(env).suffix == ".db":
        return Path(env).expanduser()
    return cache_dir() / "results.db"


def reference_path() -> Path | None:
    """The reference database shipped in the package (``explorer/data/reference.db``), if any.

    Examples
    --------
    >>> reference_path().parts[-3:]
    ('explorer', 'data', 'reference.db')
    """
    path = Path(__file__).resolve().parents[2] / "data" / "reference.db"
    return path if path.is_file() else None


def _recover_hint(path: Path) -> str:
    quoted = shlex.quote(str(path))
    rescued = shlex.quote(f"{Path(path).with_suffix('')}-recovered.db")
    return (
        f"see what is damaged with: sparsity-explorer store check {quoted}; copy every "
        f"readable row to a new file with: sparsity-explorer store recover {quoted} {rescued}; "
        "or pass a new path"
    )


def damaged(path: Path, problem: str) -> StoreError:
    """The error for a results database that SQLite finds damaged; it names the way out.

    Parameters
    ----------
    path : pathlib.Path
        The database file.
    problem : str
        What SQLite reported; shortened to 300 characters.

    Returns
    -------
    StoreError

    Examples
    --------
    >>> str(damaged(Path("r.db"), "page 7 is never used")).split(";")[0]
    'results database r.db is damaged (page 7 is never used) and was left untouched'
    """
    problem = " ".join(problem.split())
    if len(problem) > 300:
        problem = problem[:297] + "..."
    return StoreError(
        f"results database {path} is damaged ({problem}) and was left untouched; "
        f"{_recover_hint(path)}"
    )


def explain(exc: sqlite3.Error, path: Path, timeout: float) -> StoreError:
    """Turn an SQLite error into a :class:`StoreError` naming ``path`` and what to do.

    Parameters
    ----------
    exc : sqlite3.Error
        The error SQLite raised.
    path : pathlib.Path
        The database file.
    timeout : float
        The lock timeout in seconds, named when the database was locked.

    Returns
    -------
    StoreError
    """
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
    elif "malformed" in low or "corrupt" in low:
        hint = f"it is damaged and was not written to; {_recover_hint(path)}"
    elif "not a database" in low:
        hint = (
            "it is corrupt or not an SQLite database; pass a new path, or move the file aside "
            f"(mv '{path}' '{path}.bak') and run again"
        )
    else:
        hint = "pass a new path, or move the file aside and run again"
    return StoreError(f"results database {path}: {text} ({hint})")
