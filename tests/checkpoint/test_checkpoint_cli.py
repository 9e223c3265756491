"""The save, export and check verbs of the command line, run for real on digits-mlp."""

from __future__ import annotations

import pytest

from explorer import cli

pytest.importorskip("sklearn", reason="digits-mlp needs scikit-learn (the models extra)")


def run(argv, capsys):
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("verb", ["save", "export", "check"])
def test_verbs_have_help(verb, capsys):
    code, out, _ = run([verb, "--help"], capsys)
    assert code == 0 and "usage:" in out and verb in out


def test_save_check_export_check(tmp_path, capsys):
    ckpt = tmp_path / "digits.safetensors"
    code, out, err = run(["save", "digits-mlp", "--out", ckpt, "--no-progress"], capsys)
    assert code == 0, err
    assert out.startswith("CheckpointReport(digits.safetensors: 2 of 3 layers 2:4")
    assert "dense: not 2:4" in out
    code, out, err = run(["check", ckpt], capsys)
    assert code == 0 and "checksums ok" in out, err
    code, _, _ = run(["check", ckpt, "--strict"], capsys)
    assert code == 1  # the classifier is kept dense
    onnx_path = tmp_path / "digits.onnx"
    folder = tmp_path / "hf"
    code, out, err = run(["export", ckpt, "--onnx", onnx_path], capsys)
    assert code == 0, err
    assert "OnnxReport(digits.onnx: 3 weights, 2 can run 2:4 sparse" in out
    code, out, err = run(["check", onnx_path, "--tokens", "4096"], capsys)
    assert code == 0 and "4  Gemm" in out and "dense: not 2:4 along K" in out, err
    code, _, err = run(["export", ckpt, "--pretrained", folder], capsys)
    assert code == 2 and "has no save_pretrained" in err  # the MLP is not a Transformers model


def test_damaged_file_is_one_line_and_status_2(tmp_path, capsys):
    ckpt = tmp_path / "digits.safetensors"
    assert run(["save", "digits-mlp", "--out", ckpt, "--no-progress"], capsys)[0] == 0
    data = bytearray(ckpt.read_bytes())
    data[-5] ^= 0x40
    ckpt.write_bytes(bytes(data))
    code, out, err = run(["check", ckpt], capsys)
    assert code == 2 and out == ""
    assert err.startswith("sparsity-explorer: error: tensor ") and "checksum" in err
    assert err.count("\n") == 1
    code, _, err = run(["export", ckpt], capsys)
    assert code == 2 and "--onnx FILE and/or --pretrained DIR" in err
