"""The report, store and sweep verbs never write over devices, FIFOs, stores or user files."""

from __future__ import annotations

import contextlib
import io
import os
import stat
from pathlib import Path

import pytest

from explorer import cli
from explorer.results.store import ResultStore, reference_path
from explorer.results.store.repair import recover_store
from explorer.sweeps import cells


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def make_store(path, rows=2):
    with ResultStore(path) as store:
        for i in range(rows):
            store.record("prune", {"model": "m", "i": i}, {"accuracy": 0.5})
    return path


def fake_cell(config, cancel=None):
    kind = {"speed": "layer-speed"}.get(config["cell"], config["cell"])
    return [{"kind": kind, "config": config, "metrics": {"accuracy": 0.5}}]


def test_main_example_writes_into_a_temporary_folder():
    assert "/dev/null" not in cli.main.__doc__
    assert "mkdtemp" in cli.main.__doc__


def test_report_refuses_a_fifo_and_a_user_file_without_force(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for extra in ([], ["--force"]):
        code, _, err = run(["report", "--db", ":memory:", "--out", fifo, *extra])
        assert code == 2 and "FIFO" in err and err.count("\n") == 1
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    mine = tmp_path / "report.html"
    mine.write_text("my own page")
    code, _, err = run(["report", "--db", ":memory:", "--out", mine])
    assert code == 2 and "it exists; pass --force" in err
    assert mine.read_text() == "my own page"
    code, _, err = run(["report", "--db", ":memory:", "--out", mine, "--force"])
    assert code == 0, err
    assert mine.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "report.html"]


def test_report_never_replaces_a_store_even_forced(tmp_path):
    db = make_store(tmp_path / "results.db")
    other = make_store(tmp_path / "other.db", rows=1)
    before = other.read_bytes()
    code, _, err = run(["report", "--db", db, "--no-reference", "--out", other, "--force"])
    assert code == 2 and "SQLite database" in err
    assert other.read_bytes() == before


def test_store_recover_refuses_memory_and_devices(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = make_store(tmp_path / "good.db")
    code, _, err = run(["store", "recover", db, ":memory:"])
    assert code == 2 and ":memory:" in err
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = run(["store", "recover", db, fifo])
    assert code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.db", "pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    dangling = tmp_path / "link.db"
    dangling.symlink_to(tmp_path / "elsewhere.db")
    code, _, err = run(["store", "recover", db, dangling])
    assert code == 2 and not (tmp_path / "elsewhere.db").exists()
    assert recover_store(db, tmp_path / "new.db").rows == 2


def test_sweep_refuses_a_fifo_and_leaves_no_journal(tmp_path, monkeypatch):
    monkeypatch.setattr(cells, "run_cell", fake_cell)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = run(["sweep", "--db", fifo, "--no-progress"])
    assert code == 2 and "not a regular file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_refused_sweep_creates_no_database(tmp_path, monkeypatch):
    monkeypatch.setattr(cells, "run_cell", fake_cell)
    for bad in (["--methods", "bogus"], ["--patterns", "9:3"]):
        code, _, err = run(["sweep", "--db", tmp_path / "new.db", "--no-progress", *bad])
        assert code == 2, err
        assert list(tmp_path.iterdir()) == []
    # an existing store is kept as it is when a sweep over it is refused
    db = make_store(tmp_path / "kept.db")
    code, _, _ = run(["sweep", "--db", db, "--no-progress", "--methods", "bogus"])
    assert code == 2
    with ResultStore(db, readonly=True) as kept:
        assert len(kept) == 2
    code, _, err = run(["sweep", "--db", tmp_path / "ok.db", "--no-progress"])
    assert code == 0, err
    assert (tmp_path / "ok.db").is_file()


def test_shipped_reference_is_opened_without_writing_beside_it():
    ref_path = reference_path()
    if ref_path is None:
        pytest.skip("no reference database is shipped here")
    folder = ref_path.parent
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    with ResultStore.reference() as ref:
        assert len(ref.query()) >= 0
    with ResultStore(":memory:") as store:
        store.attach_reference()
        store.query()
    after = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert after == before, sorted(set(after) - set(before))


def test_snapshot_refuses_devices_and_existing_files(tmp_path):
    db = make_store(tmp_path / "a.db")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with ResultStore(db) as store:
        with pytest.raises(ValueError, match="exists already"):
            store.snapshot(fifo)
        with pytest.raises(ValueError, match="expected a file path"):
            store.snapshot(":memory:")
        out = store.snapshot(tmp_path / "snap.db")
    with ResultStore(out, readonly=True) as snap:
        assert len(snap) == 2
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["a.db", "pipe", "snap.db"]


@pytest.fixture
def char_device(tmp_path):
    """A character device node with /dev/null's numbers, inside tmp_path (needs root)."""
    node = tmp_path / "null-twin"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return node


def test_no_verb_writes_over_or_beside_a_device_node(tmp_path, char_device, monkeypatch):
    monkeypatch.setattr(cells, "run_cell", fake_cell)
    db = make_store(tmp_path / "good.db")
    for argv in (
        ["report", "--db", ":memory:", "--out", char_device, "--force"],
        ["report", "--db", db, "--no-reference", "--csv", char_device, "--force"],
        ["sweep", "--db", char_device, "--no-progress"],
        ["store", "recover", db, char_device],
    ):
        code, _, err = run(argv)
        assert code == 2, (argv, err)
        assert stat.S_ISCHR(os.lstat(char_device).st_mode), argv
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("good.db-"))
    assert left == ["good.db", "null-twin"]  # no "null-twin-journal", no partial file
