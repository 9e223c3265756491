"""A 2:4 + int4 (or int8) weight as a dense 16-bit matrix on the GPU: the dense route above 64 tokens.

torch's int4 weight-only kernel (``aten._weight_int4pack_mm``) is made for a few tokens: its time
grows with the token count (on an H100, 4096 x 4096 at 64 tokens took 84 us against cuBLAS's
15 us in bf16, docs/gpu.md), so a prefill through it runs many times slower than the bf16 model.
Above 64 tokens :class:`~explorer.gpu.Int4Linear` therefore dequantizes its weight once per call
with one kernel (``int4_dequant_*`` in ``kernels/decode24_int4.cu``: each value ``code * scale``
in fp32, rounded once) and hands the product to cuBLAS. The 16-bit weight lives only for the call.
Tiles of int8 codes take the ``int8_dequant_*`` kernels, the same method one code a byte.

:func:`dequantize_int4_reference` computes the same on any device; the GPU tests require the two
to be equal bit for bit.

Examples
--------
>>> from explorer.gpu.cuda.code_tiles import tile_coded_weight
>>> from explorer.lowbit import compress_int4
>>> tiles = tile_coded_weight(compress_int4(torch.tensor([[0.0, 2.0, 0.0, -7.0] * 32])))
>>> dequantize_int4_reference(tiles, torch.bfloat16)[0, :4].tolist()
[0.0, 2.0, 0.0, -7.0]
"""

from __future__ import annotations

import math

import torch

from explorer.gpu.cuda.code_tiles import CodeTiles, untile_coded_weight
from explorer.gpu.cuda.coded_launch import kernel_build
from explorer.gpu.cuda.launch import Launcher, current_stream

__all__ = ["Int4Dequantizer", "dequantize_int4_reference"]

_THREADS = 256
#: Input columns one thread writes.
_COLUMNS = 32
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}


def dequantize_int4_reference(tiles: CodeTiles, dtype: torch.dtype) -> torch.Tensor:
    """What :class:`Int4Dequantizer` returns: ``code * scale`` in float32, rounded once.

    Parameters
    ----------
    tiles : CodeTiles
        The weight, on any device.
    dtype : torch.dtype
        ``torch.bfloat16`` or ``torch.float16``.

    Returns
    -------
    torch.Tensor
        ``[N, K]`` of ``dtype`` on the tiles' device.
    """
    return untile_coded_weight(tiles).decompress().to(dtype)


class Int4Dequantizer:
    """The dense 16-bit weight of one tiled int4 or int8 weight, one kernel launch per call.

    The launch is set up once (the tiles' pointer and shape written once, launched through the
    CUDA driver on torch's current stream), so a call costs an allocation and one launch.

    Parameters
    ----------
    tiles : CodeTiles
        On a CUDA device.
    dtype : torch.dtype
        ``torch.bfloat16`` or ``torch.float16``, the weight's dtype.

    Raises
    ------
    ValueError
        Tiles not on a CUDA device, or another dtype.

    Examples
    --------
    >>> from explorer.gpu.cuda.code_tiles import tile_coded_weight  # doctest: +GPU
    >>> from explorer.lowbit import compress_int4  # doctest: +GPU
    >>> w = compress_int4(torch.tensor([[0.0, 2.0, 0.0, -7.0] * 32], device="cuda"))  # doctest: +GPU
    >>> Int4Dequantizer(tile_coded_weight(w), torch.bfloat16)()[0, :4].tolist()  # doctest: +GPU
    [0.0, 2.0, 0.0, -7.0]
    """

    def __init__(self, tiles: CodeTiles, dtype: torch.dtype) -> None:
        if tiles.device.type != "cuda":
            raise ValueError(
                f"the tiles are on {tiles.device}; the {tiles.format} dequantization kernel needs a "
                "CUDA device. Hint: dequantize_int4_reference on the CPU."
            )
        if dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype}: the dequantized weight is bfloat16 or float16")
        from explorer.gpu.cuda.sources import compiled_function

        n, k = tiles.shape
        self.device, self.dtype, self.shape, self.format = tiles.device, dtype, (n, k), tiles.format
        self._dev = tiles.device.index or 0
        name = f"{tiles.format}_dequant_{_DTYPES[dtype]}"
        build = kernel_build(tiles.group_size)  # groups of 64 or 32: the build that reads them
        function = compiled_function("decode24_int4", name, self._dev, build)
        fixed = {0: tiles.data.data_ptr(), 2: n, 3: k}
        self._launcher = Launcher(function, ("u64", "u64", "i32", "i32"), fixed)
        self._grid = (max(1, math.ceil(n * k // _COLUMNS / _THREADS)), 1, 1)
        self._keep = tiles  # its pointer is written in the launch

    def __call__(self) -> torch.Tensor:
        """The ``[N, K]`` weight, ``code * scale`` rounded once to the dtype."""
        w = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        stream = current_stream(self._dev)
        self._launcher.launch_changed(self._grid, (_THREADS, 1, 1), 0, stream, (w.data_ptr(),))
        return w

    def __repr__(self) -> str:
        n, k = self.shape
        dtype = str(self.dtype).removeprefix("torch.")
        return f"Int4Dequantizer({n}x{k} {self.format}, {dtype})"
