"""2:4 + int8 layers (pruned and quantized jointly) in a checkpoint: codes, positions, scales."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from explorer.checkpoint import load_sparse, save_sparse
from explorer.checkpoint.check import check_file
from explorer.checkpoint.compressed_layers import pack_int8, read_int8, read_int8_weight
from explorer.checkpoint.manifest import CheckpointError
from explorer.pruning import prune


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 16))


@pytest.fixture
def quantized():
    net = _net()
    calib = [torch.randn(256, 128)]
    result = prune(
        net, "sparsegpt", "2:4", calibration=calib, quantize="int8", group_size=32, progress=False
    )
    return net, result


def test_round_trip_is_bit_identical_and_takes_one_byte_a_kept_value(tmp_path, quantized):
    net, result = quantized
    path = tmp_path / "q.safetensors"
    report = save_sparse(net, path, result, progress=False)
    manifest = report.manifest
    layer = manifest["layers"]["0"]
    assert layer["quantize"] == "int8" and layer["group_size"] == 32
    assert manifest["tensors"]["0.weight::codes"]["dtype"] == "int8"
    assert manifest["tensors"]["0.weight::codes"]["shape"] == [64, 64]
    assert "0.weight::values" not in manifest["tensors"]
    # 8 bits a kept value (4 a weight) + 1 of positions + 32/32 of scales
    assert [r.bits_per_weight for r in report.sparse_layers] == [6.0, 6.0]
    assert "2:4 int8" in str(check_file(path))
    fresh = load_sparse(path, _net(1), progress=False)
    for a, b in zip(fresh.parameters(), net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_bfloat16_model_round_trips_too(tmp_path):
    net = _net()
    calib = [torch.randn(256, 128)]
    result = prune(
        net, "sparsegpt", "2:4", calibration=calib, quantize="int8", group_size=64, progress=False
    )
    net = net.to(torch.bfloat16)  # each kept weight now bfloat16(code * scale)
    path = tmp_path / "b.safetensors"
    report = save_sparse(net, path, result, progress=False)
    assert [r.bits_per_weight for r in report.sparse_layers] == [5.5, 5.5]
    fresh = load_sparse(path, _net(1).to(torch.bfloat16), progress=False)
    for a, b in zip(fresh.parameters(), net.parameters(), strict=True):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)


def test_weights_off_the_grid_are_refused(tmp_path, quantized):
    net, result = quantized
    with torch.no_grad():
        kept = result.masks["0"]
        net[0].weight[kept] *= 1.001
    with pytest.raises(CheckpointError, match="no longer on the grid"):
        save_sparse(net, tmp_path / "bad.safetensors", result, progress=False)
    assert not (tmp_path / "bad.safetensors").exists()


def test_fp8_on_top_of_an_int8_layer_is_refused_and_nothing_is_written(tmp_path, quantized):
    net, result = quantized
    with pytest.raises(ValueError, match="quantized to int8 while pruning"):
        save_sparse(net, tmp_path / "f.safetensors", result, quantize="float8_e4m3fn")
    assert not (tmp_path / "f.safetensors").exists()


def test_the_manifest_schema_takes_int8_with_a_group_size_only(tmp_path, quantized):
    from explorer.checkpoint.manifest_schema import validate_checkpoint_manifest

    net, result = quantized
    report = save_sparse(net, tmp_path / "q.safetensors", result, progress=False)
    manifest = json.loads(json.dumps(report.manifest))
    validate_checkpoint_manifest(manifest, "m")
    manifest["layers"]["0"]["group_size"] = 48
    with pytest.raises(CheckpointError, match="group_size"):
        validate_checkpoint_manifest(manifest, "m")
    del manifest["layers"]["0"]["group_size"]
    with pytest.raises(CheckpointError, match="group_size"):
        validate_checkpoint_manifest(manifest, "m")


def test_changed_scale_bytes_are_refused_by_their_checksum(tmp_path, quantized):
    from safetensors import safe_open
    from safetensors.torch import save_file

    net, result = quantized
    path = tmp_path / "q.safetensors"
    save_sparse(net, path, result, progress=False)
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    tensors["0.weight::scales"] = tensors["0.weight::scales"] * 2
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(CheckpointError, match="checksum"):
        load_sparse(path, _net(1), progress=False)


def _parts():
    w = torch.tensor([[0.0, 0.5, 0.0, -1.0, 2.0, 0.0, 0.0, 4.0]])
    codes, scales = pack_int8("fc", w, torch.tensor([[0.5, 1.0 / 16]]), 4)
    layer = {"param": "w", "shape": [1, 8], "quantize": "int8", "group_size": 4}
    raw = {"w::codes": codes.values, "w::positions": codes.metadata, "w::scales": scales}
    return w, layer, raw


def test_stored_parts_rebuild_the_weight_exactly():
    w, layer, raw = _parts()
    assert torch.equal(read_int8("fc", layer, raw, "m"), w)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda raw: raw.update({"w::scales": raw["w::scales"] * 0}),
            "scales must be finite and positive",
        ),
        (
            lambda raw: raw.update({"w::scales": raw["w::scales"][:, :1]}),
            r"float32 tensor of shape \(1, 2\)",
        ),
        (lambda raw: raw.update({"w::scales": raw["w::scales"].double()}), "float64"),
        (lambda raw: raw.update({"w::codes": raw["w::codes"].float()}), "do not fit"),
        (lambda raw: raw["w::codes"].__setitem__((0, 0), -128), "-128"),
        (lambda raw: raw.pop("w::scales"), "missing"),
        (
            lambda raw: raw.update({"w::positions": raw["w::positions"] * 0 + 0xFF}),
            "invalid position pair",
        ),
    ],
)
def test_bad_parts_are_refused_with_the_layer_named(change, message):
    _, layer, raw = _parts()
    change(raw)
    with pytest.raises(CheckpointError, match=message) as err:
        read_int8("fc", layer, raw, "m")
    assert "'fc'" in str(err.value)


def test_read_int8_weight_gives_the_stored_codes_and_scales_exactly(tmp_path, quantized):
    from safetensors.torch import load_file

    from explorer.lowbit import Int8Weight

    net, result = quantized
    path = tmp_path / "q.safetensors"
    report = save_sparse(net, path, result, progress=False)
    raw = load_file(path)
    layer = report.manifest["layers"]["0"]
    weight = read_int8_weight("0", layer, raw, str(path))
    assert isinstance(weight, Int8Weight) and weight.codes.dtype == torch.int8
    assert torch.equal(weight.scales, result.scales["0"].float())
    assert torch.equal(weight.decompress(), read_int8("0", layer, raw, str(path)))
    assert torch.equal(weight.decompress(), net[0].weight.detach())
    bad = {**raw, "0.weight::codes": raw["0.weight::codes"].clone().fill_(-128)}
    with pytest.raises(CheckpointError, match="-128"):
        read_int8_weight("0", layer, bad, str(path))
