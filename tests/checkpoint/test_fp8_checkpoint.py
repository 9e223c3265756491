"""2:4 layers stored in FP8: float8_e4m3fn codes, one float32 scale a row, the usual positions."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from explorer.checkpoint import (
    CheckpointError,
    check_file,
    load_sparse,
    read_checkpoint,
    save_sparse,
)
from explorer.checkpoint.compressed_layers import dense_codes, read_compressed
from explorer.checkpoint.manifest import METADATA_KEY, tensor_sha256
from explorer.checkpoint.manifest_schema import validate_checkpoint_manifest
from explorer.checks import check_pattern
from explorer.gpu.modules.fp8 import FP8, quantize_weight
from explorer.masks import make_mask
from explorer.pruning import prune

FP8_NAME = "float8_e4m3fn"


def _net(dtype=torch.float32, seed=0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 32)).to(dtype)


def _pruned(dtype=torch.float32) -> nn.Sequential:
    """Magnitude 2:4 on both Linears (explorer.make_mask), weights spread over 1e4 in a row."""
    net = _net(dtype)
    with torch.no_grad():
        for i in (0, 2):
            w = net[i].weight
            spread = torch.logspace(-2, 2, w.shape[1])[torch.randperm(w.shape[1])]
            w.copy_((w.float() * spread).to(dtype))
            w.mul_(make_mask(w, "2:4"))
    return net


def _dequantized(weight: torch.Tensor) -> torch.Tensor:
    """What loading must give: the GPU fp8 layers' codes times their scales, in the dtype."""
    q, s = quantize_weight(weight)
    return (q.float() * s[:, None]).to(weight.dtype)


def _read(path):
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, json.loads(f.metadata()[METADATA_KEY])


def _write(path, tensors, manifest, *, reseal=()):
    """Write ``tensors`` under ``manifest``; the names in ``reseal`` get their new checksum."""
    for name in reseal:
        t = tensors[name]
        entry = manifest["tensors"][name]
        entry.update(sha256=tensor_sha256(t), shape=list(t.shape))
    save_file(tensors, str(path), metadata={METADATA_KEY: json.dumps(manifest), "format": "pt"})


@pytest.fixture
def fp8_file(tmp_path):
    net = _pruned(torch.bfloat16)
    path = tmp_path / "fp8.safetensors"
    save_sparse(net, path, quantize=FP8_NAME, progress=False)
    return net, path


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_round_trip_gives_the_fp8_dequantized_weight_exactly(tmp_path, dtype):
    net = _pruned(dtype)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    path = tmp_path / "fp8.safetensors"
    report = save_sparse(net, path, quantize=FP8_NAME, progress=False)
    for k, v in net.state_dict().items():  # saving changes nothing in the model
        assert torch.equal(v, before[k]), k
    manifest = report.manifest
    for fqn, k in (("0", 128), ("2", 64)):
        layer, param = manifest["layers"][fqn], f"{fqn}.weight"
        assert layer["quantize"] == FP8_NAME and "group_size" not in layer
        rows = layer["shape"][0]
        assert manifest["tensors"][param + "::codes"]["dtype"] == FP8_NAME
        assert manifest["tensors"][param + "::codes"]["shape"] == [rows, k // 2]
        assert manifest["tensors"][param + "::scales"] == {
            **manifest["tensors"][param + "::scales"],
            "dtype": "float32",
            "shape": [rows, 1],
        }
        assert manifest["tensors"][param + "::positions"]["shape"] == [rows, k // 8]
        assert param + "::values" not in manifest["tensors"]
    fresh = load_sparse(path, _net(dtype, seed=1), progress=False)
    for i in (0, 2):
        got, original = fresh[i].weight.detach(), net[i].weight.detach()
        assert got.dtype == dtype
        # the layer's checksum is of the weight loading rebuilds
        assert manifest["layers"][str(i)]["sha256"] == tensor_sha256(got)
        assert torch.equal(got, _dequantized(original))
        assert torch.equal(fresh[i].bias, net[i].bias)
        assert check_pattern(got, "2:4").valid
        assert torch.equal(got == 0, original == 0)  # no kept value underflows here
        # FP8 is close to, not equal to, the weight it came from
        assert float((got.float() - original.float()).norm() / original.float().norm()) < 0.05


def test_bytes_per_weight_are_one_byte_a_kept_value_plus_positions_and_scales(fp8_file):
    _, path = fp8_file
    report = check_file(path)
    # 4 bits of codes + 1 of positions + 32 bits of scale over the row's K weights
    assert [r.bits_per_weight for r in report.sparse_layers] == [4 + 1 + 32 / 128, 4 + 1 + 32 / 64]
    assert [r.quantize for r in report.sparse_layers] == [FP8_NAME, FP8_NAME]
    assert report.sparse_ratio == pytest.approx((64 * 84 + 32 * 44) / (64 * 256 + 32 * 128))
    assert "2:4 float8_e4m3fn" in str(report) and "5.25 bits/weight" in str(report)


def test_the_stored_codes_are_the_gpu_layers_codes(fp8_file):
    net, path = fp8_file
    manifest, _ = read_checkpoint(path)
    raw, _ = _read(path)
    for fqn in ("0", "2"):
        packed = read_compressed(fqn, manifest["layers"][fqn], raw, str(path))
        q, s = quantize_weight(net[int(fqn)].weight)
        codes = dense_codes(packed)
        assert codes.dtype == FP8
        # the same codes (a zero pruned from a negative weight is -0 there, +0 in the file)
        assert torch.equal(codes.float(), q.float())
        assert torch.equal(packed.scale, s)


def test_a_row_of_zeros_gets_scale_one(tmp_path):
    net = _pruned(torch.bfloat16)
    with torch.no_grad():
        net[0].weight[3] = 0
    path = tmp_path / "zero-row.safetensors"
    save_sparse(net, path, quantize=FP8_NAME, progress=False)
    raw, _ = _read(path)
    assert raw["0.weight::scales"][3].tolist() == [1.0]
    assert (raw["0.weight::scales"] > 0).all()
    fresh = load_sparse(path, _net(torch.bfloat16, seed=1), progress=False)
    assert torch.equal(fresh[0].weight[3], torch.zeros(128, dtype=torch.bfloat16))
    assert torch.equal(fresh[0].weight, _dequantized(net[0].weight.detach()))


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_a_weight_with_inf_or_nan_is_refused_naming_the_layer(tmp_path, bad):
    net = _pruned()
    with torch.no_grad():
        net[2].weight[5, 9] = bad
    path = tmp_path / "bad.safetensors"
    with pytest.raises(CheckpointError, match=r"float8_e4m3fn: layer '2' holds 1 non-finite"):
        save_sparse(net, path, quantize=FP8_NAME, filter_fn=lambda m, fqn: True, progress=False)
    assert not path.exists()


@pytest.mark.parametrize(
    "value", ["fp8", "float8_e5m2", "FLOAT8_E4M3FN", "int4", torch.float8_e4m3fn, True]
)
def test_a_quantize_other_than_the_exact_name_is_refused(tmp_path, value):
    path = tmp_path / "x.safetensors"
    with pytest.raises(ValueError, match=r"quantize=.* expected None or 'float8_e4m3fn'.*Hint"):
        save_sparse(_pruned(), path, quantize=value, progress=False)
    assert not path.exists()


def test_changed_codes_or_scales_under_the_old_manifest_are_caught(tmp_path, fp8_file):
    _, path = fp8_file
    for name in ("0.weight::codes", "0.weight::scales"):
        tensors, manifest = _read(path)
        t = tensors[name]
        if t.dtype == FP8:  # one code one step up, as bits
            bits = t.view(torch.uint8).clone()
            bits[0, 0] += 1
            tensors[name] = bits.view(FP8)
        else:
            tensors[name] = t * 2
        bad = tmp_path / "tampered.safetensors"
        _write(bad, tensors, manifest)
        fresh = _net(torch.bfloat16, seed=1)
        before = fresh[0].weight.detach().clone()
        with pytest.raises(CheckpointError, match=rf"'{name}' .* does not match its checksum"):
            load_sparse(bad, fresh, progress=False)
        assert torch.equal(fresh[0].weight, before)  # the model is left as it was


@pytest.mark.parametrize("name", ["0.weight::codes", "0.weight::scales"])
def test_changed_parts_with_their_checksums_rewritten_fail_the_layers_checksum(tmp_path, name):
    net = _pruned(torch.bfloat16)
    path = tmp_path / "fp8.safetensors"
    save_sparse(net, path, quantize=FP8_NAME, progress=False)
    tensors, manifest = _read(path)
    if name.endswith("codes"):
        bits = tensors[name].view(torch.uint8).clone()
        bits[1, 2] ^= 1  # the lowest mantissa bit of one kept code
        tensors[name] = bits.view(FP8)
    else:
        tensors[name] = tensors[name] * 1.5
    _write(path, tensors, manifest, reseal=[name])
    with pytest.raises(CheckpointError, match=r"layer '0' .* rebuilds to a weight that does not"):
        load_sparse(path, _net(torch.bfloat16, seed=1), progress=False)
    with pytest.raises(CheckpointError, match="layer '0'"):
        check_file(path)


@pytest.mark.parametrize(
    ("scales", "match"),
    [
        (lambda s: s.index_fill(0, torch.tensor([4]), math.nan), r"row 4: nan"),
        (lambda s: s.index_fill(0, torch.tensor([7]), math.inf), r"row 7: inf"),
        (lambda s: s.index_fill(0, torch.tensor([0]), 0.0), r"row 0: 0\.0"),
        (lambda s: -s, r"64 FP8 scale\(s\) that are not finite and positive \(row 0: -"),
        (lambda s: s[:, 0].contiguous(), r"float32 \[64\], expected float32 \[64, 1\]"),
        (lambda s: s.double(), r"float64 \[64, 1\], expected float32 \[64, 1\]"),
    ],
)
def test_bad_scales_are_refused_naming_the_layer_and_the_fix(fp8_file, scales, match):
    _, path = fp8_file
    tensors, manifest = _read(path)
    name = "0.weight::scales"
    tensors[name] = scales(tensors[name])
    manifest["tensors"][name]["dtype"] = str(tensors[name].dtype).removeprefix("torch.")
    _write(path, tensors, manifest, reseal=[name])
    with pytest.raises(CheckpointError, match=rf"layer '0' .*{match}.*save the model again"):
        load_sparse(path, _net(torch.bfloat16, seed=1), progress=False)


def test_codes_of_another_dtype_are_refused(fp8_file):
    _, path = fp8_file
    tensors, manifest = _read(path)
    name = "0.weight::codes"
    tensors[name] = tensors[name].view(torch.uint8).clone()
    manifest["tensors"][name]["dtype"] = "uint8"
    _write(path, tensors, manifest, reseal=[name])
    with pytest.raises(CheckpointError, match=r"layer '0' .*codes uint8 \[64, 64\].*float8_e4m3fn"):
        load_sparse(path, _net(torch.bfloat16, seed=1), progress=False)


def test_the_schema_knows_fp8_layers(fp8_file):
    _, path = fp8_file
    _, manifest = _read(path)
    validate_checkpoint_manifest(json.loads(json.dumps(manifest)), "m")
    with_group = json.loads(json.dumps(manifest))
    with_group["layers"]["0"]["group_size"] = 128
    with pytest.raises(CheckpointError, match=r"group_size is 128, expected no group_size"):
        validate_checkpoint_manifest(with_group, "m")
    other = json.loads(json.dumps(manifest))
    other["layers"]["0"]["quantize"] = "float8_e5m2"
    with pytest.raises(CheckpointError, match=r"expected 'int4', 'int8' or 'float8_e4m3fn'"):
        validate_checkpoint_manifest(other, "m")


def test_an_int4_layer_cannot_also_be_stored_in_fp8(tmp_path):
    net = _net()
    result = prune(
        net,
        "sparsegpt",
        "2:4",
        calibration=[torch.randn(256, 128)],
        quantize="int4",
        group_size=32,
        progress=False,
    )
    path = tmp_path / "both.safetensors"
    with pytest.raises(ValueError, match=r"layer '0' was quantized to int4 .*quantize='float8"):
        save_sparse(net, path, result, quantize=FP8_NAME, progress=False)
    assert not path.exists()
    # without result=, the same weights (on their int4 grid) are stored in FP8
    report = save_sparse(net, path, quantize=FP8_NAME, progress=False)
    assert {r.quantize for r in report.sparse_layers} == {FP8_NAME}
    # and with result= alone they stay int4
    report = save_sparse(net, path, result, overwrite=True, progress=False)
    assert {r.quantize for r in report.sparse_layers} == {"int4"}


def test_layers_kept_dense_stay_dense_and_exact(tmp_path):
    net = _pruned(torch.bfloat16)
    path = tmp_path / "some.safetensors"
    report = save_sparse(
        net, path, quantize=FP8_NAME, filter_fn=lambda m, fqn: fqn == "2", progress=False
    )
    assert [(r.stored, r.quantize) for r in report.layers] == [("dense", ""), ("2:4", FP8_NAME)]
    fresh = load_sparse(path, _net(torch.bfloat16, seed=1), progress=False)
    assert torch.equal(fresh[0].weight, net[0].weight)
    assert torch.equal(fresh[2].weight, _dequantized(net[2].weight.detach()))
