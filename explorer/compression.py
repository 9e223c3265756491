"""What 2:4 compression does, emulated on the CPU in pure torch (for teaching).

A 2:4 weight ``W[rows, K]`` keeps at most 2 of every 4 consecutive entries along each row.
:func:`compress` stores it the way sparse tensor cores think of it:

* ``values``: ``[rows, K/2]``, the two kept entries of each group of 4, in position order;
* ``metadata``: ``[rows, ceil(K/8)]`` uint8, the 2-bit positions of those two entries.

Metadata layout (documented here; cuSPARSELt's real compressed buffer is opaque and tiled
differently): group ``g`` of a row has positions ``i0 < i1`` in ``0..3``; its nibble is
``i0 | (i1 << 2)``; two groups share a byte, the even group in the low nibble
(``byte = nibble(2j) | nibble(2j + 1) << 4``). A group with fewer than 2 nonzeros is padded with
the lowest unused positions holding explicit zeros, as the hardware does, so every group always
stores exactly two values. The emulation therefore stores ``K/2`` values plus ``K/8`` bytes of
metadata per row: 9/16 of the dense bytes for 16-bit weights.

This is also exactly what the explorer's own GPU decode kernel reads
(:mod:`explorer.gpu.cuda.decode`, ``kernels/decode24.cu``): ``compress`` runs on the weight's
device, and the kernel reorders K inside each tensor-core step instead of the bytes in memory, so
the layout shown here needs no GPU-specific interleaving. With ``int8=True`` the kept values are
quantized per output row (symmetric, ``scale = max|kept| / 127``, stored as float32 ``scale``):
``K/2`` bytes of values plus ``K/8`` of metadata, 5/16 of a 16-bit dense weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _html
from .dtypes import dtype_name

__all__ = ["CompressedWeight", "compress"]


@dataclass(frozen=True, eq=False)
class CompressedWeight:
    """A 2:4 weight as kept values plus 2-bit position metadata (see the module docstring).

    Attributes
    ----------
    values : torch.Tensor
        ``[rows, K/2]``, the weight's dtype.
    metadata : torch.Tensor
        ``[rows, ceil(K/8)]`` uint8, two 4-bit group codes per byte.
    shape : tuple of int
        The dense shape ``(rows, K)``.
    scale : torch.Tensor or None
        ``[rows]`` float32 per-row scales of int8 (or float8_e4m3fn) ``values``, ``None`` for
        values that are the weight's own: the weight is ``values * scale[:, None]`` in float32.
    """

    values: torch.Tensor
    metadata: torch.Tensor
    shape: tuple[int, int]
    scale: torch.Tensor | None = None

    # -- decoding ---------------------------------------------------------------------------------
    def positions(self) -> torch.Tensor:
        """``[rows, K/4, 2]`` int64: the in-group positions of the two stored values."""
        rows, k = self.shape
        groups = k // 4
        nib = torch.stack([self.metadata & 0xF, self.metadata >> 4], dim=-1)
        nib = nib.reshape(rows, 2 * self.metadata.shape[1])
        nib = nib[:, :groups].long()
        return torch.stack([nib & 3, nib >> 2], dim=-1)

    def columns(self) -> torch.Tensor:
        """``[rows, K/2]`` int64: the dense column of every stored value."""
        rows, k = self.shape
        base = torch.arange(k // 4, device=self.metadata.device).mul(4)[None, :, None]
        return (self.positions() + base).reshape(rows, k // 2)

    def decompress(self) -> torch.Tensor:
        """The dense masked weight, exactly.

        Examples
        --------
        >>> w = torch.tensor([[0.0, 1.5, 0.0, -2.0]])
        >>> torch.equal(compress(w).decompress(), w)
        True

        An int8 weight decompresses to float32 ``values * scale``:

        >>> compress(torch.tensor([[0.0, 2.0, 0.0, -254.0]]), int8=True).decompress().tolist()
        [[0.0, 2.0, 0.0, -254.0]]
        """
        rows, k = self.shape
        vals = self.values
        if self.scale is not None:
            vals = vals.float() * self.scale[:, None]
        out = torch.zeros(rows, k, dtype=vals.dtype, device=vals.device)
        out.scatter_(1, self.columns(), vals)
        return out

    def matmul(self, x: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """``x @ W^T`` computed from the compressed form (gather, multiply, add).

        Parameters
        ----------
        x : torch.Tensor
            ``[..., K]``.
        chunk : int
            Rows of ``W`` handled at a time (bounds the gathered temporary).

        Examples
        --------
        >>> w = torch.tensor([[0.0, 1.0, 0.0, 2.0]])
        >>> compress(w).matmul(torch.tensor([[1.0, 1.0, 1.0, 1.0]])).tolist()
        [[3.0]]
        """
        rows, k = self.shape
        if x.shape[-1] != k:
            raise ValueError(f"x has {x.shape[-1]} features, expected {k} (the weight's K)")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, k)
        cols = self.columns()
        vals = self.values
        if self.scale is not None:
            vals = vals.float() * self.scale[:, None]
        vals = vals.to(torch.promote_types(x2.dtype, vals.dtype))
        out = []
        for r0 in range(0, rows, chunk):
            c = cols[r0 : r0 + chunk]  # [r, K/2]
            g = x2[:, c]  # [T, r, K/2]: only the inputs the kept weights touch
            out.append((g * vals[r0 : r0 + chunk][None]).sum(-1))
        y = torch.cat(out, dim=1) if out else x2.new_zeros(x2.shape[0], 0)
        return y.reshape(*lead, rows)

    # -- sizes and display ------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of values plus metadata (plus the int8 scales)."""
        scale = 0 if self.scale is None else self.scale.numel() * self.scale.element_size()
        return self.values.numel() * self.values.element_size() + self.metadata.numel() + scale

    @property
    def dense_nbytes(self) -> int:
        """Bytes of the dense weight (16-bit for an int8 one, the activations' type)."""
        size = 2 if self.scale is not None else self.values.element_size()
        return self.shape[0] * self.shape[1] * size

    def __repr__(self) -> str:
        ratio = self.nbytes / max(self.dense_nbytes, 1)
        return (
            f"CompressedWeight({self.shape[0]}x{self.shape[1]} 2:4, "
            f"{dtype_name(self.values.dtype)}"
            f"{' with per-row scales' if self.scale is not None else ''}, "
            f"values {tuple(self.values.shape)}, "
            f"metadata {tuple(self.metadata.shape)} uint8, {ratio:.1%} of dense bytes)"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("dense shape", f"{self.shape[0]} x {self.shape[1]}"),
            ("values", f"{tuple(self.values.shape)} {self.values.dtype}"),
            ("metadata", f"{tuple(self.metadata.shape)} uint8 (two 2-bit indices per group)"),
            ("bytes", f"{self.nbytes:,} of {self.dense_nbytes:,} dense"),
        ]
        if self.shape[0] and self.shape[1]:
            pos = self.positions()[0, : min(4, self.shape[1] // 4)].tolist()
            rows.append(("row 0 positions", ", ".join(f"{a}{b}" for a, b in pos)))
        return _html.table(["CompressedWeight", ""], rows)


def compress(weight: torch.Tensor, pattern: str = "2:4", *, int8: bool = False) -> CompressedWeight:
    """Compress a 2:4 weight into kept values and 2-bit position metadata (pure torch).

    Parameters
    ----------
    weight : torch.Tensor
        ``[rows, K]`` with at most 2 nonzeros in every group of 4 along each row; ``K`` a
        multiple of 4. The result stays on the weight's device (the GPU decode kernel reads it
        as it is).
    pattern : str
        Only ``"2:4"`` is emulated.
    int8 : bool
        Quantize the kept values to int8 with one float32 scale per row (weight-only int8).

    Returns
    -------
    CompressedWeight

    Raises
    ------
    ValueError
        Another pattern, a non-2-D weight, a non-finite weight, or a weight that is not 2:4
        (the message says where, from :func:`explorer.checks.check_pattern`).

    Examples
    --------
    >>> c = compress(torch.tensor([[0.0, 3.0, 0.0, 4.0, 5.0, 0.0, 0.0, 0.0]]))
    >>> c.values.tolist(), c.metadata.tolist()
    ([[3.0, 4.0, 5.0, 0.0]], [[77]])
    >>> compress(torch.tensor([[0.0, 3.0, 0.0, -6.0]]), int8=True).values.tolist()
    [[64, -127]]
    """
    from .checks import check_pattern

    if pattern != "2:4":
        raise ValueError(f"pattern {pattern!r} is not emulated; only '2:4' is")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError(
            f"weight must be a 2-D tensor (rows, K), got "
            f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}"
        )
    rows, k = weight.shape
    if k % 4:
        raise ValueError(f"K = {k} is not a multiple of 4; 2:4 groups run along rows")
    w = weight.detach()
    groups = k // 4
    g = w.reshape(rows, groups, 4)
    nz = g != 0
    if rows and k and bool((nz.sum(-1) > 2).any()):
        report = check_pattern(w.cpu(), "2:4")
        raise ValueError(
            f"weight is not 2:4: {report.violations} of {report.groups} groups have more "
            f"than 2 nonzeros (first at {list(report.first_violations[:3])}). Hint: prune "
            "it with explorer.make_mask(weight, '2:4') first."
        )
    # 1. rank positions: nonzeros first (in position order), then zeros (lowest first)
    slot = torch.arange(4, device=w.device)
    order = torch.argsort((~nz).to(torch.int8) * 4 + slot, dim=-1, stable=True)
    pos = order[..., :2].sort(dim=-1).values  # [rows, groups, 2], i0 < i1
    # 2. gather the kept values
    values = torch.gather(g, 2, pos).reshape(rows, groups * 2).contiguous()
    # 3. pack nibbles: i0 | i1 << 2, even group low
    nib = (pos[..., 0] | (pos[..., 1] << 2)).to(torch.uint8)
    if groups % 2:
        nib = torch.cat([nib, nib.new_zeros(rows, 1)], dim=1)
    nib = nib.reshape(rows, (groups + 1) // 2, 2)
    metadata = (nib[..., 0] | (nib[..., 1] << 4)).contiguous()
    scale = None
    if int8:
        values, scale = _quantize_rows(values)
    return CompressedWeight(values, metadata, (int(rows), int(k)), scale)


def _quantize_rows(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: ``q = round(v / s)``, ``s = max|v| / 127`` (1 for a zero row)."""
    v = values.float()
    if not bool(torch.isfinite(v).all()):
        raise ValueError(
            "the weight holds NaN or Inf; int8 scales need finite values. Hint: find the "
            "non-finite entries with torch.isfinite(weight) and fix the layer first."
        )
    amax = v.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(v / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.contiguous(), scale.contiguous()
