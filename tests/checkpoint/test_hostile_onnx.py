"""Hostile or unusual ONNX graphs: one CheckpointError line, and weights found wherever they hide."""

from __future__ import annotations

import numpy as np
import pytest

from explorer import cli
from explorer.checkpoint import CheckpointError, check_onnx

onnx = pytest.importorskip("onnx", reason="ONNX checks need onnx (the deploy extra)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _mask24(shape, axis_k, seed=0):
    """A float32 array, 2:4 along ``axis_k`` (kept entries nonzero)."""
    rng = np.random.default_rng(seed)
    w = np.moveaxis(rng.standard_normal(shape).astype(np.float32) + 3.0, axis_k, -1)
    g = w.reshape(-1, 4)
    g[:, 1:3] = 0
    return np.moveaxis(g.reshape(w.shape), -1, axis_k).copy()


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _save(path, nodes, inits, inputs, outputs):
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        outputs,
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_matmul_without_inputs_is_one_line(tmp_path):
    """Was an IndexError traceback."""
    path = _save(
        tmp_path / "bad.onnx",
        [helper.make_node("MatMul", [], ["y"], name="mm")],
        {},
        [],
        [_vi("y", [8, 8])],
    )
    with pytest.raises(CheckpointError, match=r"node 'mm' .MatMul. has 0 inputs and 1 outputs"):
        check_onnx(path)


def test_transpose_without_inputs_is_one_line(tmp_path):
    path = _save(
        tmp_path / "bad.onnx",
        [
            helper.make_node("Transpose", [], ["t"], name="tr"),
            helper.make_node("MatMul", ["x", "t"], ["y"], name="mm"),
        ],
        {"unused": np.ones((4, 4), np.float32)},
        [_vi("x", [8, 64])],
        [_vi("y", [8, 32])],
    )
    with pytest.raises(CheckpointError, match=r"weight of node 'mm' .* Transpose node 'tr' has no"):
        check_onnx(path)


def test_reshape_to_an_impossible_shape_is_one_line(tmp_path):
    path = _save(
        tmp_path / "bad.onnx",
        [
            helper.make_node("Reshape", ["flat", "shape"], ["w"], name="rs"),
            helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        ],
        {"flat": np.ones(64 * 32, np.float32), "shape": np.array([7, -1], np.int64)},
        [_vi("x", [8, 64])],
        [_vi("y", [8, 32])],
    )
    with pytest.raises(CheckpointError, match=r"weight of node 'mm' .MatMul. cannot be read"):
        check_onnx(path)


@pytest.fixture
def hidden_weights(tmp_path):
    """Three MatMul weights behind Reshape, Mul by a scale, and Cast then Mul."""
    good = _mask24((64, 32), axis_k=0)  # B[K, N], 2:4 along K
    scaled = _mask24((64, 32), axis_k=0, seed=1)
    bad = np.ones((64, 32), np.float32)
    nodes = [
        helper.make_node("Reshape", ["flat", "shape"], ["w1"], name="rs"),
        helper.make_node("MatMul", ["x", "w1"], ["y1"], name="mm_reshape"),
        helper.make_node("Mul", ["scaled", "scale"], ["w2"], name="mul"),
        helper.make_node("MatMul", ["x", "w2"], ["y2"], name="mm_mul"),
        helper.make_node("Cast", ["bad"], ["bad16"], to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["bad16"], ["bad32"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["bad32", "scale"], ["w3"], name="mul_bad"),
        helper.make_node("MatMul", ["x", "w3"], ["y3"], name="mm_bad"),
    ]
    inits = {
        "flat": good.reshape(-1),
        "shape": np.array([64, 32], np.int64),
        "scaled": scaled,
        "scale": np.array(0.5, np.float32),
        "bad": bad,
    }
    outs = [_vi(f"y{i}", [8, 32]) for i in (1, 2, 3)]
    return _save(tmp_path / "hidden.onnx", nodes, inits, [_vi("x", [8, 64])], outs)


def test_weights_behind_reshape_mul_and_cast_are_checked(hidden_weights):
    """Was "0 weights", so `check --strict` passed a file it had not looked at."""
    report = check_onnx(hidden_weights, tokens=4096)
    by_node = {w.node: w for w in report.weights}
    assert set(by_node) == {"mm_reshape", "mm_mul", "mm_bad"}
    assert by_node["mm_reshape"].initializer == "flat" and by_node["mm_reshape"].valid_24
    assert by_node["mm_mul"].initializer == "scaled" and by_node["mm_mul"].valid_24
    assert not by_node["mm_bad"].valid_24 and by_node["mm_bad"].verdict == "dense"
    assert report.strict_problems == (f"mm_bad falls back to dense: {report.fallbacks['mm_bad']}",)


def test_strict_check_verb_fails_on_hidden_dense_weight(hidden_weights, capsys):
    assert cli.main(["check", str(hidden_weights), "--tokens", "4096"]) == 0
    assert cli.main(["check", str(hidden_weights), "--strict", "--tokens", "4096"]) == 1
    out, err = capsys.readouterr()
    assert "mm_bad" in out
    assert err.startswith("sparsity-explorer: check --strict: mm_bad falls back to dense: ")
    assert err.count("\n") == 1


def test_strict_fails_when_no_weight_was_checked(tmp_path):
    from explorer.checkpoint import check_file

    path = _save(
        tmp_path / "act.onnx",
        [
            helper.make_node("MatMul", ["a", "b"], ["ab"], name="act_act"),
            helper.make_node("Add", ["ab", "bias"], ["y"], name="add"),
        ],
        {"bias": np.ones(8, np.float32)},
        [_vi("a", [8, 64]), _vi("b", [64, 8])],
        [_vi("y", [8, 8])],
    )
    assert check_file(path).weights == ()
    with pytest.raises(CheckpointError, match="no MatMul/Gemm/Conv weight was found and checked"):
        check_file(path, strict=True)


def test_check_verb_strict_fails_an_onnx_file_with_no_weight(tmp_path, capsys):
    path = _save(
        tmp_path / "noweights.onnx",
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        {},
        [_vi("x", [8, 64])],
        [_vi("y", [8, 64])],
    )
    assert cli.main(["check", str(path)]) == 0
    capsys.readouterr()
    assert cli.main(["check", str(path), "--strict"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("OnnxReport(noweights.onnx: 0 weights")
    assert err == (
        "sparsity-explorer: check --strict: no MatMul/Gemm/Conv weight was found and checked "
        "in noweights.onnx\n"
    )
