r"""The one rule for where the explorer may write a file, and the atomic rename that follows it.

Every writer (the report and its exports, ``save``, ``export``, :func:`explorer.save_sparse`,
:func:`explorer.export_onnx`, :func:`explorer.export_pretrained`, ``store recover``) writes
into a temporary file beside the target and renames it into place only when:

1. the target is missing, or it is a regular file and the caller allowed it to be replaced
   (``--force`` on the command line, ``overwrite=True`` / ``force=True`` in Python);
2. the target is never a device node, FIFO, socket or folder, forced or not;
3. the target is never an SQLite database or one of its ``-wal``/``-shm``/``-journal`` side
   files, forced or not: a database is recognised by its content (the 16-byte header
   ``SQLite format 3\0``), a side file by the database beside it (or a WAL/journal header);
4. a symbolic link is refused unless forced; when forced, the rule is applied to the file the
   link points at, and that file is replaced (the link itself stays as it is).

New files get the mode ``0o666 & ~umask``; a replaced file keeps its mode. A refusal raises
:class:`~explorer.errors.OutputPathError`, one line naming the path, why, and the fix.

Examples
--------
>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> target = os.path.join(folder, "notes.txt")
>>> with replacing(target) as tmp:
...     _ = tmp.write_text("first")
>>> with replacing(target) as tmp:  # doctest: +ELLIPSIS
...     _ = tmp.write_text("second")
Traceback (most recent call last):
...
explorer.errors.OutputPathError: refusing to write the file ...notes.txt: it exists; pass --force (overwrite=True) to replace it, or another path
>>> open(target).read()
'first'
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from explorer.errors import OutputPathError

__all__ = [
    "FORCE_HINT",
    "SQLITE_HEADER",
    "check_output_path",
    "current_umask",
    "is_sqlite_file",
    "new_file_mode",
    "replacing",
    "replacing_folder",
]

#: The first 16 bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: How the user allows a file to be replaced, named in refusals.
FORCE_HINT = "--force (overwrite=True)"
SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
_WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
_JOURNAL_MAGIC = b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7"
_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _head(path: Path, size: int) -> bytes:
    # Only regular files are opened: opening a FIFO blocks, a device may have side effects.
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return b""
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def is_sqlite_file(path: str | os.PathLike) -> bool:
    """True when ``path`` is a regular file that starts with SQLite's 16-byte header.

    Parameters
    ----------
    path : str or path-like
        The file to look at (False when it is missing or unreadable).

    Returns
    -------
    bool

    Examples
    --------
    >>> is_sqlite_file("/no/such/file")
    False
    """
    return _head(Path(path), len(SQLITE_HEADER)) == SQLITE_HEADER


def _side_file_of(path: Path) -> tuple[str, Path] | None:
    """``(kind, database)`` when ``path`` is (or would be) an SQLite side file, else None."""
    for suffix in SIDE_SUFFIXES:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            base = path.with_name(path.name[: -len(suffix)])
            if is_sqlite_file(base):
                return suffix[1:], base
    head = _head(path, 8)
    if head[:4] in _WAL_MAGIC:
        return "wal", Path(str(path).removesuffix("-wal"))
    if head == _JOURNAL_MAGIC:
        return "journal", Path(str(path).removesuffix("-journal"))
    return None


def new_file_mode(existing: str | os.PathLike | None = None) -> int:
    """The mode a written file gets: the replaced file's, else ``0o666 & ~umask``.

    Parameters
    ----------
    existing : str or path-like, optional
        The file being replaced; its permission bits are kept when it is a regular file.

    Returns
    -------
    int
        Permission bits for :func:`os.chmod`.

    Examples
    --------
    >>> new_file_mode() & 0o111
    0
    """
    if existing is not None:
        with contextlib.suppress(OSError):
            st = os.stat(existing)
            if stat.S_ISREG(st.st_mode):
                return stat.S_IMODE(st.st_mode)
    return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux).

    Examples
    --------
    >>> 0 <= current_umask() <= 0o777
    True
    """
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o22)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


def check_output_path(
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    what: str = "file",
    flag: str = FORCE_HINT,
) -> Path:
    """Refuse an output path the rule forbids; return the path to rename onto.

    Nothing is opened for writing: a device or FIFO is recognised from its ``lstat``.

    Parameters
    ----------
    path : str or path-like
        Where the file is to be written.
    overwrite : bool, optional
        Allow replacing an existing regular file (never a database, device or folder), and
        writing through a symbolic link to the file it points at.
    what : str, optional
        What is written, for the message (``"report"``, ``"checkpoint"``).
    flag : str, optional
        How the user allows a replacement, for the message.

    Returns
    -------
    Path
        ``path``, or where a forced symbolic link points.

    Raises
    ------
    OutputPathError
        The rule forbids writing there; the message says why and what to do.

    Examples
    --------
    >>> import tempfile
    >>> check_output_path(tempfile.mkdtemp(), overwrite=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.errors.OutputPathError: refusing to write the file ...: it is a folder; pass a file path inside it
    """
    text = os.fspath(path)
    if not str(text).strip() or str(text) == ":memory:" or str(text).startswith("file:"):
        raise OutputPathError(
            f"refusing to write the {what} to {str(text)!r}: expected a file path "
            "(':memory:' and 'file:' URIs are SQLite names, not files); pass a path such as "
            "out/result.bin"
        )
    path = Path(text).expanduser()

    def refuse(why: str, fix: str) -> OutputPathError:
        return OutputPathError(f"refusing to write the {what} {path}: {why}; {fix}")

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise refuse(f"it cannot be inspected ({exc.strerror})", "pass another path") from exc
    if st is not None and stat.S_ISLNK(st.st_mode):
        real = Path(os.path.realpath(path))
        if not overwrite:
            raise refuse(
                f"it is a symbolic link to {real}, which would be replaced",
                f"pass the real path, or {flag} to replace the file it points at",
            )
        return check_output_path(real, overwrite=True, what=what, flag=flag)
    if st is None:
        if not path.parent.is_dir():
            raise refuse(
                f"the folder {path.parent} does not exist", "create it or pass another path"
            )
        side = _side_file_of(path)
        if side is not None:
            raise refuse(
                f"SQLite keeps the {side[0]} file of the database {side[1]} there and would "
                "overwrite it (or lose the database's last writes)",
                "pass another path",
            )
        return path
    if stat.S_ISDIR(st.st_mode):
        raise refuse("it is a folder", "pass a file path inside it")
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise refuse(
                f"it is {kind}, not a regular file, and is never replaced", "pass a file path"
            )
    if is_sqlite_file(path):
        raise refuse(
            f"it is an SQLite database (a results store?) and would be destroyed; even {flag} "
            "does not replace a database with another file",
            "pass another path, or move the database aside first",
        )
    side = _side_file_of(path)
    if side is not None:
        raise refuse(
            f"it is the {side[0]} side file of the SQLite database {side[1]}, which holds "
            "writes the database needs; it is never replaced",
            "pass another path",
        )
    if not overwrite:
        raise refuse("it exists", f"pass {flag} to replace it, or another path")
    return path


def _commit(tmp: Path, target: Path, *, overwrite: bool, what: str, flag: str) -> Path:
    # The rule is checked again at the rename: the target may have changed meanwhile.
    target = check_output_path(target, overwrite=overwrite, what=what, flag=flag)
    os.chmod(tmp, new_file_mode(target if target.exists() else None))
    os.replace(tmp, target)
    return target


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    what: str = "file",
    flag: str = FORCE_HINT,
) -> Iterator[Path]:
    """Yield an empty temporary file beside ``path``; on success it is renamed onto ``path``.

    For writers that take a file name (safetensors, ``torch.save``, SQLite): write the
    temporary path, and it replaces ``path`` in one rename when the block ends, after the rule
    (:func:`check_output_path`) is checked before and again at the rename. If the block
    raises, the temporary file is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : str or path-like
        The target.
    overwrite, what, flag
        As for :func:`check_output_path`.

    Yields
    ------
    Path
        The temporary file (``.NAME.XXXX.part`` in the target's folder).

    Examples
    --------
    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "model.bin")
    >>> with replacing(target) as tmp:
    ...     _ = tmp.write_bytes(b"weights")
    >>> open(target, "rb").read()
    b'weights'
    """
    target = check_output_path(path, overwrite=overwrite, what=what, flag=flag)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _commit(tmp, target, overwrite=overwrite, what=what, flag=flag)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def replacing_folder(
    folder: str | os.PathLike,
    *,
    overwrite: bool = False,
    what: str = "folder",
    flag: str = FORCE_HINT,
) -> Iterator[Path]:
    """Yield an empty temporary folder; on success its files are moved into ``folder``.

    For writers that make several files (``save_pretrained``, an ONNX file with its external
    data): a new ``folder`` is the temporary folder renamed; into an existing one each file is
    renamed by the rule of :func:`check_output_path` (an existing file needs ``overwrite``),
    all of them checked before the first rename.

    Parameters
    ----------
    folder : str or path-like
        The folder to write; its parent must exist. A symbolic link is refused unless
        ``overwrite``, which writes into the folder it points at.
    overwrite : bool
        Allow files of the same names in an existing folder to be replaced.
    what : str
        What is written, for error messages.
    flag : str
        How the caller allows replacing, for error messages (e.g. ``--force``).

    Yields
    ------
    Path
        The temporary folder to write into.

    Raises
    ------
    OutputPathError
        A target the rule refuses.

    Examples
    --------
    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "export")
    >>> with replacing_folder(target) as tmp:
    ...     _ = (tmp / "config.json").write_text("{}")
    >>> sorted(os.listdir(target))
    ['config.json']
    """
    folder = Path(folder).expanduser()
    if folder.is_symlink():
        if not overwrite:
            raise OutputPathError(
                f"refusing to write the {what} {folder}: it is a symbolic link to "
                f"{os.path.realpath(folder)}; pass the real path, or {flag} to write into the "
                "folder it points at"
            )
        folder = Path(os.path.realpath(folder))
    exists = os.path.lexists(folder)
    if exists and not folder.is_dir():
        raise OutputPathError(
            f"refusing to write the {what} {folder}: it exists and is not a folder; pass a "
            "folder path"
        )
    if not exists and not folder.parent.is_dir():
        raise OutputPathError(
            f"refusing to write the {what} {folder}: the folder {folder.parent} does not exist; "
            "create it or pass another path"
        )
    tmp = Path(
        tempfile.mkdtemp(
            prefix=f".{folder.name}.", suffix=".part", dir=folder if exists else folder.parent
        )
    )
    try:
        yield tmp
        names = sorted(os.listdir(tmp))
        if not folder.exists():
            os.chmod(tmp, 0o777 & ~current_umask())
            for name in names:
                os.chmod(tmp / name, new_file_mode())
            os.rename(tmp, folder)
        else:
            for name in names:
                if (tmp / name).is_dir() and not (tmp / name).is_symlink():
                    raise OutputPathError(
                        f"refusing to write the {what} {folder}: the writer made a sub-folder "
                        f"{name}, which is not merged into an existing folder; pass a new folder"
                    )
                check_output_path(folder / name, overwrite=overwrite, what=what, flag=flag)
            for name in names:
                _commit(tmp / name, folder / name, overwrite=overwrite, what=what, flag=flag)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
