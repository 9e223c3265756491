"""The output-path rule: what may be replaced, what never is, and the temporary file's fate."""

from __future__ import annotations

import os
import socket
import sqlite3
import stat

import pytest

from explorer.errors import OutputPathError
from explorer.output_paths import (
    check_output_path,
    is_sqlite_file,
    new_file_mode,
    replacing,
    replacing_folder,
)
from explorer.results.store import StoreError
from explorer.results.store.files import atomic_output, check_output


def make_db(path):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    return path


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".part" in p.name)


@pytest.fixture
def umask():
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def device_node(folder):
    """A character device inside ``folder`` (the null device's numbers), or None where this
    user may not make one: the tests never point a write check at ``/dev/null`` itself, so a
    check that wrongly wrote would replace only this node."""
    node = folder / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        return None
    return node


def test_device_node_is_refused_without_being_opened(tmp_path):
    node = device_node(tmp_path)
    if node is None:
        pytest.skip("cannot make a device node here (root can)")
    for overwrite in (False, True):
        with pytest.raises(OutputPathError, match="character device"):
            check_output_path(node, overwrite=overwrite)
        with pytest.raises(StoreError, match="character device"):
            check_output(node, force=overwrite)
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_fifo_is_refused_by_every_entry_point(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="FIFO"):
        check_output_path(fifo, overwrite=True)
    with pytest.raises(StoreError, match="FIFO"):
        check_output(fifo, force=True)
    with pytest.raises(StoreError, match="FIFO"), atomic_output(fifo) as handle:
        handle.write("never")
    with pytest.raises(OutputPathError, match="FIFO"), replacing(fifo, overwrite=True) as tmp:
        tmp.write_text("never")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert leftovers(tmp_path) == []


def test_socket_and_folder_are_refused(tmp_path):
    sock_path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(sock_path))
        with pytest.raises(OutputPathError, match="socket"):
            check_output_path(sock_path, overwrite=True)
    finally:
        server.close()
    with pytest.raises(OutputPathError, match="folder"):
        check_output_path(tmp_path, overwrite=True)


def test_sqlite_database_is_found_by_content_and_never_replaced(tmp_path):
    db = make_db(tmp_path / "notes.txt")  # a store under a harmless-looking name
    assert is_sqlite_file(db)
    before = db.read_bytes()
    for overwrite in (False, True):
        with pytest.raises(OutputPathError, match=r"SQLite database.*even --force"):
            check_output_path(db, overwrite=overwrite)
        with (
            pytest.raises(OutputPathError, match="SQLite"),
            replacing(db, overwrite=overwrite) as tmp,
        ):
            tmp.write_text("x")
    assert db.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_side_files_of_a_database_are_never_written(tmp_path):
    db = make_db(tmp_path / "results.db")
    for side in ("-wal", "-shm", "-journal"):
        target = tmp_path / f"results.db{side}"
        with pytest.raises(OutputPathError, match=f"{side[1:]} file of the database"):
            check_output_path(target, overwrite=True)  # missing: SQLite would write it
        target.write_bytes(b"side data")
        with pytest.raises(OutputPathError, match="side file"):
            check_output_path(target, overwrite=True)
        assert target.read_bytes() == b"side data"
        target.unlink()
    # a "-wal" name beside a file that is not a database is an ordinary name
    (tmp_path / "plain.db").write_text("not sqlite")
    assert check_output_path(tmp_path / "plain.db-wal").name == "plain.db-wal"
    assert db.exists()


def test_wal_and_journal_are_found_by_their_headers(tmp_path):
    wal = tmp_path / "moved-aside"
    wal.write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    journal = tmp_path / "copy"
    journal.write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + bytes(20))
    for path in (wal, journal):
        with pytest.raises(OutputPathError, match="side file"):
            check_output_path(path, overwrite=True)


def test_existing_file_needs_overwrite_and_keeps_its_mode(tmp_path):
    thesis = tmp_path / "thesis.tex"
    thesis.write_text("chapter 1")
    os.chmod(thesis, 0o640)
    with (
        pytest.raises(OutputPathError, match="it exists; pass --force"),
        replacing(thesis) as tmp,
    ):
        tmp.write_text("clobbered")
    assert thesis.read_text() == "chapter 1"
    with replacing(thesis, overwrite=True) as tmp:
        tmp.write_text("chapter 2")
    assert thesis.read_text() == "chapter 2"
    assert stat.S_IMODE(thesis.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_new_files_follow_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    assert new_file_mode() == mode
    with replacing(tmp_path / "new.bin") as tmp:
        tmp.write_bytes(b"1")
    with atomic_output(tmp_path / "new.csv") as handle:
        handle.write("a\n")
    assert stat.S_IMODE((tmp_path / "new.bin").stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "new.csv").stat().st_mode) == mode


def test_symlink_is_refused_unless_forced_then_its_target_is_replaced(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with pytest.raises(OutputPathError, match="symbolic link"):
        check_output_path(link)
    with replacing(link, overwrite=True) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and real.read_text() == "new"
    # forced, a link still never leads to a device or a database
    node = device_node(tmp_path)
    if node is not None:
        to_null = tmp_path / "null-link"
        to_null.symlink_to(node)
        with pytest.raises(OutputPathError, match="character device"):
            check_output_path(to_null, overwrite=True)
        assert stat.S_ISCHR(os.lstat(node).st_mode)
    db = make_db(tmp_path / "r.db")
    to_db = tmp_path / "db-link"
    to_db.symlink_to(db)
    with pytest.raises(OutputPathError, match="SQLite"):
        check_output_path(to_db, overwrite=True)


def test_sqlite_names_and_missing_folders_are_refused(tmp_path):
    for name in (":memory:", "file:x.db?mode=memory", ""):
        with pytest.raises(OutputPathError, match="expected a file path"):
            check_output_path(name)
    with pytest.raises(OutputPathError, match="does not exist"):
        check_output_path(tmp_path / "missing" / "x.bin")


def test_a_failed_write_leaves_the_old_file_and_no_partial(tmp_path):
    target = tmp_path / "kept.txt"
    target.write_text("kept")
    with pytest.raises(RuntimeError), replacing(target, overwrite=True) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "kept"
    assert leftovers(tmp_path) == []


def test_replacing_folder_checks_every_file_before_the_first_rename(tmp_path):
    new = tmp_path / "export"
    with replacing_folder(new) as tmp:
        (tmp / "a.json").write_text("{}")
    assert sorted(os.listdir(new)) == ["a.json"]
    (new / "b.bin").write_text("user data")
    with pytest.raises(OutputPathError, match="it exists"), replacing_folder(new) as tmp:
        (tmp / "a.json").write_text('{"new": 1}')
        (tmp / "b.bin").write_text("clobbered")
    assert (new / "a.json").read_text() == "{}" and (new / "b.bin").read_text() == "user data"
    with replacing_folder(new, overwrite=True) as tmp:
        (tmp / "b.bin").write_text("replaced")
    assert (new / "b.bin").read_text() == "replaced"
    assert leftovers(new) == [] and leftovers(tmp_path) == []
    fifo = tmp_path / "fifo-folder"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="not a folder"), replacing_folder(fifo) as tmp:
        pass
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
