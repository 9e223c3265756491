"""The low-bit decode kernel's weight layout: one contiguous tile per 16 rows and 128 columns.

An :class:`~explorer.lowbit.Int4Weight` or :class:`~explorer.lowbit.Int8Weight` keeps its three
parts row by row: codes (``[N, K/4]`` uint8, two int4 codes a byte, or ``[N, K/2]`` int8),
2-bit positions ``[N, K/8]`` and float32 scales ``[N, K/G]``. What one warp of the kernel needs
for 16 rows and 128 columns (a chunk) then lies in 48 pieces of 4 to 64 bytes, far apart.
:func:`tile_coded_weight` rearranges the weight once so that each chunk is one contiguous run of
bytes and a block of 16 rows reads its weight front to back. With ``C`` the code bytes a row
holds for 128 columns (32 for int4, 64 for int8):

- bytes ``0..16C-1``: codes, ``[16 rows][C B]`` (bytes ``Ci..Ci+C-1`` of each row's codes;
  int8 puts each row's even 4-byte words first, then its odd ones, so that the lanes of the
  kernel that need the even words read 32 contiguous bytes and the others the next 32);
- the next 256 bytes: positions, ``[16 rows][16 B]`` (bytes ``16i..16i+15`` of each row's
  metadata);
- the last ``64 S`` bytes: scales, ``[16 rows][S]`` float32, ``S`` = :func:`chunk_scales`: one
  per row (the scale of the group that holds column ``128i``) when the group size ``G`` is a
  multiple of 128, and the row's ``S = 128 / G`` scales of columns ``128i .. 128i+127`` for
  groups of 64 or 32 columns;

tile ``(b, i)`` (rows ``16b..16b+15``, columns ``128i..128i+127``) at byte
``(b * K/128 + i) * T``, ``T`` = :func:`tile_bytes`: 832 (int4) or 1344 (int8) bytes with one
scale a chunk, 64 more for each further scale. Rows past ``N`` (up to a multiple of 16) are zero
codes with scale 0. With ``G`` a multiple of 128 the scales take 32/128 bits a weight, so a
tiled weight holds 3.25 (int4) or 5.25 (int8) bits a weight; groups of 64 and 32 columns hold
3.5 and 4 bits (int4). :func:`untile_coded_weight` gives the weight back exactly. Pure torch: it
runs wherever the weight is.

Examples
--------
>>> from explorer.lowbit import compress_int4, compress_int8
>>> w = torch.tensor([[0.0, 1.0, 0.0, -7.0] * 64] * 3)
>>> tiles = tile_coded_weight(compress_int4(w))
>>> tiles
CodeTiles(3x256 int4, group 128, 2 tiles of 832 B on cpu)
>>> untile_coded_weight(tiles).codes.equal(compress_int4(w).codes)
True
>>> tile_coded_weight(compress_int8(w))
CodeTiles(3x256 int8, group 128, 2 tiles of 1344 B on cpu)
>>> tile_coded_weight(compress_int4(w, group_size=32))
CodeTiles(3x256 int4, group 32, 2 tiles of 1024 B on cpu)
"""

from __future__ import annotations

import math

import torch

from explorer.lowbit import CODED_WEIGHTS, GroupCodedWeight

__all__ = [
    "SMALL_GROUPS",
    "TILE_BYTES",
    "TILE_COLUMNS",
    "TILE_ROWS",
    "CodeTiles",
    "chunk_scales",
    "code_bytes",
    "layout_refusal",
    "tile_bytes",
    "tile_coded_weight",
    "untile_coded_weight",
]

#: Rows and input columns one tile covers, and an int4 tile's bytes: codes, positions, scales.
TILE_ROWS, TILE_COLUMNS = 16, 128
TILE_BYTES = 512 + 256 + 64
#: Group sizes below a tile's width that the tiles hold (several scales per row and tile).
SMALL_GROUPS = (32, 64)
#: Metadata byte of a padding row: positions 0 and 1 in both groups (an ordered pair).
_PAD_METADATA = 0x44


def code_bytes(fmt: str) -> int:
    """Code bytes one row of a tile holds: 32 (int4) or 64 (int8).

    Parameters
    ----------
    fmt : str
        ``"int4"`` or ``"int8"``.

    Returns
    -------
    int
    """
    return TILE_COLUMNS // 2 // CODED_WEIGHTS[fmt].CODES_PER_BYTE


def layout_refusal(k: int, group_size: int) -> str | None:
    """Why the tiles cannot hold a weight of ``k`` columns and ``group_size`` (None: they can).

    They need K a multiple of 128 and a group size that is 32, 64 or a multiple of 128 dividing
    K.

    Parameters
    ----------
    k : int
        The weight's columns (input features).
    group_size : int
        Columns per scale.

    Returns
    -------
    str or None
        The reason, naming both values, or None.

    Examples
    --------
    >>> layout_refusal(4096, 64) is None, layout_refusal(4096, 128) is None
    (True, True)
    >>> layout_refusal(576, 64)
    'K = 576 is not a multiple of 128 (group_size = 64)'
    """
    if k % TILE_COLUMNS:
        return f"K = {k} is not a multiple of {TILE_COLUMNS} (group_size = {group_size})"
    if group_size in SMALL_GROUPS or (group_size % TILE_COLUMNS == 0 and k % group_size == 0):
        return None
    return (
        f"group_size = {group_size} with K = {k}: expected {SMALL_GROUPS[0]}, {SMALL_GROUPS[1]} "
        f"or a multiple of {TILE_COLUMNS} dividing K"
    )


def chunk_scales(group_size: int) -> int:
    """Scales a row holds per tile: 1 for groups that are multiples of 128, 2 for 64, 4 for 32.

    Parameters
    ----------
    group_size : int
        Columns per scale (32, 64 or a multiple of 128).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Any other group size.

    Examples
    --------
    >>> [chunk_scales(g) for g in (32, 64, 128, 384)]
    [4, 2, 1, 1]
    """
    if group_size % TILE_COLUMNS == 0 and group_size > 0:
        return 1
    if group_size in SMALL_GROUPS:
        return TILE_COLUMNS // group_size
    raise ValueError(
        f"group_size = {group_size}: the tiles hold groups of {SMALL_GROUPS[0]}, "
        f"{SMALL_GROUPS[1]} or a multiple of {TILE_COLUMNS} columns"
    )


def tile_bytes(fmt: str, group_size: int = TILE_COLUMNS) -> int:
    """Bytes of one tile of ``fmt``: 832 (int4) or 1344 (int8), 64 more per further scale.

    Parameters
    ----------
    fmt : str
        ``"int4"`` or ``"int8"``.
    group_size : int
        Columns per scale (:func:`chunk_scales`).

    Returns
    -------
    int

    Examples
    --------
    >>> tile_bytes("int4"), tile_bytes("int8"), tile_bytes("int4", 64), tile_bytes("int4", 32)
    (832, 1344, 896, 1024)
    """
    return TILE_ROWS * code_bytes(fmt) + 256 + 64 * chunk_scales(group_size)


class CodeTiles:
    """A 2:4 int4 or int8 weight in the decode kernel's tile layout (the module's docstring).

    Parameters
    ----------
    data : torch.Tensor
        ``uint8 [ceil(N / 16), K / 128, T]``, contiguous (``T`` = :func:`tile_bytes` of the
        format and group size).
    shape : tuple of int
        ``(N, K)``, the weight's own shape.
    group_size : int
        Columns per scale of the weight it was made from.
    fmt : str
        ``"int4"`` or ``"int8"``.
    """

    __slots__ = ("data", "format", "group_size", "shape")

    def __init__(
        self, data: torch.Tensor, shape: tuple[int, int], group_size: int, fmt: str = "int4"
    ) -> None:
        if fmt not in CODED_WEIGHTS:
            raise ValueError(f"format = {fmt!r}; the tiles hold one of {tuple(CODED_WEIGHTS)}")
        n, k = (int(s) for s in shape)
        why = layout_refusal(k, int(group_size))
        if why is not None:
            raise ValueError(f"{fmt} tiles cannot hold this weight: {why}")
        want = (math.ceil(n / TILE_ROWS), k // TILE_COLUMNS, tile_bytes(fmt, int(group_size)))
        if data.dtype != torch.uint8 or tuple(data.shape) != want or not data.is_contiguous():
            raise ValueError(
                f"{fmt} tiles of a {n}x{k} weight must be contiguous uint8 {list(want)}, got "
                f"{data.dtype} {list(data.shape)}. Hint: build them with tile_coded_weight."
            )
        self.data, self.shape, self.group_size, self.format = data, (n, k), int(group_size), fmt

    @property
    def device(self) -> torch.device:
        """Where the tiles are."""
        return self.data.device

    @property
    def nbytes(self) -> int:
        """Bytes the tiles hold (padding rows included)."""
        return self.data.numel()

    def to(self, device: torch.device | str) -> CodeTiles:
        """The same tiles on ``device``.

        Parameters
        ----------
        device : torch.device or str
            Where to put them.

        Returns
        -------
        CodeTiles
        """
        return CodeTiles(self.data.to(device), self.shape, self.group_size, self.format)

    def __repr__(self) -> str:
        n, k = self.shape
        tiles = self.data.shape[0] * self.data.shape[1]
        return (
            f"CodeTiles({n}x{k} {self.format}, group {self.group_size}, {tiles} tiles of "
            f"{tile_bytes(self.format, self.group_size)} B on {self.device})"
        )


def _pad_rows(t: torch.Tensor, rows: int, value: int = 0) -> torch.Tensor:
    if t.shape[0] == rows:
        return t
    pad = t.new_full((rows - t.shape[0], *t.shape[1:]), value)
    return torch.cat([t, pad])


def _words_even_first(codes: torch.Tensor, rows: int, chunks: int) -> torch.Tensor:
    """Int8 codes ``[rows, chunks * 64]`` with each chunk's even 4-byte words first.

    Views and one copy, no index tensor, so it runs inside a CUDA-graph capture.
    """
    return codes.reshape(rows, chunks, 8, 2, 4).transpose(2, 3).reshape(rows, chunks * 64)


def _words_in_order(codes: torch.Tensor, rows: int, chunks: int) -> torch.Tensor:
    """The inverse of :func:`_words_even_first`."""
    return codes.reshape(rows, chunks, 2, 8, 4).transpose(2, 3).reshape(rows, chunks * 64)


def tile_coded_weight(weight: GroupCodedWeight) -> CodeTiles:
    """Rearrange ``weight`` into the kernel's tiles, on the weight's device.

    Parameters
    ----------
    weight : Int4Weight or Int8Weight
        A 2:4 low-bit weight with K a multiple of 128 and a group size of 32, 64 or a multiple
        of 128 dividing K (:func:`layout_refusal`; the kernel's check of the positions,
        :func:`explorer.gpu.cuda.decode_int4.check_int4_layout`, is the caller's).

    Returns
    -------
    CodeTiles

    Raises
    ------
    ValueError
        K not a multiple of 128, or a group size the tiles cannot hold (:func:`layout_refusal`).
    TypeError
        ``weight`` is neither an ``Int4Weight`` nor an ``Int8Weight``.

    Examples
    --------
    >>> from explorer.lowbit import compress_int4
    >>> w = compress_int4(torch.tensor([[0.0, 2.0, 0.0, -4.0] * 32]))
    >>> t = tile_coded_weight(w)
    >>> t.data.shape, t.data[0, 0, 0].item() == w.codes[0, 0].item()
    (torch.Size([1, 1, 832]), True)
    """
    fmt = getattr(weight, "FORMAT", None)
    if fmt not in CODED_WEIGHTS or not isinstance(weight, CODED_WEIGHTS[fmt]):
        raise TypeError(
            f"weight must be an explorer.lowbit.Int4Weight or Int8Weight, got "
            f"{type(weight).__name__}. Hint: compress_int4(w) or compress_int8(w) builds one."
        )
    n, k = weight.shape
    g = weight.group_size
    why = layout_refusal(k, g)
    if why is not None:
        raise ValueError(
            f"{fmt} tiles cannot hold this weight: {why}. Hint: "
            f"compress_{fmt}(weight, group_size=128) for K a multiple of 128."
        )
    blocks, chunks = math.ceil(n / TILE_ROWS), k // TILE_COLUMNS
    rows = blocks * TILE_ROWS
    width = code_bytes(fmt)

    def per_tile(part: torch.Tensor, width: int) -> torch.Tensor:
        # [rows, chunks * width] -> [blocks, chunks, 16 * width]
        return (
            part.reshape(blocks, TILE_ROWS, chunks, width)
            .permute(0, 2, 1, 3)
            .reshape(blocks, chunks, TILE_ROWS * width)
        )

    codes = _pad_rows(weight.codes.contiguous().view(torch.uint8), rows)
    if fmt == "int8":
        codes = _words_even_first(codes, rows, chunks)
    meta = _pad_rows(weight.metadata.contiguous(), rows, _PAD_METADATA)
    scales = _pad_rows(weight.scales.to(torch.float32).contiguous(), rows)
    per_chunk = chunk_scales(g)
    if per_chunk == 1:
        scales = scales.repeat_interleave(g // TILE_COLUMNS, dim=1)  # one per chunk
    scale_bytes = scales.contiguous().view(torch.uint8)  # [rows, chunks * per_chunk * 4]
    data = torch.cat(
        [per_tile(codes, width), per_tile(meta, 16), per_tile(scale_bytes, 4 * per_chunk)], dim=2
    ).contiguous()
    return CodeTiles(data, (n, k), g, fmt)


def untile_coded_weight(tiles: CodeTiles) -> GroupCodedWeight:
    """The :class:`~explorer.lowbit.Int4Weight` or ``Int8Weight`` ``tiles`` were made from, exactly.

    Parameters
    ----------
    tiles : CodeTiles
        From :func:`tile_coded_weight`.

    Returns
    -------
    Int4Weight or Int8Weight
        On the tiles' device.
    """
    n, k = tiles.shape
    blocks, chunks = tiles.data.shape[:2]
    rows = blocks * TILE_ROWS
    width = code_bytes(tiles.format)

    def rows_of(lo: int, width: int) -> torch.Tensor:
        part = tiles.data[:, :, lo : lo + TILE_ROWS * width]
        part = part.reshape(blocks, chunks, TILE_ROWS, width).permute(0, 2, 1, 3)
        return part.reshape(rows, chunks * width)[:n].contiguous()

    codes = rows_of(0, width)
    if tiles.format == "int8":
        codes = _words_in_order(codes, n, chunks)
    kind = CODED_WEIGHTS[tiles.format]
    codes = codes.contiguous().view(kind.CODE_DTYPE)
    meta = rows_of(TILE_ROWS * width, 16)
    per_chunk = chunk_scales(tiles.group_size)
    scales = rows_of(TILE_ROWS * width + 256, 4 * per_chunk).view(torch.float32)
    if per_chunk == 1:  # [n, chunks]: one of every G / 128
        scales = scales[:, :: tiles.group_size // TILE_COLUMNS]
    scales = scales.contiguous()
    return kind(codes, meta, scales, (n, k), tiles.group_size)
