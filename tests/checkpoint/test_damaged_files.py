"""Corrupted, truncated and altered checkpoints each fail with a clear CheckpointError."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

import explorer
from explorer.checkpoint import CheckpointError, load_sparse, save_sparse, verify_checkpoint
from explorer.checkpoint.manifest import METADATA_KEY, tensor_sha256


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8)).half()
    explorer.prune(net, "magnitude", "2:4", progress=False)
    path = tmp_path / "net.safetensors"
    save_sparse(net, path, progress=False)
    return net, path


def _fresh():
    return nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8)).half()


def _read(path):
    with safe_open(str(path), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        manifest = json.loads(f.metadata()[METADATA_KEY])
    return tensors, manifest


def _write(path, tensors, manifest):
    save_file(tensors, str(path), metadata={METADATA_KEY: json.dumps(manifest), "format": "pt"})


def _fails_untouched(path, match):
    model = _fresh()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=match):
        load_sparse(path, model, progress=False)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed although loading failed"
    with pytest.raises(CheckpointError, match=match):
        verify_checkpoint(path)


def test_good_file_verifies(saved):
    _, path = saved
    assert verify_checkpoint(path).file_bytes == path.stat().st_size


def test_truncated_file(saved):
    _, path = saved
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    _fails_untouched(path, "cannot be read as safetensors .*truncated, damaged")


def test_garbage_file(tmp_path):
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"\x00\x01not a checkpoint" * 20)
    _fails_untouched(path, "cannot be read as safetensors")


def test_flipped_byte_in_the_weights(saved):
    _, path = saved
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the last tensor's bytes
    path.write_bytes(bytes(data))
    _fails_untouched(path, "does not match its checksum: its bytes changed after saving")


def test_plain_safetensors_without_manifest(tmp_path):
    path = tmp_path / "plain.safetensors"
    save_file({"0.weight": torch.zeros(16, 32)}, str(path))
    _fails_untouched(path, "has no sparsity-explorer manifest .* plain safetensors file")


def test_manifest_missing_a_tensor(saved):
    _, path = saved
    tensors, manifest = _read(path)
    del manifest["tensors"]["2.bias"]
    _write(path, tensors, manifest)
    _fails_untouched(path, r"does not match its tensors: .*present but not described \['2.bias'\]")


def test_manifest_shape_does_not_match_tensor(saved):
    _, path = saved
    tensors, manifest = _read(path)
    manifest["tensors"]["2.bias"]["shape"] = [9]
    _write(path, tensors, manifest)
    _fails_untouched(
        path, r"tensor '2.bias' .* is float16 \[8\] but the manifest says float16 \[9\]"
    )


def test_manifest_layer_shape_does_not_fit_compressed_tensors(saved):
    _, path = saved
    tensors, manifest = _read(path)
    manifest["layers"]["0"]["shape"] = [16, 64]
    _write(path, tensors, manifest)
    _fails_untouched(path, "do not fit a 16x64 2:4 weight")


def test_manifest_that_is_not_json(saved):
    _, path = saved
    tensors, _ = _read(path)
    save_file(tensors, str(path), metadata={METADATA_KEY: "{not json", "format": "pt"})
    _fails_untouched(path, "manifest .* is not valid JSON")


def test_layer_positions_no_longer_24(saved):
    """Positions altered (checksums rewritten to match): two values claim the same column."""
    _, path = saved
    tensors, manifest = _read(path)
    positions = tensors["0.weight::positions"].clone()
    positions[2, 1] = 0x55  # both groups: positions (1, 1)
    tensors["0.weight::positions"] = positions
    manifest["tensors"]["0.weight::positions"]["sha256"] = tensor_sha256(positions)
    _write(path, tensors, manifest)
    _fails_untouched(path, r"layer '0' .* is no longer 2:4: 2 groups hold an invalid position pair")


def test_values_edited_with_consistent_tensor_checksum(saved):
    _, path = saved
    tensors, manifest = _read(path)
    values = tensors["0.weight::values"].clone()
    values[0, 0] += 1
    tensors["0.weight::values"] = values
    manifest["tensors"]["0.weight::values"]["sha256"] = tensor_sha256(values)
    _write(path, tensors, manifest)
    _fails_untouched(path, "rebuilds to a weight that does not match the checksum taken when")


def test_other_format_and_version(saved):
    _, path = saved
    tensors, manifest = _read(path)
    _write(path, tensors, {**manifest, "version": 99})
    _fails_untouched(path, "checkpoint version 99; this explorer reads version 1")
    _write(path, tensors, {**manifest, "format": "something-else"})
    _fails_untouched(path, "is not a sparsity-explorer checkpoint")
