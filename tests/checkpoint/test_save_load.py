"""save_sparse / load_sparse round trips: bit-exact weights, identical outputs, compressed size."""

from __future__ import annotations

import json
import pickle
import threading

import pytest
import torch
from safetensors import safe_open
from torch import nn

import explorer
from conftest import llama_config
from explorer.checkpoint import (
    CheckpointCancelled,
    CheckpointError,
    load_sparse,
    save_sparse,
    verify_checkpoint,
)
from explorer.checkpoint.manifest import METADATA_KEY


def _same_state(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert sa[name].dtype == sb[name].dtype, name
        assert torch.equal(sa[name], sb[name]), name


def _stored_ratio(path, param: str) -> float:
    """Bytes of a compressed weight's two tensors in the file over its dense bytes."""
    with safe_open(str(path), "pt") as f:
        values = f.get_tensor(param + "::values")
        positions = f.get_tensor(param + "::positions")
    rows, half = values.shape
    dense = rows * half * 2 * values.element_size()
    return (values.numel() * values.element_size() + positions.numel()) / dense


def test_digits_round_trip_fp16(tmp_path, digits_bundle_factory):
    bundle = digits_bundle_factory()
    bundle.model.half()
    result = explorer.prune(
        bundle.model, "magnitude", "2:4", filter_fn=bundle.filter_fn, progress=False
    )
    path = tmp_path / "digits.safetensors"
    report = save_sparse(bundle, path, result, provenance={"data": "digits"}, progress=False)
    assert [r.stored for r in report.layers] == ["2:4", "2:4", "dense"]
    assert "not 2:4" in report.skipped["4"]
    for param in ("0.weight", "2.weight"):
        assert _stored_ratio(path, param) < 0.60
    assert report.sparse_ratio == pytest.approx(9 / 16)
    # into a fresh model of the same architecture
    fresh = digits_bundle_factory().model.half()
    loaded = load_sparse(path, fresh, progress=False)
    assert loaded is fresh
    _same_state(bundle.model, fresh)
    x = bundle.calibration(64)[0].half()
    assert torch.equal(bundle.model(x), fresh(x))
    # and rebuilt from the manifest alone (the bundle's name is recorded)
    rebuilt = load_sparse(path, progress=False)
    _same_state(bundle.model, rebuilt)
    assert repr(report).startswith("CheckpointReport(digits.safetensors: 2 of 3 layers 2:4")
    assert "<table" in report._repr_html_()


def test_all_sparse_fp16_file_is_under_60_percent_of_dense(tmp_path):
    from safetensors.torch import save_file

    net = nn.Sequential(nn.Linear(256, 512, bias=False), nn.Linear(512, 256, bias=False)).half()
    explorer.prune(net, "magnitude", "2:4", progress=False)
    sparse = tmp_path / "sparse.safetensors"
    dense = tmp_path / "dense.safetensors"
    save_sparse(net, sparse, progress=False)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(dense))
    assert sparse.stat().st_size < 0.60 * dense.stat().st_size


def test_minilm_round_trip(tmp_path, minilm_factory):
    bundle = minilm_factory()
    result = explorer.prune(
        bundle.model, "magnitude", "2:4", filter_fn=bundle.filter_fn, progress=False
    )
    path = tmp_path / "minilm.safetensors"
    report = save_sparse(bundle, path, result, progress=False)
    assert len(report.sparse_layers) == len(result.layers) == 36
    fresh = minilm_factory().model
    load_sparse(path, fresh, progress=False)
    _same_state(bundle.model, fresh)
    batch = bundle.calibration(8)[0]
    assert torch.equal(bundle.model(**batch), fresh(**batch))
    # the same layers in 16 bits are stored in under 60% of their dense bytes
    bundle.model.half()
    half = save_sparse(bundle.model, tmp_path / "half.safetensors", progress=False)
    assert all(r.ratio < 0.60 for r in half.sparse_layers)


def test_llama_round_trip_into_from_config(tmp_path, tiny_llama, token_ids):
    transformers = pytest.importorskip("transformers")
    with pytest.warns(UserWarning, match="shared with model.embed_tokens.weight"):
        result = explorer.prune(tiny_llama, "magnitude", "2:4", progress=False)
    path = tmp_path / "llama.safetensors"
    report = save_sparse(tiny_llama, path, result, progress=False)
    assert report.skipped == {
        "lm_head": "weight shared with model.embed_tokens.weight (stored once, dense)"
    }
    assert len(report.sparse_layers) == 14
    assert all(r.ratio < 0.60 for r in report.sparse_layers)
    fresh = transformers.AutoModelForCausalLM.from_config(llama_config(), dtype=torch.bfloat16)
    fresh.eval()
    load_sparse(path, fresh, progress=False)
    _same_state(tiny_llama, fresh)
    assert fresh.lm_head.weight.data_ptr() == fresh.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        assert torch.equal(tiny_llama(token_ids).logits, fresh(token_ids).logits)
    rebuilt = load_sparse(path, progress=False)
    assert type(rebuilt) is type(tiny_llama)
    with torch.no_grad():
        assert torch.equal(tiny_llama(token_ids).logits, rebuilt(token_ids).logits)


def test_manifest_records_pruning_layers_and_provenance(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 30), nn.Linear(30, 8))
    calib = [torch.randn(16, 32) for _ in range(2)]
    result = explorer.prune(
        net,
        "wanda",
        "2:4",
        calibration=calib,
        filter_fn=lambda m, fqn: fqn == "0",
        progress=False,
    )
    path = tmp_path / "net.safetensors"
    save_sparse(net, path, result, provenance={"seed": 0}, progress=False)
    with safe_open(str(path), "pt") as f:
        manifest = json.loads(f.metadata()[METADATA_KEY])
    layer = manifest["layers"]["0"]
    assert layer["stored"] == "2:4" and layer["valid_24"] is True
    assert layer["pruning"]["method"] == "wanda"
    assert layer["pruning"]["calibration_batches"] == 2
    assert layer["pruning"]["error"] >= 0
    assert len(layer["sha256"]) == 64
    assert manifest["skipped"]["2"].startswith("not 2:4")
    assert manifest["skipped"]["3"] == "in_features=30 is not a multiple of 4"
    assert manifest["pruning"]["method"] == "wanda" and manifest["provenance"] == {"seed": 0}
    assert set(manifest["tensors"]) == {
        "0.weight::values",
        "0.weight::positions",
        "0.bias",
        "2.weight",
        "2.bias",
        "3.weight",
        "3.bias",
    }
    assert all(len(t["sha256"]) == 64 for t in manifest["tensors"].values())


def test_filter_fn_keeps_layers_dense(tmp_path):
    net = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    explorer.prune(net, "magnitude", "2:4", progress=False)
    report = save_sparse(
        net, tmp_path / "n.safetensors", filter_fn=lambda m, fqn: fqn == "0", progress=False
    )
    assert [r.stored for r in report.layers] == ["2:4", "dense"]
    assert report.skipped == {"1": "left out by filter_fn"}


def test_layer_no_longer_24_is_refused_at_save(tmp_path):
    net = nn.Sequential(nn.Linear(16, 8))
    result = explorer.prune(net, "magnitude", "2:4", progress=False)
    with torch.no_grad():
        net[0].weight[3, 4:8] = 1.0  # e.g. fine-tuned without the masks
    path = tmp_path / "n.safetensors"
    with pytest.raises(CheckpointError, match=r"'0' was pruned to 2:4 but is no longer 2:4: 1 of"):
        save_sparse(net, path, result, progress=False)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_wrong_architecture_leaves_the_model_untouched(tmp_path):
    net = nn.Sequential(nn.Linear(16, 8))
    explorer.prune(net, "magnitude", "2:4", progress=False)
    path = tmp_path / "n.safetensors"
    save_sparse(net, path, progress=False)
    other = nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 4))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"model has tensors the file lacks \['1.bias'"):
        load_sparse(path, other, progress=False)
    wider = nn.Sequential(nn.Linear(32, 8))
    with pytest.raises(CheckpointError, match=r"'0.weight' is \[8, 16\] in .* but \[8, 32\]"):
        load_sparse(path, wider, progress=False)
    for k, v in other.state_dict().items():
        assert torch.equal(v, before[k])


def test_lossy_dtype_is_refused_and_widening_is_exact(tmp_path):
    net = nn.Sequential(nn.Linear(16, 8))
    explorer.prune(net, "magnitude", "2:4", progress=False)
    path = tmp_path / "n.safetensors"
    save_sparse(net, path, progress=False)
    with pytest.raises(CheckpointError, match=r"float32 in .* but the model holds float16"):
        load_sparse(path, nn.Sequential(nn.Linear(16, 8)).half(), progress=False)
    half = nn.Sequential(nn.Linear(16, 8)).half()
    explorer.prune(half, "magnitude", "2:4", progress=False)
    save_sparse(half, path, progress=False, overwrite=True)
    wide = load_sparse(path, nn.Sequential(nn.Linear(16, 8)), progress=False)
    assert torch.equal(wide[0].weight, half[0].weight.float())


def test_plain_model_needs_model_argument(tmp_path):
    net = nn.Sequential(nn.Linear(16, 8))
    path = tmp_path / "n.safetensors"
    save_sparse(net, path, progress=False)
    with pytest.raises(CheckpointError, match=r"stores weights, not code.*model="):
        load_sparse(path, progress=False)
    with pytest.raises(ValueError, match=r"sparse_linear=True .* needs device='cuda'"):
        load_sparse(path, net, sparse_linear=True, progress=False)


def test_cancel_writes_nothing_and_changes_nothing(tmp_path):
    net = nn.Sequential(nn.Linear(16, 8))
    explorer.prune(net, "magnitude", "2:4", progress=False)
    cancel = threading.Event()
    cancel.set()
    path = tmp_path / "n.safetensors"
    with pytest.raises(CheckpointCancelled, match="nothing was written"):
        save_sparse(net, path, cancel=cancel, progress=False)
    assert not path.exists()
    save_sparse(net, path, progress=False)
    other = nn.Sequential(nn.Linear(16, 8))
    before = other[0].weight.clone()
    with pytest.raises(CheckpointCancelled):
        load_sparse(path, other, cancel=cancel, progress=False)
    assert torch.equal(other[0].weight, before)


def test_nothing_is_unpickled(tmp_path, monkeypatch, tiny_llama, token_ids):
    with pytest.warns(UserWarning, match="shared"):
        explorer.prune(tiny_llama, "magnitude", "2:4", progress=False)
    path = tmp_path / "llama.safetensors"
    save_sparse(tiny_llama, path, progress=False)

    def refuse(*args, **kwargs):
        raise AssertionError("pickle was used")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    fresh = load_sparse(path, progress=False)
    with torch.no_grad():
        assert torch.equal(tiny_llama(token_ids).logits, fresh(token_ids).logits)
    assert verify_checkpoint(path).file_bytes == path.stat().st_size


def test_bad_arguments_name_the_value(tmp_path):
    with pytest.raises(TypeError, match=r"torch\.nn\.Module or a ModelBundle, got str"):
        save_sparse("model", tmp_path / "x.safetensors")
    with pytest.raises(FileNotFoundError, match="does not exist; create it first"):
        save_sparse(nn.Linear(4, 4), tmp_path / "missing" / "x.safetensors")
    with pytest.raises(CheckpointError, match="provenance must be JSON"):
        save_sparse(nn.Linear(4, 4), tmp_path / "x.safetensors", provenance={"f": object()})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_sparse(tmp_path / "nope.safetensors", nn.Linear(4, 4))
