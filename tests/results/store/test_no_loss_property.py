"""Property: no sequence of CLI commands over stores and their exports loses a committed row."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer import cli
from explorer.results.store import ResultStore
from explorer.sweeps import cells

STORES = ("main.db", "other.db")
TARGETS = ("main.db", "other.db", "main.db-wal", "rows.csv", "rows.json", "r.html", "new.db")

commands = st.one_of(
    st.tuples(st.just("record"), st.sampled_from(STORES)),
    st.tuples(
        st.just("report"),
        st.sampled_from(STORES),
        st.sampled_from(("--out", "--csv", "--json")),
        st.sampled_from(TARGETS),
    ),
    st.tuples(st.just("sweep"), st.sampled_from(TARGETS)),
    st.tuples(st.just("check"), st.sampled_from(TARGETS)),
    st.tuples(st.just("recover"), st.sampled_from(STORES), st.sampled_from(TARGETS)),
)


def _fake_cell(config, cancel=None):
    kind = {"speed": "layer-speed"}.get(config["cell"], config["cell"])
    return [{"kind": kind, "config": config, "metrics": {"accuracy": 0.5}}]


def _rows(path: Path) -> dict[int, tuple]:
    with ResultStore(path, readonly=True, source="local") as store:
        return {r.id: (r.kind, r.config, r.metrics) for r in store.query()}


def _argv(command: tuple, folder: Path) -> list[str]:
    verb, *rest = command
    if verb == "report":
        db, flag, target = rest
        argv = ["report", "--db", str(folder / db), "--no-reference"]
        if flag != "--out":
            argv += ["--out", str(folder / "report.html")]
        return [*argv, flag, str(folder / target)]
    if verb == "sweep":
        return ["sweep", "--db", str(folder / rest[0]), "--no-progress", "--patterns", "2:4"]
    if verb == "check":
        return ["store", "check", str(folder / rest[0])]
    return ["store", "recover", str(folder / rest[0]), str(folder / rest[1])]


@settings(max_examples=20, deadline=None)
@given(st.lists(commands, min_size=1, max_size=6))
def test_no_command_sequence_loses_a_committed_row(sequence):
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(cells, "run_cell", _fake_cell)
        folder = Path(tmp)
        committed: dict[str, dict[int, tuple]] = {}
        for name in STORES:
            with ResultStore(folder / name) as store:
                store.record("dense", {"model": name}, {"accuracy": 1.0})
            committed[name] = _rows(folder / name)
        for command in sequence:
            code = None
            if command[0] == "record":
                with ResultStore(folder / command[1]) as store:
                    store.record("prune", {"model": command[1]}, {"accuracy": 0.5})
            else:
                sink = io.StringIO()
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    code = cli.main(_argv(command, folder))
                assert code in (0, 1, 2), sink.getvalue()
            for name, rows in list(committed.items()):
                now = _rows(folder / name)
                assert rows.items() <= now.items(), (command, name)
                committed[name] = now  # rows added by a sweep or record are committed too
            if command[0] == "recover" and code == 0:
                target = command[2]
                assert target not in committed  # recover never replaces a file
                assert _rows(folder / target).items() <= committed[command[1]].items()
                committed[target] = _rows(folder / target)
            if command[0] == "sweep" and code == 0:
                committed.setdefault(command[1], _rows(folder / command[1]))
