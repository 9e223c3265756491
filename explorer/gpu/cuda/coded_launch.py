"""How a call of the low-bit decode kernel is launched: feeding, warps, chunks in flight.

:class:`Int4LaunchConfig` names one kernel of ``kernels/decode24_int4.cu`` (codes, feeding,
token tiles, chunks in flight) and its block size; :func:`default_int4_config` is the choice
made unless one is given, from a sweep of the settings on an H100
(``benchmarks/int4_decode.py``). :mod:`explorer.gpu.cuda.decode_int4` runs the calls.

Examples
--------
>>> default_int4_config(4096, 4096, 1, 132)
Int4LaunchConfig('sp', warps=16, ahead=1)
>>> default_int4_config(4096, 4096, 1, 132, "int8").kernel_name(torch.bfloat16, 1)
'int8_sp_bf16_t8_d1'
>>> default_int4_config(4096, 4096, 16, 132, group_size=64).defines
(('CHUNK_SCALES', 2),)
"""

from __future__ import annotations

import math
from functools import cache

import torch

from explorer.gpu.cuda.code_tiles import chunk_scales, tile_bytes

__all__ = [
    "CHUNK",
    "METHODS",
    "Int4LaunchConfig",
    "default_int4_config",
    "kernel_build",
    "launch_config",
    "multiprocessor_count",
    "token_tiles",
]

#: Input columns one warp step covers; K must be a multiple of it, and the group size too unless
#: it is 32 or 64 (several scales a chunk, read by a build of its own: :func:`kernel_build`).
CHUNK = 128
#: How the kernel feeds the tensor cores: ``"spa"`` sparse mma on the stored pairs staged through
#: shared memory by asynchronous copies, ``"sp"`` the same loaded into registers (which runs where
#: up to 8 tokens: :func:`default_int4_config`); ``"ex"`` dense mma after expanding each pair to its
#: four slots (the default above 8 tokens, where its activation loads are wider; with groups of 64
#: or 32 it scales the kept values before its mma, rounded once to 16 bits).
METHODS = ("spa", "sp", "ex")
#: Threads a block may have, per (staged, token tiles, chunks ahead): the kernels' launch bounds.
_MAX_THREADS = {
    (False, 1, 1): 1024,
    (False, 1, 2): 512,
    (False, 2, 1): 1024,
    (False, 2, 2): 512,
    (False, 4, 1): 512,
    (False, 4, 2): 256,
    (False, 8, 1): 256,
    (False, 8, 2): 256,
    (True, 1, 2): 1024,
    (True, 1, 4): 1024,
    (True, 2, 2): 512,
    (True, 2, 4): 512,
    (True, 4, 2): 512,
    (True, 4, 4): 512,
    (True, 8, 2): 256,
    (True, 8, 4): 256,
}
#: The most shared memory a block takes without asking the driver for more (a staged chunk is
#: one tile: :func:`~explorer.gpu.cuda.code_tiles.tile_bytes`).
_SHARED_LIMIT = 48 * 1024
_TARGET_WARPS_PER_SM = 16


def kernel_build(group_size: int) -> tuple[tuple[str, int], ...]:
    """The build of ``decode24_int4.cu`` that reads tiles of ``group_size`` (its ``-D`` values).

    Parameters
    ----------
    group_size : int
        The weight's columns per scale.

    Returns
    -------
    tuple of (str, int) pairs
        Empty for the default build (a multiple of 128), ``CHUNK_SCALES`` for 64 or 32.

    Examples
    --------
    >>> kernel_build(128), kernel_build(64), kernel_build(32)
    ((), (('CHUNK_SCALES', 2),), (('CHUNK_SCALES', 4),))
    """
    scales = chunk_scales(group_size)
    return (("CHUNK_SCALES", scales),) if scales > 1 else ()


def token_tiles(tokens: int) -> int:
    """Token tiles of 8 the kernel is compiled for: 1, 2, 4 or 8.

    Parameters
    ----------
    tokens : int
        Rows of the input.

    Returns
    -------
    int
        The tiles, a power of two up to 8.

    Examples
    --------
    >>> [token_tiles(t) for t in (1, 8, 9, 16, 17, 33, 64)]
    [1, 1, 2, 2, 4, 8, 8]
    """
    need = math.ceil(tokens / 8)
    return 1 << max(0, math.ceil(math.log2(max(need, 1))))


@cache
def multiprocessor_count(device: int) -> int:
    """Streaming multiprocessors of CUDA device ``device`` (read once per process).

    Parameters
    ----------
    device : int
        The CUDA device index.

    Returns
    -------
    int
        The multiprocessor count.
    """
    return torch.cuda.get_device_properties(device).multi_processor_count


class Int4LaunchConfig:
    """How one call is launched: feeding ``method``, ``warps`` per block, chunks ``ahead``, codes.

    Parameters
    ----------
    method : str
        One of :data:`METHODS`.
    warps : int
        Warps per block (they split K); the block covers 16 output rows.
    ahead : int
        128-column chunks each warp has in flight: 1 or 2 loaded into registers (``"sp"``,
        ``"ex"``), 2 or 4 shared-memory stages (``"spa"``).
    fmt : str
        The weight's codes, ``"int4"`` or ``"int8"`` (the kernels and their stages differ).
    group_size : int
        The weight's columns per scale: 32 or 64 take the build of the kernels that reads
        several scales a chunk (:attr:`defines`); any multiple of 128 the default build.

    Raises
    ------
    ValueError
        An unknown method, warps and ahead the kernel is not built for (the message gives
        the allowed range), or a group size the tiles cannot hold.

    Examples
    --------
    >>> Int4LaunchConfig("ex", 8, 2).kernel_name(torch.bfloat16, 16)
    'int4_ex_bf16_t16_d2'
    >>> Int4LaunchConfig("spa", 16, 2).kernel_name(torch.float16, 1), Int4LaunchConfig().shared
    ('int4_spa_f16_t8_s2', 30720)
    >>> Int4LaunchConfig("sp", 32, 2).check(1)
    Traceback (most recent call last):
    ...
    ValueError: warps = 32 with ahead = 2 at 8 tokens a tile: expected 1 to 16 warps
    >>> Int4LaunchConfig("spa", 8, 4, fmt="int8").kernel_name(torch.bfloat16, 1)
    'int8_spa_bf16_t8_s4'
    >>> Int4LaunchConfig("sp", 16, 1, group_size=32)
    Int4LaunchConfig('sp', warps=16, ahead=1, group_size=32)
    >>> Int4LaunchConfig("ex", 8, 1, group_size=48)
    Traceback (most recent call last):
    ...
    ValueError: group_size = 48: the tiles hold groups of 32, 64 or a multiple of 128 columns
    """

    __slots__ = ("ahead", "format", "group_size", "method", "warps")

    def __init__(
        self,
        method: str = "spa",
        warps: int = 8,
        ahead: int = 4,
        fmt: str = "int4",
        group_size: int = CHUNK,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method = {method!r}; expected one of {METHODS}")
        if fmt not in ("int4", "int8"):
            raise ValueError(f"fmt = {fmt!r}; the decode kernels read 'int4' or 'int8' codes")
        allowed = (2, 4) if method == "spa" else (1, 2)
        if ahead not in allowed:
            raise ValueError(
                f"ahead = {ahead!r}; the {method!r} kernels are built for {allowed} chunks ahead"
            )
        chunk_scales(group_size)  # a group size the tiles hold, else the error names it
        self.method, self.warps, self.ahead, self.format = method, int(warps), int(ahead), fmt
        self.group_size = int(group_size)

    @property
    def defines(self) -> tuple[tuple[str, int], ...]:
        """The build of ``decode24_int4.cu`` the kernel comes from (:func:`kernel_build`)."""
        return kernel_build(self.group_size)

    @property
    def shared(self) -> int:
        """Bytes of shared memory a block takes (partial sums, and the stages of ``"spa"``)."""
        tile = tile_bytes(self.format, self.group_size)
        stages = self.warps * self.ahead * tile if self.method == "spa" else 0
        return 512 * self.warps + stages

    def max_warps(self, tiles: int) -> int:
        """Most warps per block for ``tiles`` token tiles (launch bound and shared memory).

        Parameters
        ----------
        tiles : int
            Token tiles of 8 (1, 2, 4 or 8).

        Returns
        -------
        int
            The most warps per block.
        """
        top = _MAX_THREADS[(self.method == "spa", tiles, self.ahead)] // 32
        if self.method == "spa":
            tile = tile_bytes(self.format, self.group_size)
            top = min(top, _SHARED_LIMIT // (512 + self.ahead * tile))
        return top

    def check(self, tiles: int) -> None:
        """Raise unless the kernel for ``tiles`` token tiles takes this many warps.

        Parameters
        ----------
        tiles : int
            Token tiles of 8 (1, 2, 4 or 8).
        """
        top = self.max_warps(tiles)
        if not 1 <= self.warps <= top:
            raise ValueError(
                f"warps = {self.warps} with ahead = {self.ahead} at {8 * tiles} tokens a tile: "
                f"expected 1 to {top} warps"
            )

    def kernel_name(self, dtype: torch.dtype, tokens: int) -> str:
        """The kernel's name in ``decode24_int4.cu`` for ``tokens`` rows of ``dtype`` (and the codes).

        Parameters
        ----------
        dtype : torch.dtype
            The activations' dtype (bfloat16, else float16).
        tokens : int
            Rows of the input.

        Returns
        -------
        str
            The kernel's name.
        """
        kind = "bf16" if dtype == torch.bfloat16 else "f16"
        step = "s" if self.method == "spa" else "d"
        tiles = 8 * token_tiles(tokens)
        return f"{self.format}_{self.method}_{kind}_t{tiles}_{step}{self.ahead}"

    def __repr__(self) -> str:
        codes = "" if self.format == "int4" else f", fmt={self.format!r}"
        if chunk_scales(self.group_size) > 1:
            codes += f", group_size={self.group_size}"
        return f"Int4LaunchConfig({self.method!r}, warps={self.warps}, ahead={self.ahead}{codes})"


def default_int4_config(
    rows: int, k: int, tokens: int, sms: int, fmt: str = "int4", group_size: int = CHUNK
) -> Int4LaunchConfig:
    """The launch used unless one is given.

    From a sweep of launch settings on an H100 (``benchmarks/int4_decode.py``; LLaMA-3-8B layer
    shapes, 1, 4 and 16 tokens, weights in tiles).

    Up to 8 tokens the sparse kernel with the weight in registers: 16 warps with one chunk each
    in flight (every chunk of a 4096-column layer in flight at once), 32 at 1 token on grids of
    fewer blocks than SMs; on grids of 4 or more blocks per SM 4 warps with 2 chunks each (at 1
    token) or staged through shared memory in 2 stages each (2 to 8 tokens). Above 8
    tokens the expansion kernel, whose activation loads are wider, with about 16 warps per SM
    over the grid (a block covers 16 rows and its warps split K, so layers with few rows take
    more warps per block), or 8 warps with one chunk each ahead on grids of 4 or more blocks
    per SM up to 16 tokens.

    Parameters
    ----------
    rows : int
        The weight's rows (output features).
    k : int
        The weight's columns (input features).
    tokens : int
        Rows of the input.
    sms : int
        The GPU's multiprocessor count.
    fmt : str
        The weight's codes, ``"int4"`` or ``"int8"``. int8 takes the int4 choices: the sweep of
        ``benchmarks/int4_decode.py --format int8`` (H100, commit ec13a58; the four shapes at 1,
        4 and 16 tokens) found them the fastest in 10 of 12 cases and within 4% in the others.
    group_size : int
        The weight's columns per scale. Groups of 64 or 32 take the same choices (their build of
        the kernels, :func:`kernel_build`).

    Returns
    -------
    Int4LaunchConfig
        The kernel, warps and stages.

    Examples
    --------
    >>> default_int4_config(4096, 4096, 1, 132), default_int4_config(1024, 4096, 1, 132)
    (Int4LaunchConfig('sp', warps=16, ahead=1), Int4LaunchConfig('sp', warps=32, ahead=1))
    >>> default_int4_config(14336, 4096, 1, 132), default_int4_config(14336, 4096, 4, 132)
    (Int4LaunchConfig('sp', warps=4, ahead=2), Int4LaunchConfig('spa', warps=4, ahead=2))
    >>> default_int4_config(1024, 4096, 16, 132), default_int4_config(14336, 4096, 16, 132)
    (Int4LaunchConfig('ex', warps=16, ahead=2), Int4LaunchConfig('ex', warps=8, ahead=1))
    >>> default_int4_config(4096, 4096, 16, 132, group_size=64)
    Int4LaunchConfig('ex', warps=8, ahead=2, group_size=64)
    """
    tiles = token_tiles(tokens)
    blocks = math.ceil(rows / 16)
    chunks = max(1, k // CHUNK)
    many = blocks >= 4 * sms
    if tiles == 1:
        if many:
            config = Int4LaunchConfig("sp" if tokens == 1 else "spa", 4, 2, fmt, group_size)
        else:
            warps = 32 if tokens == 1 and blocks < sms else 16
            config = Int4LaunchConfig("sp", warps, 1, fmt, group_size)
        config.warps = max(1, min(config.warps, chunks))
        return config
    if tiles == 2 and many:
        config = Int4LaunchConfig("ex", 8, 1, fmt, group_size)
        config.warps = max(1, min(config.warps, chunks))
        return config
    config = Int4LaunchConfig("ex", 1, 2 if tiles <= 2 else 1, fmt, group_size)
    want = sms * _TARGET_WARPS_PER_SM / max(blocks, 1)
    warps = 1 << max(0, round(math.log2(max(want, 1))))
    top = min(config.max_warps(tiles), 1 << int(math.log2(max(1, chunks // config.ahead))))
    config.warps = int(max(1, min(warps, top)))
    return config


def launch_config(
    config: Int4LaunchConfig | None,
    rows: int,
    k: int,
    tokens: int,
    device: int,
    fmt: str,
    group_size: int,
) -> Int4LaunchConfig:
    """The launch of one call: ``config`` checked against the weight, or the default.

    Parameters
    ----------
    config : Int4LaunchConfig or None
        The launch asked for; None takes :func:`default_int4_config`.
    rows, k, tokens : int
        The weight's rows and columns, and the input's rows.
    device : int
        The CUDA device index (its multiprocessor count picks the default).
    fmt : str
        The weight's codes, ``"int4"`` or ``"int8"``.
    group_size : int
        The weight's columns per scale.

    Returns
    -------
    Int4LaunchConfig

    Raises
    ------
    ValueError
        A launch for other codes, for groups read by another build, or with more warps than
        the kernel takes at ``tokens`` (the message names the fix).
    """
    if config is None:
        sms = multiprocessor_count(device)
        config = default_int4_config(rows, k, tokens, sms, fmt, group_size)
    if config.format != fmt:
        raise ValueError(
            f"the launch config is for {config.format} codes and the weight holds {fmt}. Hint: "
            f"Int4LaunchConfig(..., fmt={fmt!r}), or leave config out."
        )
    if config.defines != kernel_build(group_size):
        raise ValueError(
            f"the launch config is for groups of {config.group_size} columns and the weight has "
            f"groups of {group_size}, whose tiles the kernel reads another way. Hint: "
            f"Int4LaunchConfig(..., group_size={group_size}), or leave config out."
        )
    config.check(token_tiles(tokens))
    return config
