"""The low-bit decode kernel's tile layout (CPU): exact round trips and the bytes where they belong."""

import pytest
import torch

from explorer.gpu.cuda.code_tiles import (
    TILE_BYTES,
    CodeTiles,
    tile_bytes,
    tile_coded_weight,
    untile_coded_weight,
)
from explorer.lowbit import Int4Weight, compress_int4, compress_int8
from explorer.masks import make_mask


def _int4(n: int, k: int, group: int = 128, seed: int = 0, fmt: str = "int4") -> Int4Weight:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    compress = compress_int4 if fmt == "int4" else compress_int8
    return compress(w * make_mask(w, "2:4"), group_size=group)


@pytest.mark.parametrize("fmt", ["int4", "int8"])
@pytest.mark.parametrize(
    ("n", "k", "group"),
    [(16, 128, 128), (37, 512, 256), (100, 1536, 384), (1, 256, 256), (37, 512, 64), (20, 384, 32)],
)
def test_untile_gives_the_weight_back_exactly(n, k, group, fmt):
    w = _int4(n, k, group, fmt=fmt)
    tiles = tile_coded_weight(w)
    assert tiles.data.shape == (-(-n // 16), k // 128, tile_bytes(fmt, group))
    back = untile_coded_weight(tiles)
    assert type(back) is type(w) and back.codes.dtype == w.codes.dtype
    assert back.shape == w.shape and back.group_size == group
    assert torch.equal(back.codes, w.codes)
    assert torch.equal(back.metadata, w.metadata)
    assert torch.equal(back.scales, w.scales)


def test_each_tile_holds_its_rows_codes_positions_and_chunk_scale():
    n, k, group = 40, 768, 384
    w = _int4(n, k, group, seed=3)
    tiles = tile_coded_weight(w).data
    for b, i, r in [(0, 0, 0), (1, 2, 15), (2, 5, 7), (0, 3, 9)]:
        row, tile = 16 * b + r, tiles[b, i]
        assert torch.equal(tile[32 * r : 32 * r + 32], w.codes[row, 32 * i : 32 * i + 32])
        assert torch.equal(tile[512 + 16 * r : 528 + 16 * r], w.metadata[row, 16 * i : 16 * i + 16])
        scale = tile[768 + 4 * r : 772 + 4 * r].view(torch.float32).item()
        assert scale == w.scales[row, (128 * i) // group].item()


@pytest.mark.parametrize(
    ("fmt", "group", "per_chunk"), [("int4", 64, 2), ("int4", 32, 4), ("int8", 32, 4)]
)
def test_small_groups_put_each_rows_scales_of_the_chunk_side_by_side(fmt, group, per_chunk):
    n, k = 40, 768
    w = _int4(n, k, group, seed=5, fmt=fmt)
    tiles = tile_coded_weight(w).data
    start = 16 * (32 if fmt == "int4" else 64) + 256
    assert tiles.shape[-1] == start + 64 * per_chunk
    for b, i, r in [(0, 0, 0), (1, 2, 15), (2, 5, 7)]:
        row, tile = 16 * b + r, tiles[b, i]
        at = start + 4 * per_chunk * r
        got = tile[at : at + 4 * per_chunk].view(torch.float32)
        assert torch.equal(got, w.scales[row, per_chunk * i : per_chunk * (i + 1)])


def test_int8_tile_rows_hold_even_words_then_odd_words():
    """Lanes 0-1 of a row read bytes 0..31 (words 0, 2, .., 14), lanes 2-3 bytes 32..63."""
    n, k, group = 40, 768, 384
    w = _int4(n, k, group, seed=4, fmt="int8")
    tiles = tile_coded_weight(w).data
    codes = w.codes.view(torch.uint8)
    for b, i, r in [(0, 0, 0), (1, 2, 15), (2, 5, 7)]:
        row, tile = 16 * b + r, tiles[b, i]
        words = codes[row, 64 * i : 64 * i + 64].reshape(16, 4)
        assert torch.equal(tile[64 * r : 64 * r + 32], words[0::2].reshape(-1))
        assert torch.equal(tile[64 * r + 32 : 64 * r + 64], words[1::2].reshape(-1))
        meta = tile[1024 + 16 * r : 1040 + 16 * r]
        assert torch.equal(meta, w.metadata[row, 16 * i : 16 * i + 16])
        scale = tile[1280 + 4 * r : 1284 + 4 * r].view(torch.float32).item()
        assert scale == w.scales[row, (128 * i) // group].item()


def test_padding_rows_have_zero_codes_zero_scales_and_ordered_positions():
    tiles = tile_coded_weight(_int4(20, 256)).data  # rows 20..31 are padding
    pad = tiles[1, :, :]
    for r in range(4, 16):
        assert not pad[:, 32 * r : 32 * r + 32].any()
        assert torch.equal(pad[:, 768 + 4 * r : 772 + 4 * r].view(torch.float32), torch.zeros(2, 1))
        meta = pad[:, 512 + 16 * r : 528 + 16 * r]
        assert bool(((meta & 0xF) == 0x4).all() and ((meta >> 4) == 0x4).all())


def test_tiles_refuse_shapes_the_kernel_cannot_read():
    w = _int4(16, 256, 128)
    with pytest.raises(ValueError, match="group_size = 96 with K = 256: expected 32, 64 or"):
        tile_coded_weight(Int4Weight(w.codes, w.metadata, w.scales, (16, 256), 96))
    with pytest.raises(ValueError, match="K = 192 is not a multiple of 128"):
        tile_coded_weight(_int4(16, 192, 64))
    with pytest.raises(ValueError, match="group_size = 256 with K = 384"):
        CodeTiles(torch.zeros(1, 3, 832, dtype=torch.uint8), (16, 384), 256)
    with pytest.raises(ValueError, match="tile_coded_weight"):
        CodeTiles(torch.zeros(1, 2, 831, dtype=torch.uint8), (16, 256), 128)
    with pytest.raises(ValueError, match=r"int8 tiles .* 1344"):
        CodeTiles(torch.zeros(1, 2, 832, dtype=torch.uint8), (16, 256), 128, "int8")
    with pytest.raises(ValueError, match=r"int4 tiles .* 896"):
        CodeTiles(torch.zeros(1, 2, 832, dtype=torch.uint8), (16, 256), 64)
    with pytest.raises(ValueError, match="format = 'int2'"):
        CodeTiles(torch.zeros(1, 2, 832, dtype=torch.uint8), (16, 256), 128, "int2")
    with pytest.raises(TypeError, match="Int4Weight or Int8Weight"):
        tile_coded_weight(torch.zeros(16, 256))


def test_tiles_repr_and_move():
    tiles = tile_coded_weight(_int4(3, 256))
    assert repr(tiles) == "CodeTiles(3x256 int4, group 128, 2 tiles of 832 B on cpu)"
    assert tiles.nbytes == 2 * TILE_BYTES
    moved = tiles.to("cpu")
    assert moved.shape == tiles.shape and torch.equal(moved.data, tiles.data)
    eight = tile_coded_weight(_int4(3, 256, fmt="int8"))
    assert repr(eight) == "CodeTiles(3x256 int8, group 128, 2 tiles of 1344 B on cpu)"
    assert eight.to("cpu").format == "int8"
