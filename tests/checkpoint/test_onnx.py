"""export_onnx and check_onnx: real exports, hand-built graphs, and files without weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import explorer
from explorer.checkpoint import CheckpointError, check_onnx, export_onnx

onnx = pytest.importorskip("onnx", reason="ONNX checks need onnx (the deploy extra)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _initializers(path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _mask24(shape, axis_k=-1, seed=0):
    """A float32 array, 2:4 along ``axis_k`` (kept entries random and nonzero)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32) + 3.0
    w = np.moveaxis(w, axis_k, -1)
    g = w.reshape(-1, 4)
    g[:, 1] = 0
    g[:, 2] = 0
    return np.moveaxis(g.reshape(w.shape), -1, axis_k).copy()


def _save_graph(path, nodes, inits, inputs, outputs):
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        outputs,
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_digits_export_keeps_24_weights_bit_exact(tmp_path, digits_bundle_factory):
    bundle = digits_bundle_factory()
    bundle.model.half()
    explorer.prune(bundle.model, "magnitude", "2:4", filter_fn=bundle.filter_fn, progress=False)
    path = tmp_path / "digits.onnx"
    x = bundle.calibration(16)[0][:8].half()
    report = export_onnx(bundle.model, path, x)
    assert [w.layer for w in report.weights] == ["0", "2", "4"]
    assert [w.valid_24 for w in report.weights] == [True, True, False]
    assert report.weight("4").verdict == "dense"
    assert "not 2:4 along K: 640 of 640 groups" in report.fallbacks["4"]
    assert "outputs=10 not a multiple of 16" in report.fallbacks["4"]
    inits = _initializers(path)
    for w in report.weights:
        torch_weight = bundle.model.get_submodule(w.layer).weight.detach().numpy()
        stored = inits[w.initializer]
        assert w.op == "Gemm" and stored.dtype == np.float16
        assert np.array_equal(stored.view(np.uint16), torch_weight.view(np.uint16))
    assert repr(report).startswith("OnnxReport(digits.onnx: 3 weights, 2 can run 2:4 sparse")
    assert "\n" not in repr(report) and "<table" in report._repr_html_()


def test_llama_export_names_every_linear(tmp_path, tiny_llama, token_ids):
    with pytest.warns(UserWarning, match="shared"):
        explorer.prune(tiny_llama, "magnitude", "2:4", progress=False)
    path = tmp_path / "llama.onnx"
    report = export_onnx(tiny_llama, path, {"input_ids": token_ids, "use_cache": False})
    linears = {n for n, m in tiny_llama.named_modules() if isinstance(m, nn.Linear)}
    assert {w.layer for w in report.weights} == linears
    assert all(w.valid_24 for w in report.weights)
    inits = _initializers(path)
    q = report.weight("model.layers.0.self_attn.q_proj")
    assert q.op == "MatMul" and q.shape == (64, 64)
    exported = torch.from_numpy(inits[q.initializer].astype(np.float32)).t()
    assert torch.equal(exported, tiny_llama.model.layers[0].self_attn.q_proj.weight.float())


def test_matmul_24_must_run_along_k(tmp_path):
    good = _mask24((64, 32), axis_k=0)  # B[K, N]: 2:4 down each column (along K)
    wrong = _mask24((64, 32), axis_k=1)  # 2:4 along N only
    assert not (good == 0).all()
    nodes = [
        helper.make_node("MatMul", ["x", "good"], ["y1"], name="mm_good"),
        helper.make_node("MatMul", ["x", "wrong"], ["y2"], name="mm_wrong"),
        helper.make_node("MatMul", ["y1", "yt"], ["y3"], name="act_act"),
    ]
    path = _save_graph(
        tmp_path / "mm.onnx",
        nodes,
        {"good": good, "wrong": wrong},
        [_vi("x", [8, 64]), _vi("yt", [32, 8])],
        [_vi("y2", [8, 32]), _vi("y3", [8, 8])],
    )
    report = check_onnx(path, tokens=1024)
    assert [w.node for w in report.weights] == ["mm_good", "mm_wrong"]  # act x act: no weight
    good_check, wrong_check = report.weights
    assert good_check.shape == (32, 64) and good_check.valid_24
    assert good_check.verdict == "slow" and "small product" in good_check.reasons[0]
    assert not wrong_check.valid_24 and wrong_check.verdict == "dense"
    # zeros at N = 1, 2 (mod 4) empty half the output rows; the other half stays dense along K
    assert (wrong_check.violations, wrong_check.groups) == (16 * 16, 32 * 16)


def test_gemm_transpose_and_conv(tmp_path):
    gemm_b = _mask24((32, 64), axis_k=1)  # transB=1: B[N, K]
    via_transpose = _mask24((64, 32), axis_k=1)  # [N, K] stored, transposed before MatMul
    conv_w = _mask24((32, 16, 3, 3), axis_k=1)  # 2:4 along C_in
    conv_bad = np.ones((32, 16, 3, 3), np.float32)
    conv_bad[..., 1] = 0  # a third of the weights are zero, but none along C_in
    nodes = [
        helper.make_node("Gemm", ["x", "gb"], ["g"], name="gemm", transB=1),
        helper.make_node("Transpose", ["vt"], ["vt_T"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "vt_T"], ["m"], name="mm_t"),
        helper.make_node("Conv", ["img", "cw"], ["c1"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["img", "cb"], ["c2"], name="conv_bad", pads=[1, 1, 1, 1]),
    ]
    path = _save_graph(
        tmp_path / "mix.onnx",
        nodes,
        {"gb": gemm_b, "vt": via_transpose, "cw": conv_w, "cb": conv_bad},
        [_vi("x", [8, 64]), _vi("img", [1, 16, 8, 8])],
        [_vi("g", [8, 32]), _vi("m", [8, 64]), _vi("c1", [1, 32, 8, 8]), _vi("c2", [1, 32, 8, 8])],
    )
    report = check_onnx(path, dtype="int8", tokens=1 << 23)
    by = {w.node: w for w in report.weights}
    assert by["gemm"].valid_24 and by["gemm"].shape == (32, 64) and by["gemm"].verdict == "sparse"
    assert by["mm_t"].valid_24 and by["mm_t"].initializer == "vt"
    assert by["conv"].valid_24 and by["conv"].shape == (32 * 9, 16)
    assert "K=16 not a multiple of 32" in by["conv"].reasons[0]  # int8 needs 32
    assert not by["conv_bad"].valid_24 and by["conv_bad"].verdict == "dense"


def test_width_not_multiple_of_four(tmp_path):
    path = _save_graph(
        tmp_path / "odd.onnx",
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="g", transB=1)],
        {"w": np.zeros((16, 10), np.float32)},
        [_vi("x", [8, 10])],
        [_vi("y", [8, 16])],
    )
    (check,) = check_onnx(path).weights
    assert check.verdict == "dense" and "K=10 is not a multiple of 4" in check.reasons[0]


def test_onnx_without_weights(tmp_path):
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="g", transB=1)]
    path = _save_graph(
        tmp_path / "noweights.onnx",
        nodes,
        {},
        [_vi("x", [8, 16]), _vi("w", [8, 16])],
        [_vi("y", [8, 8])],
    )
    with pytest.raises(CheckpointError, match="holds no weights: its 1 MatMul/Gemm/Conv nodes"):
        check_onnx(path)


def test_onnx_with_missing_external_data(tmp_path):
    w = _mask24((64, 64), axis_k=1)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="g", transB=1)],
        "g",
        [_vi("x", [8, 64])],
        [_vi("y", [8, 64])],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="ext.data", size_threshold=0)
    assert check_onnx(path).weights[0].valid_24
    (tmp_path / "ext.data").unlink()
    with pytest.raises(CheckpointError, match="external data file that is missing"):
        check_onnx(path)


def test_damaged_onnx_and_bad_arguments(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07garbage" * 50)
    with pytest.raises(CheckpointError, match="cannot be read as an ONNX model"):
        check_onnx(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_onnx(tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match="tokens must be a positive int"):
        check_onnx(path, tokens=0)
    with pytest.raises(TypeError, match="example_inputs must be a tensor"):
        export_onnx(nn.Linear(4, 4), tmp_path / "m.onnx", [torch.zeros(1, 4)])
