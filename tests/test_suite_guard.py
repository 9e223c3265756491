"""The session guard of the root conftest.py notices a changed device, listing or package file."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def _guard():
    spec = importlib.util.spec_from_file_location("root_conftest_guard", ROOT_CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fingerprint_tells_a_device_from_a_regular_file(tmp_path):
    guard = _guard()
    null = guard._fingerprint("/dev/null")
    assert null[0].startswith("c")  # a character device, looked at without being opened
    plain = tmp_path / "null"
    plain.write_text("")
    assert guard._fingerprint(plain)[0].startswith("-") and guard._fingerprint(plain) != null
    assert guard._fingerprint(tmp_path / "missing") is None


def test_changes_names_created_changed_and_removed_files(tmp_path):
    guard = _guard()
    kept, edited = tmp_path / "kept.txt", tmp_path / "edited.txt"
    kept.write_text("a")
    edited.write_text("b")
    before = {str(p): guard._fingerprint(p) for p in (kept, edited)}
    before["listing"] = guard._listing(tmp_path)
    edited.write_text("changed")
    os.utime(edited, ns=(time.time_ns(), time.time_ns() + 10**9))
    (tmp_path / "reference.db-wal").write_bytes(b"")
    after = {str(p): guard._fingerprint(p) for p in (kept, edited)}
    after["listing"] = guard._listing(tmp_path)
    changes = guard._changes(before, after)
    assert len(changes) == 2
    assert any(c.startswith(str(edited)) for c in changes)
    assert any("reference.db-wal" in c for c in changes)


def test_snapshot_covers_the_package():
    guard = _guard()
    snap = guard._snapshot(ROOT_CONFTEST.parent)
    assert "/dev/null" in snap and "/dev/zero" in snap
    assert any(key.endswith(os.path.join("explorer", "cli.py")) for key in snap)
    assert any(key.startswith("listing of") for key in snap)
