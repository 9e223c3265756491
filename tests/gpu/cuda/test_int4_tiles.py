"""The int4 decode kernel's tile layout (CPU): exact round trips and the bytes where they belong."""

import pytest
import torch

from explorer.gpu.cuda.int4_tiles import (
    TILE_BYTES,
    Int4Tiles,
    tile_int4_weight,
    untile_int4_weight,
)
from explorer.lowbit import Int4Weight, compress_int4
from explorer.masks import make_mask


def _int4(n: int, k: int, group: int = 128, seed: int = 0) -> Int4Weight:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    return compress_int4(w * make_mask(w, "2:4"), group_size=group)


@pytest.mark.parametrize(
    ("n", "k", "group"), [(16, 128, 128), (37, 512, 256), (100, 1536, 384), (1, 256, 256)]
)
def test_untile_gives_the_weight_back_exactly(n, k, group):
    w = _int4(n, k, group)
    tiles = tile_int4_weight(w)
    assert tiles.data.shape == (-(-n // 16), k // 128, TILE_BYTES)
    back = untile_int4_weight(tiles)
    assert back.shape == w.shape and back.group_size == group
    assert torch.equal(back.codes, w.codes)
    assert torch.equal(back.metadata, w.metadata)
    assert torch.equal(back.scales, w.scales)


def test_each_tile_holds_its_rows_codes_positions_and_chunk_scale():
    n, k, group = 40, 768, 384
    w = _int4(n, k, group, seed=3)
    tiles = tile_int4_weight(w).data
    for b, i, r in [(0, 0, 0), (1, 2, 15), (2, 5, 7), (0, 3, 9)]:
        row, tile = 16 * b + r, tiles[b, i]
        assert torch.equal(tile[32 * r : 32 * r + 32], w.codes[row, 32 * i : 32 * i + 32])
        assert torch.equal(tile[512 + 16 * r : 528 + 16 * r], w.metadata[row, 16 * i : 16 * i + 16])
        scale = tile[768 + 4 * r : 772 + 4 * r].view(torch.float32).item()
        assert scale == w.scales[row, (128 * i) // group].item()


def test_padding_rows_have_zero_codes_zero_scales_and_ordered_positions():
    tiles = tile_int4_weight(_int4(20, 256)).data  # rows 20..31 are padding
    pad = tiles[1, :, :]
    for r in range(4, 16):
        assert not pad[:, 32 * r : 32 * r + 32].any()
        assert torch.equal(pad[:, 768 + 4 * r : 772 + 4 * r].view(torch.float32), torch.zeros(2, 1))
        meta = pad[:, 512 + 16 * r : 528 + 16 * r]
        assert bool(((meta & 0xF) == 0x4).all() and ((meta >> 4) == 0x4).all())


def test_tiles_refuse_shapes_the_kernel_cannot_read():
    w = _int4(16, 256, 128)
    with pytest.raises(ValueError, match="multiples of 128"):
        tile_int4_weight(Int4Weight(w.codes, w.metadata, w.scales, (16, 256), 64))
    with pytest.raises(ValueError, match="tile_int4_weight"):
        Int4Tiles(torch.zeros(1, 2, 831, dtype=torch.uint8), (16, 256), 128)


def test_tiles_repr_and_move():
    tiles = tile_int4_weight(_int4(3, 256))
    assert repr(tiles) == "Int4Tiles(3x256, group 128, 2 tiles of 832 B on cpu)"
    assert tiles.nbytes == 2 * TILE_BYTES
    moved = tiles.to("cpu")
    assert moved.shape == tiles.shape and torch.equal(moved.data, tiles.data)
