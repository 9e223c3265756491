"""Writing result files safely: never over a results store, never half a file.

Every export (CSV, JSON, the HTML report) goes through :func:`check_output`, which applies the
output-path rule of :mod:`explorer.output_paths` (never a device, folder, SQLite database or
side file; an existing file only when forced) and also refuses the stores being read, and
:func:`atomic_output`, which writes a temporary file beside the target and renames it over
the target in one step, so a crash or a kill leaves either the old file or the whole new one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from explorer.errors import OutputPathError
from explorer.output_paths import check_output_path, replacing
from explorer.results.store.location import StoreError

__all__ = ["OutputRefused", "atomic_output", "check_output"]

_SIDE_FILES = ("", "-wal", "-shm", "-journal")


class OutputRefused(StoreError, OutputPathError):
    """An export or report path refused by the output-path rule (both error types)."""


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
        Replace an existing regular file (never a database, its side files, a device or a
        folder, forced or not).
    what : str, optional
        What is being written, for the message (``"CSV export"``, ``"report"``).

    Raises
    ------
    OutputRefused
        A :class:`StoreError` and an :class:`~explorer.errors.OutputPathError`: ``path`` is a
        protected store, breaks the rule of :func:`explorer.output_paths.check_output_path`,
        or (without ``force``) exists.

    Examples
    --------
    >>> check_output("report.html").name
    'report.html'
    """
    path = Path(path).expanduser()
    for store in protect:
        if str(store) == ":memory:":
            continue
        store = Path(store).expanduser()
        for side in _SIDE_FILES:
            other = Path(f"{store}{side}")
            if path.resolve() == other.resolve() or _same(path, other):
                raise OutputRefused(
                    f"refusing to write the {what} to {path}: it is the results store being "
                    f"read{' (' + side[1:] + ' file)' if side else ''}, and writing there would "
                    "destroy its rows; pass another path (e.g. results.csv)"
                )
    try:
        check_output_path(path, overwrite=force, what=what, flag="--force (force=True)")
    except OutputPathError as exc:
        raise OutputRefused(str(exc)) from None
    return path


@contextlib.contextmanager
def atomic_output(
    path: str | Path, binary: bool = False, *, overwrite: bool = True, what: str = "export"
) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one rename.

    Parameters
    ----------
    path : str or Path
        The file to write (checked with :func:`check_output` first by callers).
    binary : bool, optional
        Open in binary mode instead of UTF-8 text with ``newline=""``.
    overwrite : bool, optional
        Replace an existing regular file (callers decide with :func:`check_output` first);
        a device, folder, database or side file is refused whatever this says.
    what : str, optional
        What is written, for the message.

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
    kwargs = {} if binary else {"encoding": "utf-8", "newline": ""}
    try:
        with replacing(path, overwrite=overwrite, what=what) as tmp:
            with open(tmp, "wb" if binary else "w", **kwargs) as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
    except OutputPathError as exc:
        if isinstance(exc, StoreError):
            raise
        raise OutputRefused(str(exc)) from None
