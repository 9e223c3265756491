"""Int4Linear's pure parts and sparsify(dtype="int4") where no GPU is needed (CPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.gpu import sparsify
from explorer.gpu.modules.torch_int4 import torch_int4_parts, torch_int4_takes
from explorer.lowbit import compress_int4
from explorer.masks import make_mask


def _int4(rows=64, k=256, group=128, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, k, generator=gen)
    return compress_int4(w * make_mask(w, "2:4"), group)


def _unpacked(packed: torch.Tensor) -> torch.Tensor:
    rows = packed.shape[0]
    return torch.stack([packed >> 4, packed & 0xF], dim=-1).reshape(rows, -1).to(torch.int32)


def test_torch_parts_hold_the_same_codes_and_scales():
    weight = _int4()
    packed, scales_and_zeros = torch_int4_parts(weight)
    assert packed.dtype == torch.uint8 and packed.shape == (64, 128)
    assert scales_and_zeros.dtype == torch.bfloat16 and scales_and_zeros.shape == (2, 64, 2)
    codes = _unpacked(packed) - 8  # the 2:4 zeros are the code 0 like any other
    per_column = weight.scales.repeat_interleave(128, dim=1)
    assert torch.equal(codes.float() * per_column, weight.decompress())
    assert torch.equal(scales_and_zeros[..., 1], torch.zeros(2, 64, dtype=torch.bfloat16))
    assert codes.abs().max() <= 7


def test_torch_cpu_int4_kernel_computes_the_same_product():
    """torch's own int4 kernel (its CPU build) reads the parts as the dequantized weight."""
    weight = _int4(rows=128, k=512, seed=1)
    packed, scales_and_zeros = torch_int4_parts(weight)
    w = torch.ops.aten._convert_weight_to_int4pack_for_cpu(_unpacked(packed), 8)
    x = torch.randn(7, 512, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, w, 128, scales_and_zeros)
    ref = x.double() @ weight.decompress().double().t()
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-2  # bf16 scales and output


@pytest.mark.parametrize(
    ("shape", "group", "dtype", "match"),
    [
        ((4096, 4096), 128, torch.float16, "bfloat16 activations, not float16"),
        ((4100, 4096), 128, torch.bfloat16, "multiple of 8, got 4100"),
        ((4096, 4000), 128, torch.bfloat16, "multiple of 128, got 4000"),
        ((4096, 4096), 512, torch.bfloat16, "not 512"),
    ],
)
def test_torch_kernel_refusals_name_the_value(shape, group, dtype, match):
    assert match in torch_int4_takes(*shape, group, dtype)


def test_int4_on_a_cpu_model_keeps_every_layer_with_its_reason():
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 256))
    before = [p.detach().clone() for p in model.parameters()]
    report = sparsify(model, dtype="int4", tokens=(16,))
    assert report.swapped == [] and report.dtype == "int4"
    assert all("CUDA" in why for _, why in report.skipped) and len(report.skipped) == 2
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert type(model[0]) is nn.Linear


def test_int4_with_another_backend_is_refused():
    with pytest.raises(ValueError, match="leave backend out"):
        sparsify(nn.Linear(64, 64), dtype="int4", backend="torch")


def test_int4_scales_without_int4_are_refused():
    model = nn.Sequential(nn.Linear(256, 128))
    with pytest.raises(ValueError, match="int4_scales are for dtype='int4'"):
        sparsify(model, int4_scales={"0": torch.ones(128, 2)})


def test_int8_weights_on_a_cpu_model_keeps_every_layer_with_its_reason():
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 256))
    report = sparsify(model, dtype="int8-weights", tokens=(16,))
    assert report.swapped == [] and report.dtype == "int8-weights"
    assert all("CUDA" in why for _, why in report.skipped) and len(report.skipped) == 2
    with pytest.raises(ValueError, match="dtype='int8-weights' runs the explorer's own kernels"):
        sparsify(nn.Linear(64, 64), dtype="int8-weights", backend="torch")


def test_int4_linear_refuses_an_unknown_code_format():
    from explorer.gpu.modules.int4_linear import Int4Linear

    with pytest.raises(ValueError, match="fmt = 'int2'"):
        Int4Linear.from_linear(nn.Linear(128, 16).to("meta"), fmt="int2")
