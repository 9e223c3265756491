"""torch's int4 weight-only kernel as a dense route: which layers it takes, and their packing.

``aten._weight_int4pack_mm`` is what a user deploying int4 weights runs on a GPU, so it is the
baseline the 2:4 + int4 kernel is measured against (:class:`~explorer.gpu.Int4Linear`). It takes
bfloat16 activations, ``out_features`` a multiple of 8, ``in_features`` a multiple of 128 and a
few group sizes; :func:`torch_int4_takes` says why a layer is refused, and
:func:`torch_int4_parts` gives the same dequantized weight in the layout that kernel is built from.
"""

from __future__ import annotations

import torch

from explorer.compression import CompressedWeight
from explorer.dtypes import dtype_name
from explorer.lowbit import Int4Weight

__all__ = ["INNER_K_TILES", "TORCH_INT4_GROUPS", "torch_int4_parts", "torch_int4_takes"]

#: Group sizes torch's int4 weight-only kernel takes.
TORCH_INT4_GROUPS = (32, 64, 128, 256)
#: The packing torch's int4 kernel is given (``inner_k_tiles``): K must be a multiple of 128.
INNER_K_TILES = 8


def torch_int4_takes(rows: int, k: int, group_size: int, dtype: torch.dtype) -> str | None:
    """Why torch's int4 weight-only kernel cannot run a layer (None: it can).

    Parameters
    ----------
    rows, k, group_size : int
        The layer's output and input features, and its input columns per scale.
    dtype : torch.dtype
        The activations' dtype.

    Returns
    -------
    str or None

    Examples
    --------
    >>> torch_int4_takes(4096, 4096, 128, torch.bfloat16) is None
    True
    >>> torch_int4_takes(4096, 4096, 128, torch.float16)
    "torch's int4 kernel takes bfloat16 activations, not float16"
    """
    if dtype != torch.bfloat16:
        return f"torch's int4 kernel takes bfloat16 activations, not {dtype_name(dtype)}"
    if rows % 8:
        return f"torch's int4 kernel needs out_features a multiple of 8, got {rows}"
    if k % (16 * INNER_K_TILES):
        return f"torch's int4 kernel needs in_features a multiple of 128, got {k}"
    if group_size not in TORCH_INT4_GROUPS:
        return f"torch's int4 kernel takes group sizes {TORCH_INT4_GROUPS}, not {group_size}"
    return None


def torch_int4_parts(weight: Int4Weight) -> tuple[torch.Tensor, torch.Tensor]:
    """The same dequantized weight in the layout torch's int4 kernel is built from.

    Parameters
    ----------
    weight : Int4Weight

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``uint8 [N, K/2]``, two unsigned codes ``q + 8`` per byte with the even column in the
        high nibble (what ``aten._convert_weight_to_int4pack`` takes), and the ``bfloat16
        [K/G, N, 2]`` scales and zero points (zero points 0), so that torch computes
        ``(u - 8) * s = q * s``: the 2:4 zeros are the code 0.

    Examples
    --------
    >>> from explorer.lowbit import compress_int4
    >>> w = compress_int4(torch.tensor([[0.0, 3.0, 0.0, -7.0]]), group_size=4)
    >>> packed, scales = torch_int4_parts(w)
    >>> packed.tolist(), scales.shape
    ([[139, 129]], torch.Size([1, 1, 2]))
    """
    scales = weight.scales.float()
    # the kept codes scattered to their columns, zeros elsewhere: the 2:4 layout's own decoding
    codes = CompressedWeight(weight.int_codes(), weight.metadata, weight.shape).decompress()
    unsigned = (codes.to(torch.int16) + 8).to(torch.uint8)
    packed = (unsigned[:, 0::2] << 4) | unsigned[:, 1::2]
    zeros = torch.zeros_like(scales)
    scales_and_zeros = torch.stack([scales.t(), zeros.t()], dim=-1).to(torch.bfloat16)
    return packed.contiguous(), scales_and_zeros.contiguous()
