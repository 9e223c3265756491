"""2:4 on top of int4: kept values as group-wise int4 codes, two per byte (CPU reference).

:func:`compress_int4` keeps :mod:`explorer.compression`'s 2:4 layout (the two kept values of
every group of 4 in position order, plus the same 2-bit position ``metadata``) and stores each
kept value as a signed int4 code ``q`` with one float32 scale per (row, group of ``G`` input
columns): the weight is ``q * scales[row, column // G]``.

* ``codes``: ``[rows, K/4]`` uint8. Kept value ``2j`` of a row is the low nibble of byte ``j``,
  kept value ``2j + 1`` the high nibble; a nibble is the code in two's complement
  (``q & 0xF``). Codes lie in ``[-7, 7]`` (symmetric; the nibble ``0x8`` = -8 is never written
  and :meth:`Int4Weight.from_parts` refuses it).
* ``metadata``: ``[rows, ceil(K/8)]`` uint8, exactly as :func:`explorer.compression.compress`.
* ``scales``: ``[rows, K/G]`` float32, finite and positive (1 for a group with nothing kept).

Per weight that is 2 bits of codes + 1 bit of positions + ``32 / G`` bits of scales: 3.25 bits
for ``G = 128``.

:func:`compress_int8` stores the same layout with int8 codes, one byte a kept value
(:class:`Int8Weight`): ``codes`` ``[rows, K/2]`` int8 in position order, in ``[-127, 127]``
(-128 is never written), 4 + 1 + ``32 / G`` bits a weight (5.25 for ``G = 128``).

:meth:`Int4Weight.matmul` and :func:`int4_reference` (which takes either) are the CPU oracle the
GPU kernels (:mod:`explorer.gpu.cuda.decode_int4`) are tested against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from . import _html
from .compression import CompressedWeight, compress
from .groupquant import Quantization, group_scales, round_to_grid

__all__ = [
    "CODED_WEIGHTS",
    "GroupCodedWeight",
    "Int4Weight",
    "Int8Weight",
    "compress_int4",
    "compress_int8",
    "int4_reference",
    "pack_int4",
    "unpack_int4",
]


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Pack integer codes in ``[-8, 7]`` two per byte along the last dim (even index low nibble).

    Parameters
    ----------
    codes : torch.Tensor
        Integer codes in ``[-8, 7]``; the last dim must be even.

    Returns
    -------
    torch.Tensor
        uint8, the last dim halved.

    Raises
    ------
    ValueError
        An odd last dim, or a code outside ``[-8, 7]``.

    Examples
    --------
    >>> pack_int4(torch.tensor([[1, -2, 7, -7]])).tolist()
    [[225, 151]]
    """
    if codes.shape[-1] % 2:
        raise ValueError(f"the last dim ({codes.shape[-1]}) must be even to pack two codes a byte")
    c = codes.to(torch.int16)
    if c.numel() and bool(((c < -8) | (c > 7)).any()):
        raise ValueError(
            f"int4 codes must lie in [-8, 7], got values from {int(c.min())} to {int(c.max())}"
        )
    nib = (c & 0xF).to(torch.uint8)
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Unpack bytes into int8 codes in ``[-8, 7]``, the inverse of :func:`pack_int4`.

    Parameters
    ----------
    packed : torch.Tensor
        uint8, two codes per byte (even index in the low nibble).

    Returns
    -------
    torch.Tensor
        int8 codes, the last dim doubled.

    Raises
    ------
    ValueError
        ``packed`` is not uint8.

    Examples
    --------
    >>> unpack_int4(torch.tensor([[225, 151]], dtype=torch.uint8)).tolist()
    [[1, -2, 7, -7]]
    """
    if packed.dtype != torch.uint8:
        raise ValueError(f"packed codes must be uint8, got {packed.dtype}")
    lo = (packed & 0xF).to(torch.int8)
    hi = (packed >> 4).to(torch.int8)
    both = torch.stack([lo, hi], dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])
    return torch.where(both > 7, both - 16, both)


@dataclass(frozen=True, eq=False)
class GroupCodedWeight:
    """A 2:4 weight whose kept values are integer codes times group-wise float32 scales.

    What :class:`Int4Weight` and :class:`Int8Weight` share: one scale per (row, group of ``G``
    input columns).

    Attributes
    ----------
    codes : torch.Tensor
        The kept values' codes (packed as the subclass says).
    metadata : torch.Tensor
        ``[rows, ceil(K/8)]`` uint8, the 2-bit positions (as :class:`CompressedWeight`).
    scales : torch.Tensor
        ``[rows, K/G]`` float32.
    shape : tuple of int
        The dense shape ``(rows, K)``.
    group_size : int
        ``G``, input columns per scale.
    """

    #: The integer format (:data:`explorer.groupquant.FORMATS`), the codes' dtype, how many codes
    #: a byte holds, and how the codes read in a notebook.
    FORMAT: ClassVar[str] = ""
    CODE_DTYPE: ClassVar[torch.dtype] = torch.uint8
    CODES_PER_BYTE: ClassVar[int] = 1
    CODE_TEXT: ClassVar[str] = ""

    codes: torch.Tensor
    metadata: torch.Tensor
    scales: torch.Tensor
    shape: tuple[int, int]
    group_size: int

    @classmethod
    def from_parts(
        cls,
        codes: torch.Tensor,
        metadata: torch.Tensor,
        scales: torch.Tensor,
        shape: tuple[int, int],
        group_size: int,
    ) -> GroupCodedWeight:
        """Build from stored parts, checking shapes, dtypes, codes and scales.

        Parameters
        ----------
        codes, metadata, scales, shape, group_size
            The parts, as the class's attributes describe them.

        Returns
        -------
        GroupCodedWeight
            Of the class it is called on.

        Raises
        ------
        ValueError
            Naming the part that is wrong and what it should be.

        Examples
        --------
        >>> c = compress_int4(torch.tensor([[0.0, 1.0, 0.0, -7.0]]), group_size=4)
        >>> Int4Weight.from_parts(c.codes, c.metadata, c.scales * 0, (1, 4), 4)
        Traceback (most recent call last):
        ...
        ValueError: scales must be finite and positive; 1 of 1 are not (first at (0, 0), value 0.0)
        """
        rows, k = (int(s) for s in shape)
        quant = Quantization(cls.FORMAT, group_size)
        if k % 4:
            raise ValueError(f"K = {k} is not a multiple of 4; 2:4 groups run along rows")
        quant.check_width(k)
        expected = {
            "codes": ((rows, k // 2 // cls.CODES_PER_BYTE), cls.CODE_DTYPE, codes),
            "metadata": ((rows, (k // 4 + 1) // 2), torch.uint8, metadata),
        }
        for name, (want, dtype, t) in expected.items():
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != want or t.dtype != dtype:
                got = (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t)
                raise ValueError(
                    f"{name} must be a {dtype} tensor of shape {want} for a {rows}x{k} weight "
                    f"with group_size={group_size}, got {got}"
                )
        quant.check_scales(scales, rows, k)
        cls.check_codes(codes)
        return cls(codes, metadata, scales, (rows, k), group_size)

    @classmethod
    def compress(
        cls, weight: torch.Tensor, group_size: int = 128, *, scales: torch.Tensor | None = None
    ) -> GroupCodedWeight:
        """:func:`compress_int4` or :func:`compress_int8`, by the class it is called on.

        Parameters
        ----------
        weight, group_size, scales
            As :func:`compress_int4`.
        """
        return _compress(weight, group_size, scales, cls)

    @staticmethod
    def check_codes(codes: torch.Tensor) -> None:
        """Raise ``ValueError`` if ``codes`` hold a value the format never writes.

        Parameters
        ----------
        codes : torch.Tensor
            Stored codes of this class's dtype and shape.
        """
        raise NotImplementedError

    # -- decoding ---------------------------------------------------------------------------------
    def int_codes(self) -> torch.Tensor:
        """``[rows, K/2]`` int8 codes of the kept values, in position order."""
        raise NotImplementedError

    def kept_values(self) -> torch.Tensor:
        """``[rows, K/2]`` float32 dequantized kept values ``q * scale``."""
        per_value = self.scales.repeat_interleave(self.group_size // 2, dim=1)
        return self.int_codes().float() * per_value

    def decompress(self) -> torch.Tensor:
        """The dense dequantized weight (float32), exactly ``q * scale`` in place.

        Examples
        --------
        >>> w = torch.tensor([[0.0, 2.0, 0.0, -14.0]])
        >>> compress_int4(w, group_size=4).decompress().tolist()
        [[0.0, 2.0, 0.0, -14.0]]
        """
        rows, k = self.shape
        out = torch.zeros(rows, k, dtype=torch.float32, device=self.codes.device)
        columns = CompressedWeight(self.int_codes(), self.metadata, self.shape).columns()
        out.scatter_(1, columns, self.kept_values())
        return out

    def matmul(self, x: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """``x @ W^T`` from the compressed form (unpack, scale, gather, multiply, add).

        Parameters
        ----------
        x : torch.Tensor
            ``[..., K]``.
        chunk : int, optional
            Rows of ``W`` handled at a time (bounds the gathered temporary).

        Returns
        -------
        torch.Tensor

        Examples
        --------
        >>> c = compress_int4(torch.tensor([[0.0, 1.0, 0.0, 7.0]]), group_size=4)
        >>> c.matmul(torch.ones(1, 4)).tolist()
        [[8.0]]
        """
        deq = CompressedWeight(self.kept_values(), self.metadata, self.shape)
        return deq.matmul(x.float() if not x.is_floating_point() else x, chunk=chunk)

    # -- sizes and display ------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of codes, metadata and scales."""
        return self.codes.numel() + self.metadata.numel() + self.scales.numel() * 4

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per dense weight (NaN for an empty one): 3.25 for int4, 5.25 for int8, G 128."""
        n = self.shape[0] * self.shape[1]
        return 8 * self.nbytes / n if n else float("nan")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.shape[0]}x{self.shape[1]} 2:4 {self.FORMAT}, "
            f"group_size={self.group_size}, codes {tuple(self.codes.shape)} "
            f"{str(self.codes.dtype).removeprefix('torch.')}, scales {tuple(self.scales.shape)} "
            f"float32, {self.bits_per_weight:.2f} bits/weight)"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("dense shape", f"{self.shape[0]} x {self.shape[1]}"),
            ("codes", f"{tuple(self.codes.shape)} {self.CODE_TEXT}"),
            ("metadata", f"{tuple(self.metadata.shape)} uint8 (two 2-bit indices per group)"),
            ("scales", f"{tuple(self.scales.shape)} float32 (group size {self.group_size})"),
            ("bits per weight", f"{self.bits_per_weight:.3f}"),
        ]
        return _html.table([type(self).__name__, ""], rows)


@dataclass(frozen=True, eq=False, repr=False)
class Int4Weight(GroupCodedWeight):
    """A 2:4 weight with group-wise int4 kept values (layout in the module docstring).

    ``codes`` are ``[rows, K/4]`` uint8, two int4 codes per byte, in ``[-7, 7]``; the other
    attributes are :class:`GroupCodedWeight`'s.

    Examples
    --------
    >>> compress_int4(torch.zeros(16, 256))
    Int4Weight(16x256 2:4 int4, group_size=128, codes (16, 64) uint8, scales (16, 2) float32, 3.25 bits/weight)
    """

    FORMAT: ClassVar[str] = "int4"
    CODE_DTYPE: ClassVar[torch.dtype] = torch.uint8
    CODES_PER_BYTE: ClassVar[int] = 2
    CODE_TEXT: ClassVar[str] = "uint8 (two int4 codes per byte, [-7, 7])"

    @staticmethod
    def check_codes(codes: torch.Tensor) -> None:
        """Refuse the nibble 0x8 (-8), which the symmetric layout never writes.

        Parameters
        ----------
        codes : torch.Tensor
            ``[rows, K/4]`` uint8.
        """
        if bool(((codes & 0xF) == 8).any() | ((codes >> 4) == 8).any()):
            raise ValueError("codes hold -8 (nibble 0x8); this layout uses [-7, 7] only")

    def int_codes(self) -> torch.Tensor:
        """``[rows, K/2]`` int8 codes of the kept values, in position order."""
        return unpack_int4(self.codes)


@dataclass(frozen=True, eq=False, repr=False)
class Int8Weight(GroupCodedWeight):
    """A 2:4 weight with group-wise int8 kept values, one code a byte (module docstring).

    ``codes`` are ``[rows, K/2]`` int8 in position order, in ``[-127, 127]``; the other
    attributes are :class:`GroupCodedWeight`'s.

    Examples
    --------
    >>> compress_int8(torch.zeros(16, 256))
    Int8Weight(16x256 2:4 int8, group_size=128, codes (16, 128) int8, scales (16, 2) float32, 5.25 bits/weight)
    """

    FORMAT: ClassVar[str] = "int8"
    CODE_DTYPE: ClassVar[torch.dtype] = torch.int8
    CODES_PER_BYTE: ClassVar[int] = 1
    CODE_TEXT: ClassVar[str] = "int8 (one code per byte, [-127, 127])"

    @staticmethod
    def check_codes(codes: torch.Tensor) -> None:
        """Refuse -128, which the symmetric layout never writes.

        Parameters
        ----------
        codes : torch.Tensor
            ``[rows, K/2]`` int8.
        """
        if bool((codes == -128).any()):
            raise ValueError("codes hold -128; this layout uses [-127, 127] only")

    def int_codes(self) -> torch.Tensor:
        """``[rows, K/2]`` int8 codes of the kept values, in position order (the codes)."""
        return self.codes


#: The 2:4 low-bit weight classes by format (``"int4"``, ``"int8"``).
CODED_WEIGHTS = {"int4": Int4Weight, "int8": Int8Weight}


def _compress(
    weight: torch.Tensor, group_size: int, scales: torch.Tensor | None, kind: type
) -> GroupCodedWeight:
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError("weight must be a 2-D tensor (rows, K)")
    rows, k = weight.shape
    if k % 4:
        raise ValueError(f"K = {k} is not a multiple of 4; 2:4 groups run along rows")
    quant = Quantization(kind.FORMAT, group_size)
    quant.check_width(k)
    w = weight.detach().float()
    if not bool(torch.isfinite(w).all()):
        raise ValueError(
            f"the weight holds NaN or Inf; {kind.FORMAT} scales need finite values. Hint: find "
            "them with torch.isfinite(weight) and fix the layer first"
        )
    # 1. the 2:4 layout: kept values in position order plus their 2-bit positions.
    layout = compress(w)
    # 2. one scale per (row, group of G columns): RTN unless given.
    if scales is None:
        scales = group_scales(w, w != 0, quant)
    else:
        quant.check_scales(scales, rows, k)
    # 3. round each kept value on its group's grid (int4: and pack two codes per byte).
    per_value = scales.repeat_interleave(group_size // 2, dim=1)
    codes = round_to_grid(layout.values, per_value, quant.qmax).to(torch.int8)
    if kind.CODES_PER_BYTE == 2:
        codes = pack_int4(codes)
    return kind(codes.contiguous(), layout.metadata, scales.contiguous(), (rows, k), group_size)


def compress_int4(
    weight: torch.Tensor, group_size: int = 128, *, scales: torch.Tensor | None = None
) -> Int4Weight:
    """Compress a 2:4 weight with its kept values quantized to group-wise int4.

    Parameters
    ----------
    weight : torch.Tensor
        ``[rows, K]``, 2:4 along rows, finite; ``K`` a multiple of 4 and of ``group_size``.
    group_size : int
        ``G``, input columns per scale (a multiple of 4 dividing ``K``).
    scales : torch.Tensor, optional
        ``[rows, K/G]`` scales to use instead of RTN's ``max|kept| / 7``: pass the scales
        :func:`explorer.pruning.prune` recorded (``result.scales``) so that a weight already on
        its grid is stored exactly. Values off the grid are rounded to it.

    Returns
    -------
    Int4Weight

    Raises
    ------
    ValueError
        NaN or Inf weights, a weight that is not 2:4, ``K`` not a multiple of 4, a group size
        that does not divide ``K``, or bad ``scales``.

    Examples
    --------
    >>> c = compress_int4(torch.tensor([[0.0, 3.0, 0.0, -7.0, 14.0, 0.0, 0.0, 0.0]]), 4)
    >>> c.int_codes().tolist(), c.scales.tolist()
    ([[3, -7, 7, 0]], [[1.0, 2.0]])
    """
    return Int4Weight.compress(weight, group_size, scales=scales)


def compress_int8(
    weight: torch.Tensor, group_size: int = 128, *, scales: torch.Tensor | None = None
) -> Int8Weight:
    """Compress a 2:4 weight with its kept values quantized to group-wise int8.

    As :func:`compress_int4`, one code a byte; round to nearest takes ``max|kept| / 127``, and
    ``scales`` are those ``prune(..., quantize="int8")`` recorded.

    Parameters
    ----------
    weight, group_size, scales
        As :func:`compress_int4`.

    Returns
    -------
    Int8Weight

    Examples
    --------
    >>> c = compress_int8(torch.tensor([[0.0, 3.0, 0.0, -127.0, 254.0, 0.0, 0.0, 0.0]]), 4)
    >>> c.int_codes().tolist(), c.scales.tolist()
    ([[3, -127, 127, 0]], [[1.0, 2.0]])
    """
    return Int8Weight.compress(weight, group_size, scales=scales)


def int4_reference(
    x: torch.Tensor, weight: GroupCodedWeight, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The dense masked product ``x @ W_deq^T + bias``: the oracle for int4 and int8 2:4 kernels.

    Parameters
    ----------
    x : torch.Tensor
        Activations ``[..., K]``.
    weight : Int4Weight or Int8Weight
        The compressed weight; ``W_deq`` is its ``decompress()``.
    bias : torch.Tensor, optional
        ``[rows]``, added after the product.

    Returns
    -------
    torch.Tensor
        ``[..., rows]`` in float32.

    Examples
    --------
    >>> c = compress_int4(torch.tensor([[0.0, 1.0, 0.0, 7.0]]), group_size=4)
    >>> int4_reference(torch.ones(1, 4), c, torch.tensor([0.5])).tolist()
    [[8.5]]
    """
    y = x.float() @ weight.decompress().T
    return y if bias is None else y + bias.float()
