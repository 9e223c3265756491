"""The int4 and int8 dequantization kernels against their reference, bit for bit (GPU), and refusals."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import mask24

from explorer.gpu.cuda.code_tiles import tile_coded_weight
from explorer.gpu.cuda.int4_dequant import Int4Dequantizer, dequantize_int4_reference
from explorer.lowbit import compress_int4, compress_int8

DEV = "cuda"


def _tiles(n, k, group=128, device="cpu", fmt="int4"):
    w = mask24(torch.randn(n, k, device=device))
    compress = compress_int4 if fmt == "int4" else compress_int8
    return tile_coded_weight(compress(w, group_size=group))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["int4", "int8"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("n", "k", "group"),
    [(17, 256, 128), (48, 384, 384), (1000, 4224, 128), (40, 512, 64), (1000, 4224, 32)],
)
def test_the_kernel_equals_the_reference_bit_for_bit(n, k, group, dtype, fmt):
    tiles = _tiles(n, k, group, DEV, fmt)
    w = Int4Dequantizer(tiles, dtype)()
    assert w.shape == (n, k) and w.dtype == dtype
    assert torch.equal(w, dequantize_int4_reference(tiles, dtype))


@pytest.mark.gpu
def test_a_captured_call_replays_the_same_weight():
    tiles = _tiles(64, 512, device=DEV)
    call = Int4Dequantizer(tiles, torch.bfloat16)
    call()  # build before the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        w = call()
    g.replay()
    assert torch.equal(w, dequantize_int4_reference(tiles, torch.bfloat16))


def test_the_reference_is_code_times_scale_in_place():
    tiles = tile_coded_weight(compress_int4(torch.tensor([[0.0, 3.0, 0.0, -7.0] * 32])))
    w = dequantize_int4_reference(tiles, torch.float16)
    assert w.dtype == torch.float16 and w[0, :8].tolist() == [0.0, 3.0, 0.0, -7.0] * 2


def test_refuses_cpu_tiles_and_other_dtypes():
    tiles = _tiles(16, 128)
    with pytest.raises(ValueError, match="CUDA device"):
        Int4Dequantizer(tiles, torch.bfloat16)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="bfloat16 or float16"):
            Int4Dequantizer(tiles.to(DEV), torch.float32)
