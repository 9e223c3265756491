"""2:4 + group-wise int4 and int8: packing round trips, layout, exact decompress, matmul, errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.groupquant import quantize_rtn
from explorer.lowbit import (
    Int4Weight,
    Int8Weight,
    compress_int4,
    compress_int8,
    int4_reference,
    pack_int4,
    unpack_int4,
)
from explorer.masks import make_mask


def _pruned(w):
    return w.masked_fill(~make_mask(w, "2:4"), 0)


def test_pack_hand_computed():
    # 1 -> 0x1, -2 -> 0xE: byte 0xE1 = 225; 7 -> 0x7, -7 -> 0x9: byte 0x97 = 151
    packed = pack_int4(torch.tensor([[1, -2, 7, -7]]))
    assert packed.dtype == torch.uint8 and packed.tolist() == [[225, 151]]
    assert unpack_int4(packed).tolist() == [[1, -2, 7, -7]]


@given(st.lists(st.integers(-8, 7), min_size=0, max_size=40).filter(lambda v: len(v) % 2 == 0))
def test_pack_round_trip(values):
    codes = torch.tensor(values, dtype=torch.int8).reshape(1, -1)
    assert torch.equal(unpack_int4(pack_int4(codes)), codes)


def test_pack_refuses_out_of_range_and_odd():
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(torch.tensor([[8, 0]]))
    with pytest.raises(ValueError, match="even"):
        pack_int4(torch.tensor([[1, 2, 3]]))


def test_hand_computed_int4_layout():
    w = torch.tensor([[0.0, 3.0, 0.0, -7.0, 14.0, 0.0, 0.0, 0.0]])
    c = compress_int4(w, group_size=4)
    assert c.int_codes().tolist() == [[3, -7, 7, 0]]
    assert c.scales.tolist() == [[1.0, 2.0]]
    assert c.codes.tolist() == [[3 | (9 << 4), 7]]
    assert c.metadata.tolist() == [[13 | 4 << 4]]
    assert torch.equal(c.decompress(), w)


@settings(deadline=None, max_examples=30)
@given(
    rows=st.integers(1, 6),
    groups=st.integers(1, 4),
    g=st.sampled_from([4, 8, 16]),
    seed=st.integers(0, 99),
)
def test_random_round_trip_equals_rtn(rows, groups, g, seed):
    k = groups * 16
    w = _pruned(torch.randn(rows, k, generator=torch.Generator().manual_seed(seed)))
    c = compress_int4(w, group_size=g)
    deq, scales = quantize_rtn(w, w != 0, "int4", g)
    assert torch.equal(c.scales, scales)
    assert torch.equal(c.decompress(), deq)
    codes = c.int_codes()
    assert int(codes.abs().max()) <= 7
    # packing round-trips the int codes exactly and rebuilding from parts is identical
    assert torch.equal(unpack_int4(pack_int4(codes)), codes)
    again = Int4Weight.from_parts(c.codes, c.metadata, c.scales, c.shape, g)
    assert torch.equal(again.decompress(), c.decompress())
    # an on-grid weight compresses to itself with its own scales
    assert torch.equal(compress_int4(deq, g, scales=scales).decompress(), deq)


@settings(deadline=None, max_examples=20)
@given(rows=st.lists(st.integers(1, 5), min_size=2, max_size=3), seed=st.integers(0, 99))
def test_stacked_rows_compress_to_the_parts_codes_and_scales(rows, seed):
    # why sparsify(dtype="int4") may stack q/k/v or gate/up: groups run along a row
    gen = torch.Generator().manual_seed(seed)
    parts = [_pruned(torch.randn(r, 32, generator=gen)) for r in rows]
    alone = [compress_int4(p, group_size=8) for p in parts]
    stacked = compress_int4(torch.cat(parts), group_size=8)
    for name in ("codes", "metadata", "scales"):
        assert torch.equal(getattr(stacked, name), torch.cat([getattr(a, name) for a in alone]))
    recorded = [a.scales * 1.5 for a in alone]  # scales a joint pruning recorded, stacked too
    with_scales = compress_int4(torch.cat(parts), group_size=8, scales=torch.cat(recorded))
    one_by_one = [compress_int4(p, 8, scales=r) for p, r in zip(parts, recorded, strict=True)]
    assert torch.equal(with_scales.codes, torch.cat([o.codes for o in one_by_one]))


def test_matmul_and_reference_match_dense():
    gen = torch.Generator().manual_seed(0)
    w = _pruned(torch.randn(24, 256, generator=gen))
    c = compress_int4(w, group_size=128)
    x = torch.randn(3, 5, 256, generator=gen)
    bias = torch.randn(24, generator=gen)
    dense = x @ c.decompress().T + bias
    torch.testing.assert_close(int4_reference(x, c, bias), dense, rtol=0, atol=0)
    torch.testing.assert_close(c.matmul(x) + bias, dense, rtol=1e-5, atol=1e-4)


def test_bits_per_weight_and_repr():
    c = compress_int4(_pruned(torch.randn(8, 256)), group_size=128)
    assert c.bits_per_weight == pytest.approx(3.25)
    assert c.nbytes == 8 * (64 + 32 + 2 * 4)
    assert "3.25 bits/weight" in repr(c) and "\n" not in repr(c)
    assert "bits per weight" in c._repr_html_()
    assert compress_int4(torch.zeros(0, 8), group_size=8).decompress().shape == (0, 8)


@pytest.mark.parametrize(
    ("weight", "group", "match"),
    [
        (torch.tensor([[float("nan"), 0.0, 0.0, 1.0]]), 4, "NaN or Inf"),
        (torch.tensor([[float("inf"), 0.0, 0.0, 1.0]]), 4, "NaN or Inf"),
        (torch.zeros(2, 12), 8, "does not divide K=12"),
        (torch.zeros(2, 6), 4, "not a multiple of 4"),
        (torch.zeros(2, 8), 6, "multiple of 4"),
        (torch.ones(2, 8), 4, "not 2:4"),
    ],
)
def test_bad_input(weight, group, match):
    with pytest.raises(ValueError, match=match):
        compress_int4(weight, group_size=group)


def test_from_parts_refuses_bad_scales_and_shapes():
    c = compress_int4(_pruned(torch.randn(2, 16)), group_size=8)
    for bad, match in [
        (torch.full((2, 2), float("nan")), "finite and positive"),
        (torch.zeros(2, 2), "finite and positive"),
        (torch.ones(2, 3), r"shape \(2, 2\)"),
        (torch.ones(2, 2, dtype=torch.float64), "float32"),
    ]:
        with pytest.raises(ValueError, match=match):
            Int4Weight.from_parts(c.codes, c.metadata, bad, (2, 16), 8)
    with pytest.raises(ValueError, match="-8"):
        Int4Weight.from_parts((c.codes & 0xF0) | 0x8, c.metadata, c.scales, (2, 16), 8)
    with pytest.raises(ValueError, match="codes must be"):
        Int4Weight.from_parts(c.codes[:, :1], c.metadata, c.scales, (2, 16), 8)
    with pytest.raises(ValueError, match="finite and positive"):
        compress_int4(c.decompress(), 8, scales=torch.zeros(2, 2))


# -- int8 -----------------------------------------------------------------------------------------
def test_hand_computed_int8_layout():
    w = torch.tensor([[0.0, 3.0, 0.0, -127.0, 254.0, 0.0, 0.0, -2.0]])
    c = compress_int8(w, group_size=4)
    assert c.codes.dtype == torch.int8 and c.codes.tolist() == [[3, -127, 127, -1]]
    assert c.scales.tolist() == [[1.0, 2.0]]
    assert c.metadata.tolist() == [[13 | 12 << 4]]
    assert torch.equal(c.decompress(), w)
    assert torch.equal(c.int_codes(), c.codes)


@settings(deadline=None, max_examples=30)
@given(
    rows=st.integers(1, 6),
    groups=st.integers(1, 4),
    g=st.sampled_from([4, 8, 16]),
    seed=st.integers(0, 99),
)
def test_random_int8_round_trip_equals_rtn(rows, groups, g, seed):
    k = groups * 16
    w = _pruned(torch.randn(rows, k, generator=torch.Generator().manual_seed(seed)))
    c = compress_int8(w, group_size=g)
    deq, scales = quantize_rtn(w, w != 0, "int8", g)
    assert torch.equal(c.scales, scales)
    assert torch.equal(c.decompress(), deq)
    assert int(c.codes.abs().max()) <= 127
    again = Int8Weight.from_parts(c.codes, c.metadata, c.scales, c.shape, g)
    assert torch.equal(again.decompress(), c.decompress())
    assert torch.equal(compress_int8(deq, g, scales=scales).decompress(), deq)
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(seed + 1))
    torch.testing.assert_close(int4_reference(x, c), x @ deq.T, rtol=0, atol=0)
    torch.testing.assert_close(c.matmul(x), x @ deq.T, rtol=1e-5, atol=1e-4)


def test_int8_is_closer_than_int4_and_its_size():
    w = _pruned(torch.randn(16, 256, generator=torch.Generator().manual_seed(1)))
    err8 = (compress_int8(w).decompress() - w).norm()
    err4 = (compress_int4(w).decompress() - w).norm()
    assert err8 < err4 / 10
    c = compress_int8(w)
    assert c.bits_per_weight == pytest.approx(5.25)
    assert c.nbytes == 16 * (128 + 32 + 2 * 4)
    assert repr(c).startswith("Int8Weight(16x256 2:4 int8, group_size=128, codes (16, 128) int8")
    assert "one code per byte" in c._repr_html_()


def test_int8_from_parts_refuses_bad_codes_and_shapes():
    c = compress_int8(_pruned(torch.randn(2, 16)), group_size=8)
    with pytest.raises(ValueError, match="-128"):
        Int8Weight.from_parts(c.codes.clone().fill_(-128), c.metadata, c.scales, (2, 16), 8)
    with pytest.raises(ValueError, match=r"codes must be a torch.int8 tensor of shape \(2, 8\)"):
        Int8Weight.from_parts(c.codes.view(torch.uint8), c.metadata, c.scales, (2, 16), 8)
    with pytest.raises(ValueError, match="finite and positive"):
        Int8Weight.from_parts(c.codes, c.metadata, c.scales * 0, (2, 16), 8)
    with pytest.raises(ValueError, match="int8 scales need finite values"):
        compress_int8(torch.tensor([[float("nan"), 0.0, 0.0, 1.0]]), 4)
