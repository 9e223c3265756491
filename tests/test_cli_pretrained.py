"""``sparsity-explorer sweep --model ./folder --text corpus.txt``: a checkpoint end to end."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from explorer.cli import main
from explorer.models.tiny import sample_text, save_tiny_llama
from explorer.results.store import ResultStore
from explorer.sweeps.grid import SweepConfig


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("byo-cli")
    save_tiny_llama(root / "my-model")
    (root / "corpus.txt").write_text(sample_text(1500), encoding="utf-8")
    return root


def test_sweep_a_checkpoint_folder_end_to_end(work, tmp_path, capsys, monkeypatch):
    db = tmp_path / "results.db"
    # 1. A store that already holds a bundled sweep keeps it.
    assert main(["sweep", "--model", "digits-mlp", "--db", str(db), "--no-progress"]) == 0
    with ResultStore(db) as store:
        before = len(store.query())
    folder_files = sorted(p.name for p in (work / "my-model").iterdir())
    # 2. The folder, given relative to the working folder as a user would.
    monkeypatch.chdir(work)
    argv = ["sweep", "--model", "./my-model", "--text", "corpus.txt", "--db", str(db)]
    argv += ["--methods", "magnitude,wanda", "--patterns", "2:4", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "my-model-" in out and "wanda 2:4" in out
    with ResultStore(db) as store:
        rows = store.query()
        mine = [r for r in rows if r.model == str((work / "my-model").resolve())]
        assert len(rows) - len(mine) == before
    kinds = sorted((r.kind, r.method or "", r.status) for r in mine)
    timed = "skipped" if not torch.cuda.is_available() else "ok"
    assert kinds == [
        ("dense", "", "ok"),
        ("layer-speed", "", "skipped" if not torch.cuda.is_available() else kinds[1][2]),
        ("model-speed", "", "skipped"),  # the dense baseline: nothing to time
        ("model-speed", "magnitude", timed),
        ("model-speed", "wanda", timed),
        ("prune", "magnitude", "ok"),
        ("prune", "wanda", "ok"),
    ]
    for row in mine:
        if row.kind in ("dense", "prune"):
            assert math.isfinite(row.metrics["perplexity"])
            assert row.config["load"]["text"] == str((work / "corpus.txt").resolve())
    if not torch.cuda.is_available():
        (speed,) = [r for r in mine if r.kind == "layer-speed"]
        assert "no CUDA GPU" in speed.error
    assert sorted(p.name for p in (work / "my-model").iterdir()) == folder_files
    # 3. The same command resumes: the measured cells are not run again. The report names
    #    the folder.
    assert main(argv) == 0
    assert "3 already done" in capsys.readouterr().out
    report = tmp_path / "report.html"
    assert main(["report", "--db", str(db), "--out", str(report)]) == 0
    assert "my-model" in report.read_text(encoding="utf-8")


def test_sweep_errors_are_one_line(work, tmp_path, capsys):
    db = tmp_path / "r.db"
    cases = [
        (["--model", str(work / "my-model")], "--text corpus.txt"),
        (["--model", "digits-mlp", "--text", str(work / "corpus.txt")], "leave text (--text) out"),
        (["--model", str(work), "--text", str(work / "corpus.txt")], "has no config.json"),
        (["--model", str(work / "nope"), "--text", "x.txt"], "does not exist"),
        (["--model", str(work / "my-model"), "--text", str(work / "no.txt")], "is not a file"),
    ]
    for args, expected in cases:
        assert main(["sweep", *args, "--db", str(db), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("\n") == 1, err
    assert not db.exists()  # refused before the store is created


def test_bundled_sweep_ids_and_cell_keys_are_unchanged():
    # The ids a bundled sweep had before checkpoint folders and model-speed cells existed, so
    # old stores resume (and gain the model-speed cells, which come after the old ones).
    cfg = SweepConfig.make("digits-mlp", methods="magnitude", patterns="2:4")
    assert cfg.text is None and "load" not in cfg.cells()[0].config
    assert cfg.sweep_id == "digits-mlp-03687dc45c"
    assert [c.key for c in cfg.cells()][:3] == [
        "875f6fb05fe0723d",
        "5fcb24baedf6d0a4",
        "f7c00df6dac55dfa",
    ]
    assert [c.kind for c in cfg.cells()[3:]] == ["model-speed", "model-speed"]
    assert SweepConfig.from_json(cfg.to_json()) == cfg


def test_doctor_takes_a_folder_without_text(work, capsys):
    assert main(["doctor", str(work / "my-model"), "--capability", "9.0", "--tokens", "64"]) == 0
    out = capsys.readouterr().out
    assert "DoctorReport" in out and "model.layers.0.mlp.gate_proj" in out


def test_encoder_folder_sweeps_from_python(work, tmp_path, capsys):
    from explorer.models.tiny import save_tiny_bert
    from explorer.sweeps import sweep

    folder = save_tiny_bert(tmp_path / "enc")
    result = sweep(
        str(folder),
        methods="magnitude,wanda",
        patterns="2:4",
        db=tmp_path / "enc.db",
        progress=False,
        text=work / "corpus.txt",
        calibration_samples=16,
    )
    assert result.failed == 0 and result.ran == 4 + 3  # and a model-speed cell for each
    with ResultStore(tmp_path / "enc.db") as store:
        pruned = [r for r in store.query("prune")]
    assert {r.method for r in pruned} == {"magnitude", "wanda"}
    assert all(0 < r.metrics["cosine_to_dense"] < 1 for r in pruned)
    assert capsys.readouterr().err == ""  # progress=False: no loading or evaluation bars
