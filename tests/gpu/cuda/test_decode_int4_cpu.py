"""The int4 decode kernel's CPU side: packing checks, launch configurations, argument checks,
and the float32 reference against hand-computed and dense dequantized products (no GPU)."""

from __future__ import annotations

import pytest
import torch

from explorer.gpu.cuda.decode_int4 import (
    Int4DecodeCall,
    decode_int4_matmul,
    decode_int4_reference,
    pack_int4_weight,
    pack_int8_weight,
)
from explorer.lowbit import Int4Weight, Int8Weight, compress_int4, compress_int8
from explorer.masks import make_mask


def _pruned(rows: int, k: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, k, generator=gen)
    return w.masked_fill(~make_mask(w, "2:4"), 0)


# -- the reference --------------------------------------------------------------------------------
def test_reference_hand_computed_two_groups():
    # group 1 (columns 0-127): kept 2 and -7 in every 2:4 group, scale 7 / 7 = 1
    # group 2 (columns 128-255): kept 3.5 and 0.5, scale 3.5 / 7 = 0.5, codes 7 and 1
    w = torch.tensor([[0.0, 2.0, 0.0, -7.0] * 32 + [3.5, 0.0, 0.0, 0.5] * 32])
    packed = pack_int4_weight(w)
    assert packed.scales.tolist() == [[1.0, 0.5]]
    x = torch.ones(1, 256)
    # 32 * (2 - 7) + 32 * (3.5 + 0.5) = -160 + 128
    assert decode_int4_reference(x, packed).tolist() == [[-32.0]]
    x2 = torch.zeros(2, 256)
    x2[0, 1] = 1.0  # picks the kept 2 at column 1
    x2[1, 128] = 2.0  # 2 * 3.5
    bias = torch.tensor([0.25])
    assert decode_int4_reference(x2, packed, bias).tolist() == [[2.25], [7.25]]


def test_reference_equals_dense_dequantized_product():
    w = _pruned(48, 512, seed=1)
    packed = pack_int4_weight(w, group_size=256)
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(2))
    bias = torch.randn(48, generator=torch.Generator().manual_seed(3))
    ref = x.double() @ packed.decompress().double().t() + bias.double()
    y = decode_int4_reference(x, packed, bias)
    assert y.dtype == torch.float32 and y.shape == (5, 48)
    assert float((y.double() - ref).abs().max()) < 1e-4 * float(ref.abs().max())


def test_reference_rounds_once_to_the_input_dtype_and_keeps_leading_dims():
    w = _pruned(16, 256, seed=4)
    packed = pack_int4_weight(w)
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    y = decode_int4_reference(x, packed)
    exact = (x.float().reshape(6, 256) @ packed.decompress().t()).reshape(2, 3, 16)
    assert y.dtype == torch.bfloat16 and y.shape == (2, 3, 16)
    assert torch.equal(y, exact.to(torch.bfloat16))


# -- packing --------------------------------------------------------------------------------------
def test_pack_keeps_the_lowbit_layout():
    w = _pruned(32, 384, seed=6)
    direct = compress_int4(w, group_size=128)
    packed = pack_int4_weight(direct)
    for a, b in ((packed.codes, direct.codes), (packed.metadata, direct.metadata)):
        assert a.is_contiguous() and torch.equal(a, b)
    assert torch.equal(packed.scales, direct.scales) and packed.group_size == 128
    assert torch.equal(
        pack_int4_weight(w).codes, direct.codes
    )  # a dense tensor is compressed first


@pytest.mark.parametrize(
    ("k", "group", "match"),
    [
        (96, 128, "K = 96 is not a multiple of 128"),
        (192, 64, "K = 192 is not a multiple of 128"),
        (256, 16, "group_size = 16 with K = 256: expected 32, 64 or a multiple of 128"),
        (384, 256, "group_size = 256 with K = 384"),
    ],
)
def test_pack_refuses_what_the_kernel_cannot_read(k, group, match):
    with pytest.raises(ValueError, match=match) as info:
        pack_int4_weight(torch.zeros(16, k), group_size=group)
    assert "Hint" in str(info.value)


@pytest.mark.parametrize("group", [32, 64])
def test_pack_takes_groups_of_32_and_64_columns(group):
    w = compress_int4(_pruned(16, 256), group_size=group)
    packed = pack_int4_weight(w)
    assert packed.group_size == group and torch.equal(packed.scales, w.scales)
    with pytest.raises(ValueError, match="group_size = 96 with K = 384"):
        pack_int4_weight(compress_int4(_pruned(16, 384), group_size=96))


@pytest.mark.parametrize("nibble", [0x0, 0x5, 0x1, 0x6])  # i0 == i1, or i0 > i1
def test_pack_refuses_unordered_positions(nibble):
    good = compress_int4(_pruned(16, 128))
    meta = good.metadata.clone()
    meta[3, 5] = (meta[3, 5] & 0xF0) | nibble
    bad = Int4Weight(good.codes, meta, good.scales, good.shape, good.group_size)
    with pytest.raises(ValueError, match=r"metadata byte \(3, 5\)"):
        pack_int4_weight(bad)


def test_pack_refuses_other_types():
    with pytest.raises(TypeError, match="Int4Weight"):
        pack_int4_weight([[1.0, 0.0, 0.0, 0.0]])


def test_int8_pack_and_reference():
    w = _pruned(16, 256, seed=5)
    p = pack_int8_weight(w)
    assert isinstance(p, Int8Weight) and p.codes.dtype == torch.int8
    assert torch.equal(p.decompress(), compress_int8(w).decompress())
    x = torch.randn(3, 256)
    ref = decode_int4_reference(x, p)
    torch.testing.assert_close(ref, x @ p.decompress().T, rtol=1e-6, atol=1e-5)
    with pytest.raises(TypeError, match="Int8Weight or a 2:4 tensor, got Int4Weight"):
        pack_int8_weight(pack_int4_weight(w))
    with pytest.raises(ValueError, match="the int8 decode kernel cannot read this weight: K = 96"):
        pack_int8_weight(torch.zeros(16, 96))


# -- argument checks (they run before anything needs a GPU) ---------------------------------------
def test_matmul_needs_a_cuda_device():
    packed = pack_int4_weight(_pruned(16, 128))
    with pytest.raises(ValueError, match="one CUDA device"):
        decode_int4_matmul(torch.randn(1, 128), packed)
    with pytest.raises(TypeError, match="Int4Weight"):
        decode_int4_matmul(torch.randn(1, 128), _pruned(16, 128))


def test_call_checks_its_arguments():
    packed = pack_int4_weight(_pruned(16, 128))
    with pytest.raises(ValueError, match="1 to 64 rows"):
        Int4DecodeCall(packed, None, 65, torch.bfloat16)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        Int4DecodeCall(packed, None, 1, torch.float32)
    with pytest.raises(ValueError, match="one CUDA device"):
        Int4DecodeCall(packed, None, 1, torch.bfloat16)
