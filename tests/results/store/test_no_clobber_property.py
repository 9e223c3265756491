"""Property: no sequence of writing verbs changes a file that existed before without --force.

A folder holds a results store, a checkpoint, an ONNX file (when the exporter is installed),
plain user files and a FIFO. Random sequences of ``save``, ``export``, ``report``, ``store
recover`` and ``sweep`` aimed at them (with and without ``--force``) must leave every file that
existed before as it was, except the one target a ``--force`` names when it is a plain file (and
a store that a sweep adds rows to); a database is never replaced, the FIFO stays a FIFO, and no
temporary ``.part`` file is left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from explorer import cli
from explorer.output_paths import is_sqlite_file
from explorer.results.store import ResultStore
from explorer.sweeps import cells

pytest.importorskip("safetensors", reason="checkpoints need safetensors (the deploy extra)")
pytest.importorskip("sklearn", reason="digits-mlp needs scikit-learn (the models extra)")
HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript"))

STORE, CKPT, ONNX = "store.db", "model.safetensors", "model.onnx"
TARGETS = (
    STORE,
    f"{STORE}-wal",
    CKPT,
    ONNX,
    "notes.txt",
    "train.py",
    "pipe",
    "folder",
    "new.out",
)
forced = st.booleans()
commands = st.one_of(
    st.tuples(st.just("save"), st.sampled_from(TARGETS), forced),
    st.tuples(st.just("export"), st.sampled_from(TARGETS), forced),
    st.tuples(
        st.just("report"), st.sampled_from(("--out", "--csv", "--json")), st.sampled_from(TARGETS)
    ).map(lambda c: (*c, False)),
    st.tuples(st.just("report-force"), st.sampled_from(TARGETS), st.just(True)),
    st.tuples(st.just("recover"), st.sampled_from(TARGETS), st.just(False)),
    st.tuples(st.just("sweep"), st.sampled_from(TARGETS), st.just(False)),
)


def _fake_cell(config, cancel=None):
    kind = {"speed": "layer-speed"}.get(config["cell"], config["cell"])
    return [{"kind": kind, "config": config, "metrics": {"accuracy": 0.5}}]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """The folder's files, made once: a store, a checkpoint, an ONNX file, user files."""
    folder = tmp_path_factory.mktemp("template")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.mktemp("cache")))
        with ResultStore(folder / STORE) as store:
            store.record("prune", {"model": "m"}, {"accuracy": 0.5})
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            code = cli.main(["save", "digits-mlp", "--out", str(folder / CKPT), "--no-progress"])
            assert code == 0, sink.getvalue()
            if HAS_ONNX:
                code = cli.main(["export", str(folder / CKPT), "--onnx", str(folder / ONNX)])
                assert code == 0, sink.getvalue()
        (folder / "notes.txt").write_text("my notes\n")
        (folder / "train.py").write_text("print('train')\n")
        yield folder, mp


def _state(folder: Path) -> dict[str, tuple]:
    found = {}
    for path in sorted(folder.rglob("*")):
        st_ = os.lstat(path)
        entry: tuple = (stat.S_IFMT(st_.st_mode),)
        if stat.S_ISREG(st_.st_mode):
            entry += (hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(st_.st_mode))
        found[str(path.relative_to(folder))] = entry
    return found


def _argv(command: tuple, folder: Path) -> list[str]:
    verb, target, force = command[0], command[-2], command[-1]
    path = str(folder / target)
    extra = ["--force"] if force else []
    if verb == "save":
        return ["save", "digits-mlp", "--out", path, "--no-progress", *extra]
    if verb == "export":
        return ["export", str(folder / CKPT), "--onnx", path, *extra]
    if verb == "report":
        flag = command[1]
        argv = ["report", "--db", str(folder / STORE), "--no-reference"]
        if flag != "--out":
            argv += ["--out", str(folder / "report.html")]
        return [*argv, flag, path]
    if verb == "report-force":
        return ["report", "--db", str(folder / STORE), "--no-reference", "--out", path, *extra]
    if verb == "recover":
        return ["store", "recover", str(folder / STORE), path]
    return ["sweep", "--db", path, "--no-progress", "--patterns", "2:4"]


def _rows(path: Path) -> set[int]:
    with ResultStore(path, readonly=True) as store:
        return {r.id for r in store.query(include_reference=False)}


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(commands, min_size=1, max_size=4))
@example(sequence=[("recover", "new.out", False), ("sweep", "new.out", False)])
def test_no_verb_changes_an_existing_file_without_force(template, sequence):
    source, _cache_env = template
    if not HAS_ONNX:
        sequence = [c for c in sequence if c[0] != "export"]
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as local:
        local.setattr(cells, "run_cell", _fake_cell)
        folder = Path(tmp) / "work"
        shutil.copytree(source, folder)
        os.mkfifo(folder / "pipe")
        (folder / "folder").mkdir()
        for command in sequence:
            before = _state(folder)
            store_rows = _rows(folder / STORE)
            target_path = folder / command[-2]
            before_rows = (
                _rows(target_path)
                if target_path.is_file() and is_sqlite_file(target_path)
                else set()
            )
            sink = io.StringIO()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                code = cli.main(_argv(command, folder))
            assert code in (0, 1, 2), sink.getvalue()
            after = _state(folder)
            target, force = command[-2], command[-1]
            for name, entry in before.items():
                if name == target and force and entry[0] == stat.S_IFREG:
                    if is_sqlite_file(folder / name) or name.startswith(STORE):
                        assert after.get(name) == entry, (command, name)  # stores: never
                    continue  # a forced plain file may be replaced
                if command[0] == "sweep" and name == target and is_sqlite_file(folder / name):
                    # a sweep adds rows to the store it names (the shipped one, or one that a
                    # `store recover` made earlier in the sequence); it never removes any
                    assert before_rows <= _rows(folder / name), command
                    continue
                if name.startswith(f"{STORE}-"):
                    continue  # SQLite's own side files come and go with the store
                assert after.get(name) == entry, (command, name, sink.getvalue())
            assert store_rows <= _rows(folder / STORE)
            assert stat.S_ISFIFO(os.lstat(folder / "pipe").st_mode)
            partial = [n for n in after if ".part" in n or n.endswith((".tmp", "pipe-journal"))]
            assert partial == [], (command, partial)
