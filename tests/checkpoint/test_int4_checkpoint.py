"""2:4 + int4 layers in a sparse checkpoint: stored as codes, positions and scales, bit-exact."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from explorer.checkpoint import load_sparse, save_sparse
from explorer.checkpoint.check import check_file
from explorer.checkpoint.manifest import CheckpointError
from explorer.pruning import prune


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 16))


@pytest.fixture(params=[None, "admm"], ids=["joint", "joint+admm"])
def quantized(request):
    net = _net()
    calib = [torch.randn(256, 128)]
    result = prune(net, "sparsegpt", "2:4", calibration=calib, quantize="int4", group_size=32,
                   update=request.param, progress=False)  # fmt: skip
    return net, result


def test_round_trip_is_bit_identical(tmp_path, quantized):
    net, result = quantized
    path = tmp_path / "q.safetensors"
    report = save_sparse(net, path, result, progress=False)
    manifest = report.manifest
    layer = manifest["layers"]["0"]
    assert layer["quantize"] == "int4" and layer["group_size"] == 32
    assert {"0.weight::codes", "0.weight::positions", "0.weight::scales"} <= set(
        manifest["tensors"]
    )
    assert "0.weight::values" not in manifest["tensors"]
    assert manifest["pruning"]["quantize"] == "int4"
    # 2 bits of codes + 1 of positions + 32/32 of scales
    assert [r.bits_per_weight for r in report.sparse_layers] == [4.0, 4.0]
    assert "bits/weight" in str(check_file(path))
    fresh = load_sparse(path, _net(1), progress=False)
    for a, b in zip(fresh.parameters(), net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_weights_off_the_grid_are_refused(tmp_path, quantized):
    net, result = quantized
    with torch.no_grad():
        kept = result.masks["0"]
        net[0].weight[kept] *= 1.001
    with pytest.raises(CheckpointError, match="no longer on the grid"):
        save_sparse(net, tmp_path / "bad.safetensors", result, progress=False)
    assert not (tmp_path / "bad.safetensors").exists()


def test_bad_group_size_in_manifest_is_refused(tmp_path, quantized):
    from explorer.checkpoint.manifest_schema import validate_checkpoint_manifest

    net, result = quantized
    report = save_sparse(net, tmp_path / "q.safetensors", result, progress=False)
    manifest = json.loads(json.dumps(report.manifest))
    manifest["layers"]["0"]["group_size"] = 48
    with pytest.raises(CheckpointError, match="group_size"):
        validate_checkpoint_manifest(manifest, "m")
    manifest["layers"]["0"]["group_size"] = 32
    manifest["layers"]["0"]["quantize"] = "int3"
    with pytest.raises(CheckpointError, match="quantize"):
        validate_checkpoint_manifest(manifest, "m")


def test_int4_parts_are_read_as_stored(tmp_path, quantized):
    from explorer.checkpoint import read_int4_weights

    net, result = quantized
    path = tmp_path / "q.safetensors"
    save_sparse(net, path, result, progress=False)
    weights = read_int4_weights(path)
    assert sorted(weights) == ["0", "2"]
    for fqn, weight in weights.items():
        layer = net[int(fqn)]
        assert weight.group_size == 32 and tuple(weight.shape) == tuple(layer.weight.shape)
        assert torch.equal(weight.decompress().to(layer.weight.dtype), layer.weight.detach())
        assert torch.equal(weight.scales, result.scales[fqn].float())


def test_int4_parts_with_changed_bytes_are_refused(tmp_path, quantized):
    from safetensors import safe_open
    from safetensors.torch import save_file

    from explorer.checkpoint import read_int4_weights

    net, result = quantized
    path = tmp_path / "q.safetensors"
    save_sparse(net, path, result, progress=False)
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    tensors["0.weight::scales"] = tensors["0.weight::scales"] * 2
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(CheckpointError, match="checksum"):
        read_int4_weights(path)
