"""Group-wise symmetric integer grids for the kept weights of a sparse layer (pure torch).

A weight ``W[rows, K]`` is cut along ``K`` into groups of ``G`` input columns; each (row, group)
has one float32 scale ``s`` and its kept weights lie on the grid ``s * q``, ``q`` an integer in
``[-qmax, qmax]``: ``qmax = 7`` for ``"int4"`` (the code ``-8`` is never used, so the grid is
symmetric) and ``127`` for ``"int8"``. Round to nearest (RTN) picks ``s = max|kept| / qmax``
(1 for a group with no nonzero kept weight) and ``q = clamp(round(w / s))``.

This module holds only the grid: :func:`quantize_rtn` is the baseline "prune, then quantize";
:func:`explorer.pruning.prune` with ``quantize=`` quantizes inside SparseGPT's column loop
instead; :mod:`explorer.lowbit` packs int4 codes two per byte.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

__all__ = ["FORMATS", "Quantization", "group_scales", "quantize_rtn", "round_to_grid"]

#: Integer formats and the largest code magnitude each uses.
FORMATS = {"int4": 7, "int8": 127}


@dataclass(frozen=True)
class Quantization:
    """A group-wise symmetric integer format: which one and how many input columns a group.

    Attributes
    ----------
    format : str
        ``"int4"`` (codes in ``[-7, 7]``) or ``"int8"`` (codes in ``[-127, 127]``).
    group_size : int
        Input columns sharing a scale; a positive multiple of 4 (so 2:4 groups never straddle
        two scale groups) that divides the layer's ``K``.

    Examples
    --------
    >>> Quantization("int4", 128).qmax
    7
    >>> Quantization("int3")
    Traceback (most recent call last):
    ...
    ValueError: unknown quantize format 'int3'; choose one of 'int4', 'int8'
    """

    format: str = "int4"
    group_size: int = 128

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(
                f"unknown quantize format {self.format!r}; choose one of "
                f"{', '.join(map(repr, FORMATS))}"
            )
        g = self.group_size
        if isinstance(g, bool) or not isinstance(g, int) or g <= 0 or g % 4:
            raise ValueError(
                f"group_size must be a positive multiple of 4, got {g!r}; "
                "128 is the usual choice (e.g. group_size=128)"
            )

    @property
    def qmax(self) -> int:
        """The largest code magnitude (7 or 127)."""
        return FORMATS[self.format]

    def check_width(self, k: int, what: str = "the weight") -> None:
        """Raise if ``group_size`` does not divide ``k`` input columns.

        Parameters
        ----------
        k : int
            The number of input columns.
        what : str, optional
            What has them, for the message.

        Examples
        --------
        >>> Quantization("int4", 128).check_width(96)
        Traceback (most recent call last):
        ...
        ValueError: group_size=128 does not divide K=96 of the weight; choose a group size that divides it (e.g. group_size=96)
        """
        if k % self.group_size:
            hint = max((g for g in range(4, k + 1, 4) if k % g == 0 and g <= 128), default=None)
            raise ValueError(
                f"group_size={self.group_size} does not divide K={k} of {what}; choose a group "
                f"size that divides it"
                + (f" (e.g. group_size={hint})" if hint else " (K must be a multiple of 4)")
            )

    def check_scales(self, scales, rows: int, k: int) -> None:
        """Raise unless ``scales`` are float32 ``[rows, K / group_size]``, finite and positive.

        Parameters
        ----------
        scales : Any
            The scales to check.
        rows, k : int
            The weight's shape.

        Raises
        ------
        ValueError
            Naming what is wrong: the type, shape or dtype, or the first scale that is not
            finite and positive.

        Examples
        --------
        >>> Quantization("int8", 4).check_scales(torch.tensor([[1.0, 0.0]]), 1, 8)
        Traceback (most recent call last):
        ...
        ValueError: scales must be finite and positive; 1 of 2 are not (first at (0, 1), value 0.0)
        """
        want = (rows, k // self.group_size)
        if (
            not isinstance(scales, torch.Tensor)
            or tuple(scales.shape) != want
            or (scales.dtype != torch.float32)
        ):
            got = (
                (tuple(scales.shape), scales.dtype)
                if isinstance(scales, torch.Tensor)
                else type(scales)
            )
            raise ValueError(
                f"scales must be a {torch.float32} tensor of shape {want} for a {rows}x{k} weight "
                f"with group_size={self.group_size}, got {got}"
            )
        bad = ~(torch.isfinite(scales) & (scales > 0))
        if bool(bad.any()):
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"scales must be finite and positive; {int(bad.sum())} of {scales.numel()} are "
                f"not (first at {first}, value {float(scales[first])})"
            )

    def to_dict(self) -> dict:
        """The JSON form, ``{"format": ..., "group_size": ...}``."""
        return asdict(self)


def group_scales(weight: torch.Tensor, mask: torch.Tensor, quant: Quantization) -> torch.Tensor:
    """RTN scales ``max|kept| / qmax`` of each (row, group), float32 ``[rows, K/G]``.

    Groups with no nonzero kept weight get scale 1.

    Parameters
    ----------
    weight : torch.Tensor
        The ``[rows, K]`` weight.
    mask : torch.Tensor
        Its keep-mask, same shape.
    quant : Quantization
        The format and group size.

    Returns
    -------
    torch.Tensor

    Examples
    --------
    >>> w = torch.tensor([[7.0, 0.0, -14.0, 0.0]])
    >>> group_scales(w, w != 0, Quantization("int4", 4)).tolist()
    [[2.0]]
    """
    rows, k = weight.shape
    quant.check_width(k)
    groups = k // quant.group_size
    kept = (weight.detach().float() * mask).abs().reshape(rows, groups, quant.group_size)
    amax = kept.amax(dim=-1) if rows and k else kept.new_zeros(rows, groups)
    return torch.where(amax > 0, amax / quant.qmax, torch.ones_like(amax)).contiguous()


def round_to_grid(values: torch.Tensor, scale: torch.Tensor, qmax: int) -> torch.Tensor:
    """Integer codes ``clamp(round(values / scale), -qmax, qmax)`` (same shape, float32).

    A code of zero is always ``+0.0`` (never ``-0.0``), so a dequantized weight is bit for bit
    the one its codes and scales rebuild.

    Parameters
    ----------
    values : torch.Tensor
        The values.
    scale : torch.Tensor
        Their scales, broadcast against ``values``.
    qmax : int
        The largest code.

    Returns
    -------
    torch.Tensor

    Examples
    --------
    >>> round_to_grid(torch.tensor([0.9, -3.2, 100.0]), torch.tensor(1.0), 7).tolist()
    [1.0, -3.0, 7.0]
    """
    return torch.round(values.float() / scale).clamp_(-qmax, qmax).add_(0.0)


def quantize_rtn(
    weight: torch.Tensor, mask: torch.Tensor, format: str = "int4", group_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """Round the kept weights to nearest on their group's grid: the "prune, then quantize" baseline.

    Parameters
    ----------
    weight : torch.Tensor
        ``[rows, K]`` pruned weight (zeros where ``mask`` is False); not modified.
    mask : torch.Tensor
        Bool keep-mask of the same shape.
    format : str
        ``"int4"`` or ``"int8"`` (see :class:`Quantization`).
    group_size : int
        Input columns per scale; must divide ``K``.

    Returns
    -------
    tuple of torch.Tensor
        The dequantized weight (float32, exactly ``q * scale``, zeros where the mask is False)
        and the float32 scales ``[rows, K / group_size]``.

    Raises
    ------
    ValueError
        A shape mismatch, NaN or Inf weights, an unknown format or a bad group size.

    Examples
    --------
    >>> w = torch.tensor([[7.0, 0.0, -3.1, 0.0]])
    >>> deq, scales = quantize_rtn(w, w != 0, "int4", 4)
    >>> deq.tolist(), scales.tolist()
    ([[7.0, 0.0, -3.0, 0.0]], [[1.0]])
    """
    quant = Quantization(format, group_size)
    if weight.dim() != 2 or mask.shape != weight.shape:
        raise ValueError(
            f"weight must be 2-D and mask the same shape; got weight {tuple(weight.shape)} and "
            f"mask {tuple(mask.shape)}"
        )
    w = weight.detach().float()
    if not bool(torch.isfinite(w).all()):
        raise ValueError(
            "the weight holds NaN or Inf; quantization scales need finite values. Hint: find "
            "them with torch.isfinite(weight) and fix the layer first"
        )
    mask = mask.to(torch.bool)
    scales = group_scales(w, mask, quant)
    full = scales.repeat_interleave(quant.group_size, dim=1)
    deq = round_to_grid(w, full, quant.qmax).mul_(full).masked_fill_(~mask, 0.0)
    return deq, scales
