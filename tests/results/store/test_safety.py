"""Nothing a user types loses their results: exports, damaged stores, read-only reports."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3

import pytest

from explorer import cli
from explorer.results.html import write_report
from explorer.results.store import ResultStore, StoreError
from explorer.results.store.files import atomic_output
from explorer.results.store.repair import check_store, recover_store


def run(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def make_store(path, rows=150):
    with ResultStore(path) as store:
        for i in range(rows):
            store.record(
                "prune",
                {"model": "m", "method": "magnitude", "pattern": "2:4", "i": i, "pad": "x" * 200},
                {"metric": "accuracy", "accuracy": i / rows},
                sweep_id="s",
                cell_key=f"c{i}",
            )
    return path


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def damage(path, offset=20 * 1024, size=8 * 1024):
    data = bytearray(path.read_bytes())
    data[offset : offset + size] = bytes((i * 37 + 11) % 251 for i in range(size))
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("flag", ["--out", "--csv", "--json"])
def test_an_export_over_the_store_being_read_is_refused(flag, tmp_path, capsys):
    db = make_store(tmp_path / "a.db", rows=5)
    argv = ["report", "--db", str(db), "--out", str(tmp_path / "r.html"), flag, str(db)]
    if flag == "--out":
        argv = ["report", "--db", str(db), "--out", str(db)]
    code, out, err = run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and "refusing" in err and str(db) in err
    assert "wrote" not in out
    with ResultStore(db) as store:
        assert len(store) == 5


def test_export_csv_and_json_refuse_their_own_store_and_any_sqlite_file(tmp_path):
    db = make_store(tmp_path / "a.db", rows=3)
    other = make_store(tmp_path / "other.db", rows=2)
    with ResultStore(db) as store:
        for export in (store.export_csv, store.export_json):
            for target in (db, other, f"{db}-wal"):
                with pytest.raises(StoreError, match="refusing"):
                    export(target)
        store.export_csv(tmp_path / "rows.csv")
        with pytest.raises(StoreError, match="even --force"):
            store.export_json(other, force=True)  # forced, a database is still never replaced
        plain = tmp_path / "rows.json"
        plain.write_text("[]")
        store.export_json(plain, force=True)  # an explicit force replaces a plain file
    assert json.loads(plain.read_text())[0]["kind"] == "prune"
    with ResultStore(other) as kept:
        assert len(kept) == 2
    with ResultStore(db) as store:
        assert len(store) == 3


def test_report_refuses_two_outputs_on_one_path(tmp_path, capsys):
    db = make_store(tmp_path / "a.db", rows=2)
    same = str(tmp_path / "x.out")
    code, _, err = run(["report", "--db", str(db), "--out", same, "--json", same], capsys)
    assert code == 2 and "both be written" in err


def test_an_interrupted_export_leaves_the_old_file_whole(tmp_path):
    target = tmp_path / "rows.json"
    target.write_text("[1, 2, 3]")
    with pytest.raises(KeyboardInterrupt), atomic_output(target) as handle:
        handle.write("[4, 5")
        raise KeyboardInterrupt
    assert target.read_text() == "[1, 2, 3]"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.json"]  # no temporary file left


def test_a_store_damaged_in_the_middle_is_refused_and_never_written(tmp_path, capsys):
    good = make_store(tmp_path / "good.db")
    bad = tmp_path / "that.db"
    shutil.copy(good, bad)
    damage(bad)
    before = digest(bad)
    code, _, err = run(
        ["sweep", "--methods", "magnitude", "--patterns", "2:4", "--db", str(bad)], capsys
    )
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "damaged" in err and "store recover" in err
    assert digest(bad) == before
    code, _, err = run(["report", "--db", str(bad), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 2 and "damaged" in err and digest(bad) == before


def test_damage_met_after_opening_stops_all_writes(tmp_path):
    bad = make_store(tmp_path / "that.db")
    damage(bad, offset=4096, size=4096 * 20)
    before = digest(bad)
    store = ResultStore(bad, check=False)  # as if the damage happened after opening
    with pytest.raises(StoreError, match=r"malformed|damaged"):
        store.query()
    with pytest.raises(StoreError, match="damaged"):
        store.record("dense", {"model": "m"}, {"accuracy": 1.0})
    store.close()
    assert digest(bad) == before


def test_store_check_and_recover_copy_every_readable_row(tmp_path, capsys):
    good = make_store(tmp_path / "good.db", rows=400)
    bad = tmp_path / "bad.db"
    shutil.copy(good, bad)
    damage(bad, offset=60 * 1024, size=8 * 1024)
    before = digest(bad)
    code, out, _ = run(["store", "check", str(good)], capsys)
    assert code == 0 and "ok" in out and "400 readable rows" in out
    code, out, _ = run(["store", "check", str(bad)], capsys)
    assert code == 1 and "damaged" in out
    new = tmp_path / "rescued.db"
    code, out, err = run(["store", "recover", str(bad), str(new)], capsys)
    assert code == 0, err
    assert digest(bad) == before
    health = check_store(new)
    assert health.ok and health.readable_rows > 0
    with ResultStore(new) as rescued, ResultStore(good) as original:
        want = {r.id: (r.config, r.metrics) for r in original.query()}
        got = {r.id: (r.config, r.metrics) for r in rescued.query()}
    assert got.items() <= want.items()  # every copied row is exactly the original row
    assert 0 < len(got) < 400  # this damage loses the rows of one page, and only those
    result = check_store(bad)
    assert len(got) == 400 - result.unreadable_rows - result.missing_ids
    code, _, err = run(["store", "recover", str(bad), str(new)], capsys)
    assert code == 2 and "exists already" in err  # never over an existing file


def test_recover_refuses_what_is_not_sqlite(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    with pytest.raises(StoreError, match="not an SQLite database"):
        recover_store(notes, tmp_path / "new.db")
    with pytest.raises(StoreError, match="does not exist"):
        check_store(tmp_path / "missing.db")


def test_report_without_db_reads_the_default_store(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "r.html"
    code, _, err = run(["report", "--out", str(out)], capsys)
    assert code == 2 and "no results database" in err and "cache" in err
    (tmp_path / "cache").mkdir()
    make_store(tmp_path / "cache" / "results.db", rows=2)
    code, _, err = run(["report", "--out", str(out), "--no-reference"], capsys)
    assert code == 0, err
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_report_opens_the_store_read_only(tmp_path, monkeypatch):
    db = make_store(tmp_path / "a.db", rows=2)
    opened = []
    real = sqlite3.connect

    def spy(target, *args, **kwargs):
        opened.append(str(target))
        return real(target, *args, **kwargs)

    monkeypatch.setattr("explorer.results.store.db.sqlite3.connect", spy)
    before = digest(db)
    write_report(db, tmp_path / "r.html", include_reference=False)
    mine = [t for t in opened if "a.db" in t]
    assert mine and all("mode=ro" in t or "immutable=1" in t for t in mine)
    assert digest(db) == before


def test_a_read_only_store_is_not_written(tmp_path):
    db = make_store(tmp_path / "a.db", rows=2)
    with ResultStore(db, readonly=True, source="local") as store:
        assert store.query()[0].source == "local"
        with pytest.raises(StoreError, match="read-only"):
            store.add_sweep("s2", {})


def test_cache_variable_naming_a_db_file_keeps_weights_beside_it(tmp_path, monkeypatch):
    from explorer.results.store import cache_dir, default_path

    store = tmp_path / "x" / "results.db"
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(store))
    assert cache_dir() == tmp_path / "x" and default_path() == store
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path / "folder"))
    assert cache_dir() == tmp_path / "folder"
    assert default_path() == tmp_path / "folder" / "results.db"
    assert not os.path.exists(store)


def test_side_file_names_of_a_database_are_never_used_for_stores_or_exports(tmp_path):
    db = make_store(tmp_path / "main.db", rows=2)
    with pytest.raises(StoreError, match="side files"):
        ResultStore(tmp_path / "main.db-wal")  # the next write to main.db would replace it
    with pytest.raises(StoreError, match="side files"):
        recover_store(db, tmp_path / "main.db-journal")
    make_store(tmp_path / "elsewhere.db", rows=1)
    os.replace(tmp_path / "elsewhere.db", tmp_path / "main.db-journal")
    with pytest.raises(StoreError, match="would overwrite"):
        ResultStore(db)  # opening main.db would treat that store as its journal
    os.remove(tmp_path / "main.db-journal")
    with ResultStore(tmp_path / "other.db") as other, pytest.raises(StoreError, match="wal file"):
        other.export_json(tmp_path / "main.db-wal")
    with ResultStore(db) as store:
        assert len(store) == 2
