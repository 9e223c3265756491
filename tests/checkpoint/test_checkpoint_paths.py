"""save, export, save_sparse, export_onnx and export_pretrained follow the output-path rule."""

from __future__ import annotations

import os
import stat

import pytest
import torch
from torch import nn

import explorer
from explorer import cli
from explorer.checkpoint import export_onnx, export_pretrained, save_sparse
from explorer.errors import OutputPathError
from explorer.results.store import ResultStore


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def make_store(path, rows=3):
    with ResultStore(path) as store:
        for i in range(rows):
            store.record("prune", {"model": "m", "i": i}, {"accuracy": 0.5})
    return path


def rows(path):
    with ResultStore(path, readonly=True) as store:
        return len(store)


def small_net():
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8))
    explorer.prune(net, "magnitude", "2:4", progress=False)
    return net


def leftovers(folder):
    return sorted(p.name for p in folder.rglob("*") if ".part" in p.name or p.suffix == ".tmp")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, digits_bundle_factory_module):
    path = tmp_path_factory.mktemp("ckpt") / "digits.safetensors"
    bundle = digits_bundle_factory_module()
    result = explorer.prune(bundle.model, filter_fn=bundle.filter_fn, progress=False)
    save_sparse(bundle, path, result, progress=False)
    return path


@pytest.fixture(scope="module")
def digits_bundle_factory_module():
    pytest.importorskip("sklearn", reason="digits-mlp needs scikit-learn (the models extra)")
    from explorer.models import load

    return lambda: load("digits-mlp")


# -- save ----------------------------------------------------------------------------------------
def test_save_refuses_a_results_store_even_forced(tmp_path, capsys, checkpoint):
    db = make_store(tmp_path / "results.db")
    before = db.read_bytes()
    for extra in ([], ["--force"]):
        code, out, err = run(["save", "digits-mlp", "--out", db, "--no-progress", *extra], capsys)
        assert code == 2 and out == "", err
        assert "SQLite database" in err and err.count("\n") == 1
    assert db.read_bytes() == before and rows(db) == 3
    assert leftovers(tmp_path) == []


def test_save_refuses_a_side_file_of_a_store_even_forced(tmp_path, capsys, checkpoint):
    db = make_store(tmp_path / "results.db")
    code, _, err = run(
        ["save", "digits-mlp", "--out", f"{db}-wal", "--no-progress", "--force"], capsys
    )
    assert code == 2 and "wal file of the database" in err
    assert not (tmp_path / "results.db-wal").exists() and rows(db) == 3


def test_save_needs_force_to_replace_a_user_file(tmp_path, capsys, checkpoint):
    thesis = tmp_path / "thesis.tex"
    thesis.write_text("\\chapter{One}")
    code, _, err = run(["save", "digits-mlp", "--out", thesis, "--no-progress"], capsys)
    assert code == 2 and "it exists; pass --force" in err
    assert thesis.read_text() == "\\chapter{One}"
    code, _, err = run(["save", "digits-mlp", "--out", thesis, "--no-progress", "--force"], capsys)
    assert code == 0, err
    assert thesis.read_bytes()[8:9] == b"{"  # a safetensors header now
    assert leftovers(tmp_path) == []


def test_save_refuses_a_fifo(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = run(["save", "digits-mlp", "--out", fifo, "--no-progress", "--force"], capsys)
    assert code == 2 and "FIFO" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_save_sparse_never_overwrites_without_asking(tmp_path):
    net = small_net()
    for name in ("train.py", "notes.txt"):
        target = tmp_path / name
        target.write_text("print('mine')")
        with pytest.raises(OutputPathError, match="overwrite=True"):
            save_sparse(net, target, progress=False)
        assert target.read_text() == "print('mine')"
    save_sparse(net, tmp_path / "train.py", progress=False, overwrite=True)
    assert (tmp_path / "train.py").read_bytes()[8:9] == b"{"
    assert leftovers(tmp_path) == []


def test_save_sparse_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        save_sparse(small_net(), tmp_path / "n.safetensors", progress=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "n.safetensors").stat().st_mode) == 0o644


def test_save_on_a_full_disk_is_one_line(tmp_path, capsys, monkeypatch, checkpoint):
    import safetensors.torch

    def full(*args, **kwargs):
        raise safetensors.SafetensorError("Error while serializing: No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    code, out, err = run(
        ["save", "digits-mlp", "--out", tmp_path / "d.st", "--no-progress"], capsys
    )
    assert code == 2 and out == ""
    assert err.startswith("sparsity-explorer: error: cannot write the checkpoint")
    assert "No space left" in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# -- export ----------------------------------------------------------------------------------------
def test_export_onnx_refuses_a_results_store_even_forced(tmp_path, capsys, checkpoint):
    pytest.importorskip("onnxscript")
    db = make_store(tmp_path / "results.db")
    before = db.read_bytes()
    for extra in ([], ["--force"]):
        code, _, err = run(["export", checkpoint, "--onnx", db, *extra], capsys)
        assert code == 2 and "SQLite database" in err, err
    assert db.read_bytes() == before and rows(db) == 3
    assert leftovers(tmp_path) == []


def test_export_onnx_is_one_file_and_needs_force_to_replace(tmp_path, capsys, checkpoint):
    pytest.importorskip("onnxscript")
    out = tmp_path / "digits.onnx"
    code, _, err = run(["export", checkpoint, "--onnx", out], capsys)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits.onnx"]  # no .onnx.data
    first = out.read_bytes()
    assert out.stat().st_size > 100_000  # the weights are inside the file
    code, _, err = run(["export", checkpoint, "--onnx", out], capsys)
    assert code == 2 and "it exists; pass --force" in err
    code, _, err = run(["export", checkpoint, "--onnx", out, "--force"], capsys)
    assert code == 0, err
    assert out.read_bytes() != b"" and len(out.read_bytes()) == len(first)
    assert leftovers(tmp_path) == []


def test_export_onnx_refuses_a_fifo_before_exporting(tmp_path):
    pytest.importorskip("onnxscript")
    fifo = tmp_path / "net.onnx"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="FIFO"):
        export_onnx(small_net(), fifo, torch.randn(2, 16), overwrite=True)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and leftovers(tmp_path) == []


def test_export_error_has_no_ansi_colours(tmp_path, capsys, monkeypatch, checkpoint):
    pytest.importorskip("onnxscript")

    def coloured(*args, **kwargs):
        raise RuntimeError("\x1b[1m\x1b[31mTorchExportError\x1b[0m: failed to export")

    monkeypatch.setattr(torch.onnx, "export", coloured)
    code, _, err = run(["export", checkpoint, "--onnx", tmp_path / "x.onnx"], capsys)
    assert code == 2 and "\x1b" not in err and "TorchExportError: failed to export" in err
    assert list(tmp_path.iterdir()) == []


def test_export_of_a_llama_checkpoint(tmp_path, capsys, tiny_llama):
    pytest.importorskip("onnxscript")
    with pytest.warns(UserWarning, match="shared"):
        explorer.prune(tiny_llama, "magnitude", "2:4", progress=False)
    ckpt = tmp_path / "llama.safetensors"
    save_sparse(tiny_llama, ckpt, progress=False)
    code, out, err = run(["export", ckpt, "--onnx", tmp_path / "llama.onnx"], capsys)
    assert code == 0, err
    assert "OnnxReport(llama.onnx" in out and (tmp_path / "llama.onnx").is_file()


def test_export_pretrained_needs_overwrite_for_a_folder_with_files(tmp_path, tiny_llama):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "README.md").write_text("my notes")
    with pytest.raises(OutputPathError, match="not empty"):
        export_pretrained(tiny_llama, folder)
    assert sorted(os.listdir(folder)) == ["README.md"]
    export_pretrained(tiny_llama, folder, overwrite=True)
    assert (folder / "README.md").read_text() == "my notes"
    assert (folder / "sparsity_manifest.json").is_file() and leftovers(tmp_path) == []
    new = export_pretrained(tiny_llama, tmp_path / "fresh")
    assert (new / "config.json").is_file()
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE((new / "config.json").stat().st_mode) == 0o666 & ~mask


def test_the_explorers_own_export_cache_needs_overwrite_too_and_never_a_store(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path / "cache"))
    exports = tmp_path / "cache" / "exports"
    exports.mkdir(parents=True)
    net = small_net()
    save_sparse(net, exports / "d.safetensors", progress=False)
    with pytest.raises(OutputPathError, match="it exists"):
        save_sparse(net, exports / "d.safetensors", progress=False)  # no exception for the cache
    save_sparse(net, exports / "d.safetensors", progress=False, overwrite=True)  # the dashboard
    db = make_store(exports / "results.db")
    with pytest.raises(OutputPathError, match="SQLite database"):
        save_sparse(net, db, progress=False, overwrite=True)
    assert rows(db) == 3 and leftovers(tmp_path) == []
