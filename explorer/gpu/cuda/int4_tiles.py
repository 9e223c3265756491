"""The int4 decode kernel's weight layout: one contiguous 832-byte tile per 16 rows and 128 columns.

An :class:`~explorer.lowbit.Int4Weight` keeps its three parts row by row: codes ``[N, K/4]``,
2-bit positions ``[N, K/8]`` and float32 scales ``[N, K/G]``. What one warp of the kernel needs
for 16 rows and 128 columns (a chunk) then lies in 48 pieces of 4 to 32 bytes, 64 to 1024
bytes apart. :func:`tile_int4_weight` rearranges the weight once so that each chunk is one run
of 832 bytes and a block of 16 rows reads its weight front to back:

- bytes ``0..511``: codes, ``[16 rows][32 B]`` (bytes ``32i..32i+31`` of each row's codes);
- bytes ``512..767``: positions, ``[16 rows][16 B]`` (bytes ``16i..16i+15`` of each row's
  metadata);
- bytes ``768..831``: scales, ``[16 rows]`` float32 (each row's scale of the group that holds
  column ``128i``);

tile ``(b, i)`` (rows ``16b..16b+15``, columns ``128i..128i+127``) at byte
``(b * K/128 + i) * 832``. Rows past ``N`` (up to a multiple of 16) are zero codes with scale 0.
The scales take 32/128 bits a weight whatever the group size (one per chunk and row), so a
tiled weight holds 3.25 bits a weight. :func:`untile_int4_weight` gives the
:class:`~explorer.lowbit.Int4Weight` back exactly. Pure torch: it runs wherever the weight is.

Examples
--------
>>> from explorer.lowbit import compress_int4
>>> w = compress_int4(torch.tensor([[0.0, 1.0, 0.0, -7.0] * 64] * 3))
>>> tiles = tile_int4_weight(w)
>>> tiles
Int4Tiles(3x256, group 128, 2 tiles of 832 B on cpu)
>>> untile_int4_weight(tiles).codes.equal(w.codes)
True
"""

from __future__ import annotations

import math

import torch

from explorer.lowbit import Int4Weight

__all__ = [
    "TILE_BYTES",
    "TILE_COLUMNS",
    "TILE_ROWS",
    "Int4Tiles",
    "tile_int4_weight",
    "untile_int4_weight",
]

#: Rows and input columns one tile covers, and its bytes: codes, positions, scales.
TILE_ROWS, TILE_COLUMNS = 16, 128
TILE_BYTES = 512 + 256 + 64
#: Metadata byte of a padding row: positions 0 and 1 in both groups (an ordered pair).
_PAD_METADATA = 0x44


class Int4Tiles:
    """A 2:4 int4 weight in the decode kernel's tile layout (see the module's docstring).

    Parameters
    ----------
    data : torch.Tensor
        ``uint8 [ceil(N / 16), K / 128, 832]``, contiguous.
    shape : tuple of int
        ``(N, K)``, the weight's own shape.
    group_size : int
        Columns per scale of the weight it was made from.
    """

    __slots__ = ("data", "group_size", "shape")

    def __init__(self, data: torch.Tensor, shape: tuple[int, int], group_size: int) -> None:
        n, k = (int(s) for s in shape)
        want = (math.ceil(n / TILE_ROWS), k // TILE_COLUMNS, TILE_BYTES)
        if data.dtype != torch.uint8 or tuple(data.shape) != want or not data.is_contiguous():
            raise ValueError(
                f"tiles of a {n}x{k} weight must be contiguous uint8 {list(want)}, got "
                f"{data.dtype} {list(data.shape)}. Hint: build them with tile_int4_weight."
            )
        self.data, self.shape, self.group_size = data, (n, k), int(group_size)

    @property
    def device(self) -> torch.device:
        """Where the tiles are."""
        return self.data.device

    @property
    def nbytes(self) -> int:
        """Bytes the tiles hold (padding rows included)."""
        return self.data.numel()

    def to(self, device: torch.device | str) -> Int4Tiles:
        """The same tiles on ``device``.

        Parameters
        ----------
        device : torch.device or str
            Where to put them.

        Returns
        -------
        Int4Tiles
        """
        return Int4Tiles(self.data.to(device), self.shape, self.group_size)

    def __repr__(self) -> str:
        n, k = self.shape
        tiles = self.data.shape[0] * self.data.shape[1]
        return (
            f"Int4Tiles({n}x{k}, group {self.group_size}, {tiles} tiles of {TILE_BYTES} B "
            f"on {self.device})"
        )


def _pad_rows(t: torch.Tensor, rows: int, value: int = 0) -> torch.Tensor:
    if t.shape[0] == rows:
        return t
    pad = t.new_full((rows - t.shape[0], *t.shape[1:]), value)
    return torch.cat([t, pad])


def tile_int4_weight(weight: Int4Weight) -> Int4Tiles:
    """Rearrange ``weight`` into the kernel's tiles, on the weight's device.

    Parameters
    ----------
    weight : Int4Weight
        A 2:4 int4 weight with K and the group size multiples of 128 (the kernel's layout check,
        :func:`explorer.gpu.cuda.decode_int4.check_int4_layout`, is the caller's).

    Returns
    -------
    Int4Tiles

    Raises
    ------
    ValueError
        K or the group size not multiples of 128, or a group size that does not divide K.

    Examples
    --------
    >>> from explorer.lowbit import compress_int4
    >>> w = compress_int4(torch.tensor([[0.0, 2.0, 0.0, -4.0] * 32]))
    >>> t = tile_int4_weight(w)
    >>> t.data.shape, t.data[0, 0, 0].item() == w.codes[0, 0].item()
    (torch.Size([1, 1, 832]), True)
    """
    n, k = weight.shape
    g = weight.group_size
    if k % TILE_COLUMNS or g % TILE_COLUMNS or k % g:
        raise ValueError(
            f"int4 tiles need K and the group size to be multiples of {TILE_COLUMNS} with the "
            f"group size dividing K; got K = {k}, group_size = {g}. Hint: "
            "compress_int4(weight, group_size=128) for K a multiple of 128."
        )
    blocks, chunks = math.ceil(n / TILE_ROWS), k // TILE_COLUMNS
    rows = blocks * TILE_ROWS

    def per_tile(part: torch.Tensor, width: int) -> torch.Tensor:
        # [rows, chunks * width] -> [blocks, chunks, 16 * width]
        return (
            part.reshape(blocks, TILE_ROWS, chunks, width)
            .permute(0, 2, 1, 3)
            .reshape(blocks, chunks, TILE_ROWS * width)
        )

    codes = _pad_rows(weight.codes.contiguous(), rows)
    meta = _pad_rows(weight.metadata.contiguous(), rows, _PAD_METADATA)
    scales = _pad_rows(weight.scales.to(torch.float32).contiguous(), rows)
    scales = scales.repeat_interleave(g // TILE_COLUMNS, dim=1)  # one per chunk
    scale_bytes = scales.contiguous().view(torch.uint8)  # [rows, chunks * 4]
    data = torch.cat(
        [per_tile(codes, 32), per_tile(meta, 16), per_tile(scale_bytes, 4)], dim=2
    ).contiguous()
    return Int4Tiles(data, (n, k), g)


def untile_int4_weight(tiles: Int4Tiles) -> Int4Weight:
    """The :class:`~explorer.lowbit.Int4Weight` ``tiles`` were made from, exactly.

    Parameters
    ----------
    tiles : Int4Tiles
        From :func:`tile_int4_weight`.

    Returns
    -------
    Int4Weight
        On the tiles' device.
    """
    n, k = tiles.shape
    blocks, chunks = tiles.data.shape[:2]
    rows = blocks * TILE_ROWS

    def rows_of(lo: int, width: int) -> torch.Tensor:
        part = tiles.data[:, :, lo : lo + TILE_ROWS * width]
        part = part.reshape(blocks, chunks, TILE_ROWS, width).permute(0, 2, 1, 3)
        return part.reshape(rows, chunks * width)[:n].contiguous()

    codes, meta = rows_of(0, 32), rows_of(512, 16)
    scales = rows_of(768, 4).view(torch.float32)  # [n, chunks]
    scales = scales[:, :: tiles.group_size // TILE_COLUMNS].contiguous()
    return Int4Weight(codes, meta, scales, (n, k), tiles.group_size)
