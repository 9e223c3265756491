"""The decode kernel's packing and CPU reference (no GPU needed)."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import mask24

from explorer.compression import compress
from explorer.gpu.cuda.decode import decode_matmul_reference, default_warps, pack


def test_pack_round_trips_exactly():
    for dtype in (torch.float16, torch.bfloat16):
        w = mask24(torch.randn(37, 80)).to(dtype)
        p = pack(w)
        assert p.values.dtype == dtype and p.values.shape == (37, 40)
        assert p.metadata.shape == (37, 10)
        assert torch.equal(p.decompress(), w)


def test_pack_sparser_than_24_round_trips():
    w = mask24(torch.randn(8, 32)).half()
    w[0, :8] = 0  # empty groups: padded with explicit zeros
    w[1, 1::4] = 0  # single nonzeros
    assert torch.equal(pack(w).decompress(), w)


def test_int8_round_trip_within_half_a_step():
    w = mask24(torch.randn(64, 128)).bfloat16()
    p = pack(w, int8=True)
    assert p.values.dtype == torch.int8 and p.scale.shape == (64,)
    step = p.scale[:, None]
    assert bool(((p.decompress() - w.float()).abs() <= step / 2 + 1e-6).all())
    assert bool((p.values.abs() <= 127).all())
    assert p.nbytes == 64 * 64 + 64 * 16 + 64 * 4  # values, metadata, scales


def test_reference_hand_computed():
    # row 0 keeps columns 1 and 3 of group 0 and 4, 6 of group 1; row 1 keeps 0, 2 and 5, 7
    w = torch.tensor(
        [[0.0, 1.0, 0.0, 2.0, 3.0, 0.0, 4.0, 0.0] * 2, [5.0, 0.0, 6.0, 0.0, 0.0, 7.0, 0.0, 8.0] * 2]
    )
    x = torch.arange(16.0)[None]
    got = decode_matmul_reference(x, pack(w.half()), torch.tensor([0.5, -1.0]).half())
    row0 = sum(
        v * c for v, c in zip([1, 2, 3, 4, 1, 2, 3, 4], [1, 3, 4, 6, 9, 11, 12, 14], strict=True)
    )
    row1 = sum(
        v * c for v, c in zip([5, 6, 7, 8, 5, 6, 7, 8], [0, 2, 5, 7, 8, 10, 13, 15], strict=True)
    )
    assert got.tolist() == [[row0 + 0.5, row1 - 1.0]]


@pytest.mark.parametrize("int8", [False, True])
def test_reference_equals_dense_masked_product(int8):
    gen = torch.Generator().manual_seed(3)
    w = mask24(torch.randn(96, 160, generator=gen))
    x = torch.randn(5, 160, generator=gen)
    p = compress(w, int8=int8)
    dense = p.decompress().float()
    if not int8:
        assert torch.equal(dense, w)
    got = decode_matmul_reference(x, p)
    assert torch.allclose(got, x @ dense.t(), atol=1e-4, rtol=1e-5)


def test_pack_refuses():
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        pack(mask24(torch.randn(16, 16)))
    with pytest.raises(ValueError, match="multiple of 16"):
        pack(mask24(torch.randn(16, 24)).half())
    with pytest.raises(ValueError, match="not 2:4"):
        pack(torch.ones(16, 16).half())
    w = mask24(torch.randn(16, 16)).half()
    w[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or Inf"):
        pack(w, int8=True)


def test_default_warps_fills_the_gpu():
    for rows, k, t in [(4096, 4096, 1), (1024, 4096, 16), (14336, 4096, 64), (48, 16, 1)]:
        w = default_warps(rows, k, t, 132)
        assert 1 <= w <= 32 and w & (w - 1) == 0
    assert default_warps(1024, 4096, 1, 132) > default_warps(14336, 4096, 1, 132)
    assert default_warps(48, 16, 1, 132) == 1  # one 16-column tile: one warp has all of K


def test_default_warps_gives_wide_layers_eight_warps_up_to_16_tokens():
    assert default_warps(28672, 4096, 8, 132) == 8
    assert default_warps(14336, 4096, 16, 132) == 8
    assert default_warps(14336, 4096, 32, 132) == 4  # more tokens: the SM count decides
    assert default_warps(16, 64, 1, 132) == 1  # one chunk: one warp however few the rows


def test_default_warps_may_round_chunks_up():
    assert default_warps(1536, 1536, 8, 132) == 32  # 24 chunks: 32 warps, 8 of them idle
    assert default_warps(1536, 1536, 64, 132) == 8  # capped by the register budget
