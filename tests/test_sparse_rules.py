"""The one home of the 2:4 rules: hand-computed cases, and the callers that read them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from explorer import doctor, make_mask, sparse_rules
from explorer.checks import check_pattern
from explorer.devices import DeviceTarget
from explorer.sparse_rules import (
    alignment_obstacle,
    capability_obstacles,
    dense_multiple,
    dtype_obstacle,
    layer_obstacles,
    min_capability,
    pattern_obstacle,
    sparse_multiple,
    token_multiple,
    why_not_24,
)

FP8 = torch.float8_e4m3fn


@pytest.mark.parametrize(
    ("dtype", "sparse", "dense"),
    [
        (torch.float16, 16, 8),
        (torch.bfloat16, 16, 8),
        (torch.float32, 16, 8),
        (torch.int8, 32, 16),
        (FP8, 32, 16),
    ],
)
def test_the_multiples_of_each_dtype(dtype, sparse, dense):
    assert sparse_multiple(dtype) == sparse and dense_multiple(dtype) == dense
    assert token_multiple(dtype) == sparse and token_multiple(dtype) % dense == 0


def test_capabilities_by_dtype():
    assert min_capability(torch.float16) == min_capability(torch.int8) == (8, 0)
    assert min_capability(FP8) == (8, 9)
    assert capability_obstacles((8, 0), torch.float16) == []
    assert capability_obstacles((9, 0), FP8) == [] and capability_obstacles((8, 9), FP8) == []
    assert [o.code for o in capability_obstacles((8, 0), FP8)] == ["fp8-capability"]
    assert [o.code for o in capability_obstacles((7, 5), torch.int8)] == ["capability"]
    (old,) = capability_obstacles((7, 0), torch.bfloat16, "V100")
    assert "V100" in old.message and "7.0" in old.message and "8.0" in old.message
    assert "A100" in old.fix


def test_alignment_names_the_value_the_multiple_and_a_fix():
    assert alignment_obstacle(4096, 4096, FP8) is None
    assert alignment_obstacle(4112, 4096, torch.bfloat16) is None  # 4112 = 257 x 16
    fp8 = alignment_obstacle(4112, 4096, FP8)  # 4112 is not a multiple of 32
    assert fp8.code == "align"
    assert "multiples of 32" in fp8.message and "out_features=4112" in fp8.message
    assert "in_features" not in fp8.message and "pad the layer to a multiple of 32" in fp8.fix
    both = alignment_obstacle(10, 24, torch.float16)
    assert "out_features=10, in_features=24" in both.message


def test_pattern_and_dtype():
    assert pattern_obstacle(30, None).code == "width"
    assert pattern_obstacle(32, None) is None
    dense = check_pattern(torch.ones(4, 8), "2:4")
    assert "8 of 8 groups" in pattern_obstacle(8, dense).message
    assert pattern_obstacle(8, check_pattern(make_mask(torch.randn(4, 8)).float())) is None
    assert dtype_obstacle(torch.int8) is None and dtype_obstacle(FP8) is None
    assert dtype_obstacle(torch.float64).code == "dtype"


def test_why_not_24_gives_the_first_obstacle_with_its_fix():
    assert why_not_24(4096, 4096, torch.float16, capability=(8, 0)) is None
    assert why_not_24(4096, 4096, FP8, capability=(9, 0)) is None
    assert why_not_24(4096, 4096, FP8) is None  # no GPU named: the capability is not asked
    why = why_not_24(4096, 4096, FP8, capability=(8, 6), device_name="NVIDIA A10")
    assert (
        why.startswith("float8_e4m3fn needs compute capability 8.9+") and "NVIDIA A10 is 8.6" in why
    )
    codes = [o.code for o in layer_obstacles(4112, 30, FP8, capability=(7, 5))]
    assert codes == ["capability", "fp8-capability", "align", "width"]


# --- every caller reads the rules from here: change a rule, and each verdict follows ---


def pruned(out_features, in_features):
    layer = nn.Linear(in_features, out_features, bias=False)
    with torch.no_grad():
        layer.weight.mul_(make_mask(layer.weight))
    return nn.Sequential(layer)


def test_the_doctor_reads_the_alignment_rule(monkeypatch):
    model = pruned(4112, 4096)
    assert doctor(model, tokens=4096, device="H100").verdict("0") == "fast"
    monkeypatch.setattr(sparse_rules, "SPARSE_MULTIPLE_16BIT", 32)
    report = doctor(model, tokens=4096, device="H100")
    assert report.verdict("0") == "unsupported"
    assert any("multiples of 32" in f.message for f in report.reasons("0") if f.code == "align")


def test_the_doctor_reads_the_token_rule(monkeypatch):
    model = pruned(4096, 4096)
    assert "tokens-align" not in {f.code for f in doctor(model, tokens=1000).reasons("0")}
    monkeypatch.setattr(sparse_rules, "DENSE_MULTIPLE_16BIT", 16)
    assert "tokens-align" in {f.code for f in doctor(model, tokens=1000).reasons("0")}


def test_the_doctor_and_devices_read_the_capability_rules(monkeypatch):
    model = pruned(4096, 4096)
    assert doctor(model, tokens=4096, device="A100").verdict("0") == "fast"
    assert doctor(model, dtype="fp8", tokens=4096, device="L4").verdict("0") == "fast"
    monkeypatch.setattr(sparse_rules, "MIN_CAPABILITY", (9, 0))
    monkeypatch.setattr(sparse_rules, "FP8_MIN_CAPABILITY", (10, 0))
    assert doctor(model, tokens=4096, device="A100").verdict("0") == "unsupported"
    assert not DeviceTarget.resolve("A100").supports_24
    fp8 = doctor(model, dtype="fp8", tokens=4096, device="H100")
    assert "fp8-capability" in {n.code for n in fp8.notes}
    assert not DeviceTarget.resolve("H100").supports_fp8


def fake_cuda_linear(out_features, in_features):
    zeros = torch.zeros(out_features, in_features)  # 2:4, read on the CPU
    weight = SimpleNamespace(device=SimpleNamespace(type="cuda"), detach=lambda: zeros)
    return SimpleNamespace(weight=weight, in_features=in_features, out_features=out_features)


def test_sparsify_and_cusparselt_read_the_rules(monkeypatch):
    from explorer.gpu.library import cusparselt
    from explorer.gpu.swap.eligibility import eligibility

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    assert cusparselt.padded_tokens(5, torch.float16) == 16
    assert cusparselt.padded_tokens(5, torch.int8) == 32
    assert eligibility(fake_cuda_linear(4112, 4096), torch.float16) is None
    monkeypatch.setattr(sparse_rules, "SPARSE_MULTIPLE_16BIT", 32)
    assert cusparselt.padded_tokens(5, torch.float16) == 32
    why = eligibility(fake_cuda_linear(4112, 4096), torch.float16)
    assert "alignment" in why and "multiples of 32" in why and "out_features=4112" in why
    monkeypatch.setattr(sparse_rules, "MIN_CAPABILITY", (9, 0))
    why = eligibility(fake_cuda_linear(4096, 4096), torch.float16)
    assert "NVIDIA A100 has compute capability 8.0" in why and "9.0" in why


def test_the_onnx_check_reads_the_alignment_rule(monkeypatch):
    from explorer.checkpoint import onnx_check

    node = SimpleNamespace(name="mm", op_type="MatMul", input=(), metadata_props=())
    nonzero = make_mask(torch.randn(48, 64)).numpy()

    def check():  # one weight's check, without writing an ONNX file
        return onnx_check._check_weight(node, nonzero, "w", ("matmul", 48, 64), torch.float16, 4096)

    assert check().verdict != "dense"
    monkeypatch.setattr(sparse_rules, "SPARSE_MULTIPLE_16BIT", 32)
    assert check().verdict == "dense" and "outputs=48 not a multiple of 32" in check().reasons[0]
