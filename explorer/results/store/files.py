"""Writing result files safely: never over a results store, never half a file.

Every export (CSV, JSON, the HTML report) goes through :func:`check_output`, which refuses to
replace an SQLite file (a results store, most likely) or the store being read unless forced,
and :func:`atomic_output`, which writes a temporary file beside the target and renames it over
the target in one step, so a crash or a kill leaves either the old file or the whole new one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from explorer.results.store.location import StoreError

__all__ = ["SQLITE_HEADER", "atomic_output", "check_output", "is_sqlite_file"]

#: The first 16 bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def is_sqlite_file(path: str | Path) -> bool:
    """True when ``path`` is a file that starts with SQLite's header.

    Examples
    --------
    >>> is_sqlite_file("/no/such/file")
    False
    """
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(
    path: str | Path,
    *,
    protect: Iterable[str | Path] = (),
    force: bool = False,
    what: str = "export",
) -> Path:
    """Refuse an output path that would destroy a results store; return it as a Path.

    Parameters
    ----------
    path : str or Path
        Where the file is to be written.
    protect : iterable of path, optional
        Stores being read: neither they nor their ``-wal``/``-shm``/``-journal`` side files
        may be written over.
    force : bool, optional
        Write over an SQLite file or a protected store anyway.
    what : str, optional
        What is being written, for the message (``"CSV export"``, ``"report"``).

    Raises
    ------
    StoreError
        ``path`` is a folder, its folder is missing, or (without ``force``) it is a protected
        store or any SQLite file.

    Examples
    --------
    >>> check_output("report.html").name
    'report.html'
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise StoreError(f"cannot write the {what} to {path}: it is a folder; pass a file path")
    if not path.parent.is_dir():
        raise StoreError(
            f"cannot write the {what} to {path}: the folder {path.parent} does not exist; "
            "create it or pass another path"
        )
    if force:
        return path
    for store in protect:
        if str(store) == ":memory:":
            continue
        store = Path(store).expanduser()
        for side in _SIDE_FILES:
            other = Path(f"{store}{side}")
            if path.resolve() == other.resolve() or _same(path, other):
                raise StoreError(
                    f"refusing to write the {what} to {path}: it is the results store being "
                    f"read{' (' + side[1:] + ' file)' if side else ''}, and writing there would "
                    "destroy its rows; pass another path (e.g. results.csv), or --force "
                    "(force=True) to replace it"
                )
    for side in _SIDE_FILES[1:]:
        base = Path(str(path).removesuffix(side))
        if str(path).endswith(side) and is_sqlite_file(base):
            raise StoreError(
                f"refusing to write the {what} to {path}: SQLite keeps the {side[1:]} file of the "
                f"database {base} there and would overwrite it; pass another path, or --force "
                "(force=True)"
            )
    if is_sqlite_file(path):
        raise StoreError(
            f"refusing to write the {what} to {path}: it is an SQLite database (a results "
            "store?) and writing there would destroy it; pass another path, or --force "
            "(force=True) to replace it"
        )
    return path


def _new_file_mode(path: Path) -> int:
    if path.exists():
        return stat.S_IMODE(path.stat().st_mode)
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_output(path: str | Path, binary: bool = False) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one rename.

    Parameters
    ----------
    path : str or Path
        The file to write (checked with :func:`check_output` first by callers).
    binary : bool, optional
        Open in binary mode instead of UTF-8 text with ``newline=""``.

    Yields
    ------
    file object
        Write to it; if the block raises, ``path`` is left as it was and the temporary file
        is removed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
    >>> with atomic_output(target) as handle:
    ...     _ = handle.write("done")
    >>> target.read_text()
    'done'
    """
    path = Path(path).expanduser()
    mode = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        kwargs = {} if binary else {"encoding": "utf-8", "newline": ""}
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
