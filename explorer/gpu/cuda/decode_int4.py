"""2:4 on top of int4 or int8: ``Y = X W^T (+ b)`` for 1 to 64 rows of ``X``.

The weight is 2:4 and its kept values are group-wise int4 codes
(:class:`explorer.lowbit.Int4Weight`) or int8 codes (:class:`explorer.lowbit.Int8Weight`), which
the kernel reads rearranged once into contiguous tiles of 16 rows and 128 columns
(:mod:`explorer.gpu.cuda.code_tiles`). Every function here takes either; the int8 kernels are
the int4 ones reading one code a byte (5.25 bits a weight with ``G = 128``, a third of a 16-bit
dense weight).

A decode step reads every weight once, so its time is the time to move the weight. An
:class:`~explorer.lowbit.Int4Weight` holds 3 + 32 / G bits a weight (kept codes, 2-bit
positions, one float32 scale per group of ``G`` columns): 3.25 bits for ``G = 128``, about a
fifth of a 16-bit dense weight. The kernel (``kernels/decode24_int4.cu``) turns the codes into
16-bit integers exactly, multiplies them with the activations on the tensor cores with fp32
accumulation (the sparse ``mma.sp`` on the stored pairs up to 8 tokens, the weight staged
through shared memory; a dense ``mma`` after expanding the pairs above), and applies each
group's scale in fp32, once per group (per 128 columns for groups of 128 or more); the file's
header documents the layout and the method. What it reaches against dense bf16 and torch's int4
kernel is measured by ``benchmarks/int4_decode.py``, never assumed.

The kernel needs ``K % 128 == 0`` and a group size of 32, 64 or a multiple of 128 dividing ``K``
(:func:`pack_int4_weight` checks; groups of 64 and 32 are read by a build of the kernels of their
own, :func:`explorer.gpu.cuda.coded_launch.kernel_build`); every function has a CPU
reference (:func:`decode_int4_reference`), and the GPU tests compare the two on fresh random
inputs.

Examples
--------
>>> from explorer.lowbit import compress_int4
>>> w = torch.tensor([[0.0, 2.0, 0.0, -7.0] * 32])
>>> y = decode_int4_reference(torch.ones(1, 128), compress_int4(w))
>>> y.tolist()
[[-160.0]]
"""

from __future__ import annotations

import math

import numpy as np
import torch

from explorer.dtypes import dtype_name
from explorer.gpu.cuda import ops
from explorer.gpu.cuda.code_tiles import CodeTiles, layout_refusal, tile_coded_weight
from explorer.gpu.cuda.coded_launch import CHUNK, Int4LaunchConfig, launch_config
from explorer.gpu.cuda.decode import MAX_TOKENS
from explorer.gpu.cuda.launch import Launcher, current_stream
from explorer.lowbit import GroupCodedWeight, Int4Weight, Int8Weight, int4_reference

__all__ = [
    "Int4DecodeCall",
    "check_int4_layout",
    "decode_int4_matmul",
    "decode_int4_reference",
    "pack_int4_weight",
    "pack_int8_weight",
]

_SIXTEEN = (torch.float16, torch.bfloat16)
#: The nibbles i0 | i1 << 2 with i0 < i1: the only position codes the sparse mma accepts.
_ORDERED_NIBBLES = (0x4, 0x8, 0xC, 0x9, 0xD, 0xE)
_ARG_KINDS = ("u64",) * 4 + ("i32",) * 3 + ("i64", "i64")


def check_int4_layout(weight: GroupCodedWeight) -> None:
    """Raise ``ValueError`` unless the kernel can read ``weight``.

    It needs K a multiple of 128, G of 32, 64 or a multiple of 128 dividing K, and position
    nibbles that are ordered pairs (the message names what is off).

    Parameters
    ----------
    weight : Int4Weight or Int8Weight
        The 2:4 low-bit weight.
    """
    why = layout_refusal(weight.shape[1], weight.group_size)
    if why is not None:
        raise ValueError(
            f"the {weight.FORMAT} decode kernel cannot read this weight: {why}. Hint: "
            f"compress_{weight.FORMAT}(weight, group_size=128) (K a multiple of 128), or keep "
            "this layer on another route."
        )
    meta = weight.metadata
    if meta.numel():
        ordered = torch.tensor(_ORDERED_NIBBLES, dtype=torch.uint8, device=meta.device)
        bad = ~(torch.isin(meta & 0xF, ordered) & torch.isin(meta >> 4, ordered))
        if bool(bad.any()):
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"metadata byte {first} = {int(meta[first])} holds a position nibble that is not "
                "an ordered pair i0 | i1 << 2 with i0 < i1, which the sparse tensor cores need. "
                f"Hint: build the weight with explorer.lowbit.compress_{weight.FORMAT}."
            )


def _pack(weight, device, group_size: int, kind: type) -> GroupCodedWeight:
    fmt = kind.FORMAT
    if isinstance(weight, torch.Tensor):
        k = weight.shape[-1] if weight.dim() == 2 else CHUNK
        why = layout_refusal(k, group_size)
        if why is not None:
            raise ValueError(
                f"the {fmt} decode kernel cannot read this weight: {why}. Hint: group_size=128 "
                "for K a multiple of 128; keep other layers on another route."
            )
        weight = kind.compress(weight, group_size)
    if not isinstance(weight, kind):
        raise TypeError(
            f"weight must be an explorer.lowbit.{kind.__name__} or a 2:4 tensor, got "
            f"{type(weight).__name__}. Hint: compress_{fmt}(weight) builds one."
        )
    check_int4_layout(weight)
    dev = weight.codes.device if device is None else torch.device(device)
    parts = [t.to(dev).contiguous() for t in (weight.codes, weight.metadata, weight.scales)]
    return kind(*parts, weight.shape, weight.group_size)


def pack_int4_weight(
    weight: Int4Weight | torch.Tensor,
    device: torch.device | str | None = None,
    group_size: int = 128,
) -> Int4Weight:
    """The int4 decode kernel's weight: an :class:`~explorer.lowbit.Int4Weight` on ``device``.

    This checks what the kernel needs and moves the parts (contiguous) to the device; a dense
    2:4 tensor is compressed first. The kernel's calls tile the result
    (:func:`~explorer.gpu.cuda.code_tiles.tile_coded_weight`).
    (Not :func:`explorer.lowbit.pack_int4`, which packs integer codes two per byte.)

    Parameters
    ----------
    weight : Int4Weight or torch.Tensor
        An int4 2:4 weight, or a dense ``[N, K]`` 2:4 tensor to compress with
        :func:`explorer.lowbit.compress_int4` (round to nearest, ``group_size``).
    device : torch.device or str, optional
        Where the kernel runs; the weight's own device by default.
    group_size : int
        Columns per scale when ``weight`` is a dense tensor (32, 64 or a multiple of 128
        dividing K).

    Returns
    -------
    Int4Weight

    Raises
    ------
    ValueError
        K not a multiple of 128, a group size other than 32, 64 or a multiple of 128 dividing
        K, or position nibbles that are not ordered pairs (the message says which).
    TypeError
        ``weight`` is neither an ``Int4Weight`` nor a tensor.

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(16, 256)
    >>> p = pack_int4_weight(w * make_mask(w, "2:4"))
    >>> p.codes.shape, p.scales.shape
    (torch.Size([16, 64]), torch.Size([16, 2]))
    >>> pack_int4_weight(w * make_mask(w, "2:4"), group_size=32).scales.shape
    torch.Size([16, 8])
    >>> pack_int4_weight(torch.zeros(16, 96))
    Traceback (most recent call last):
    ...
    ValueError: the int4 decode kernel cannot read this weight: K = 96 is not a multiple of 128 (group_size = 128). Hint: group_size=128 for K a multiple of 128; keep other layers on another route.
    """
    return _pack(weight, device, group_size, Int4Weight)


def pack_int8_weight(
    weight: Int8Weight | torch.Tensor,
    device: torch.device | str | None = None,
    group_size: int = 128,
) -> Int8Weight:
    """The int8 decode kernel's weight: an :class:`~explorer.lowbit.Int8Weight` on ``device``.

    As :func:`pack_int4_weight`, with one int8 code a kept value: ``weight`` is an
    ``Int8Weight`` (:func:`explorer.lowbit.compress_int8`, or a checkpoint's layer of
    ``prune(..., quantize="int8")``) or a dense 2:4 tensor compressed with ``compress_int8``.

    Parameters
    ----------
    weight, device, group_size
        As :func:`pack_int4_weight`.

    Returns
    -------
    Int8Weight

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(16, 256)
    >>> p = pack_int8_weight(w * make_mask(w, "2:4"))
    >>> p.codes.shape, p.codes.dtype, p.scales.shape
    (torch.Size([16, 128]), torch.int8, torch.Size([16, 2]))
    >>> pack_int8_weight(pack_int4_weight(w * make_mask(w, "2:4")))
    Traceback (most recent call last):
    ...
    TypeError: weight must be an explorer.lowbit.Int8Weight or a 2:4 tensor, got Int4Weight. Hint: compress_int8(weight) builds one.
    """
    return _pack(weight, device, group_size, Int8Weight)


def decode_int4_reference(
    x: torch.Tensor, weight: GroupCodedWeight, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """What :func:`decode_int4_matmul` computes, in float32: ``x @ W_deq^T + b``.

    Built on :func:`explorer.lowbit.int4_reference` (the dense masked product of the
    dequantized weight), on ``x``'s device, rounded once to ``x``'s dtype.

    Parameters
    ----------
    x : torch.Tensor
        The input, ``(..., in_features)``.
    weight : Int4Weight or Int8Weight
        The 2:4 low-bit weight, ``(out_features, in_features)``.
    bias : torch.Tensor, optional
        Added to the result.

    Returns
    -------
    torch.Tensor
        ``(..., out_features)`` in ``x``'s dtype.

    Examples
    --------
    >>> from explorer.lowbit import compress_int4
    >>> w = compress_int4(torch.tensor([[0.0, 1.0, 0.0, 7.0] * 32]))
    >>> decode_int4_reference(torch.ones(2, 128), w, torch.tensor([0.5])).tolist()
    [[256.5], [256.5]]
    """
    parts = (weight.codes, weight.metadata, weight.scales)
    if weight.codes.device != x.device:
        weight = type(weight)(*(t.to(x.device) for t in parts), weight.shape, weight.group_size)
    lead = x.shape[:-1]
    y = int4_reference(x.reshape(-1, x.shape[-1]).float(), weight, bias)
    return y.reshape(*lead, weight.shape[0]).to(x.dtype)


def _weight_device(weight: GroupCodedWeight | CodeTiles) -> torch.device:
    return weight.device if isinstance(weight, CodeTiles) else weight.codes.device


def _format(weight: GroupCodedWeight | CodeTiles) -> str:
    return weight.format if isinstance(weight, CodeTiles) else weight.FORMAT


def _check(
    x: torch.Tensor, weight: GroupCodedWeight | CodeTiles, bias: torch.Tensor | None
) -> None:
    if not isinstance(weight, (Int4Weight, Int8Weight, CodeTiles)):
        raise TypeError(
            f"weight must be an Int4Weight or Int8Weight (explorer.gpu.cuda.decode_int4."
            f"pack_int4_weight, pack_int8_weight) or its CodeTiles, got {type(weight).__name__}"
        )
    n, k = weight.shape
    if x.device.type != "cuda" or _weight_device(weight) != x.device:
        raise ValueError(
            f"x is on {x.device} and the weight on {_weight_device(weight)}; the int4 decode kernel "
            "needs both on one CUDA device. Hint: pack_int4_weight(weight, x.device), or "
            "decode_int4_reference on the CPU."
        )
    if x.dtype not in _SIXTEEN:
        raise TypeError(
            f"x is {x.dtype}; the int4 decode kernel takes float16 or bfloat16 activations. "
            "Hint: x.to(torch.bfloat16)."
        )
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features in its last dimension, expected K = {k}")
    if not isinstance(weight, CodeTiles) and layout_refusal(k, weight.group_size) is not None:
        check_int4_layout(weight)
    if bias is not None and (tuple(bias.shape) != (n,) or bias.dtype != x.dtype):
        raise ValueError(
            f"bias must be [{n}] of {x.dtype}, got {tuple(bias.shape)} of {bias.dtype}"
        )
    if bias is not None and bias.device != x.device:
        raise ValueError(f"bias is on {bias.device}, x on {x.device}; move it with bias.to(x)")


def _aligned(x2: torch.Tensor) -> torch.Tensor:
    """``x2`` itself when its rows are 16-byte aligned with a unit last stride, else a copy."""
    if x2.stride(1) != 1 or x2.stride(0) % 8 or x2.data_ptr() % 16:
        return x2.contiguous()
    return x2


def _arguments(tiles: CodeTiles, bias, x2, y) -> tuple:
    n, k = tiles.shape
    return (
        tiles.data.data_ptr(),
        x2.data_ptr(),
        0 if bias is None else bias.data_ptr(),
        y.data_ptr(),
        n,
        k,
        x2.shape[0],
        x2.stride(0),
        y.stride(0),
    )


def _tiled(weight: GroupCodedWeight | CodeTiles) -> CodeTiles:
    return weight if isinstance(weight, CodeTiles) else tile_coded_weight(weight)


_NUMPY = {"u64": np.uint64, "i32": np.int32, "i64": np.int64}


def decode_int4_matmul(
    x: torch.Tensor,
    weight: GroupCodedWeight | CodeTiles,
    bias: torch.Tensor | None = None,
    config: Int4LaunchConfig | None = None,
) -> torch.Tensor:
    """``x @ W^T (+ bias)`` on the GPU for ``x[..., K]`` with at most 64 rows.

    The kernel reads the weight as :class:`~explorer.gpu.cuda.code_tiles.CodeTiles`; an
    :class:`~explorer.lowbit.Int4Weight` is tiled first, on every call (tile it once with
    :func:`~explorer.gpu.cuda.code_tiles.tile_coded_weight`, or use :class:`Int4DecodeCall`, for
    repeated calls).

    Parameters
    ----------
    x : torch.Tensor
        CUDA, float16 or bfloat16, any leading dims holding at most :data:`MAX_TOKENS` rows in
        all. Rows that are not 16-byte aligned with a unit last stride are copied first.
    weight : Int4Weight, Int8Weight or CodeTiles
        From :func:`pack_int4_weight` or :func:`pack_int8_weight` (or its tiles), on ``x``'s
        device.
    bias : torch.Tensor, optional
        ``[N]`` of ``x``'s dtype.
    config : Int4LaunchConfig, optional
        How to launch (its ``format`` and group size the weight's); :func:`~explorer.gpu.cuda.coded_launch.default_int4_config`
        by default.

    Returns
    -------
    torch.Tensor
        ``[..., N]`` row-major, ``x``'s dtype.

    Raises
    ------
    ValueError, TypeError
        Devices, dtypes or shapes off, more than 64 rows, or a launch the kernel is not built
        for (the message says which).

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(64, 256, device="cuda")  # doctest: +GPU
    >>> p = pack_int4_weight(w * make_mask(w, "2:4"))  # doctest: +GPU
    >>> decode_int4_matmul(torch.randn(3, 256, device="cuda").half(), p).shape  # doctest: +GPU
    torch.Size([3, 64])
    """
    _check(x, weight, bias)
    n, k = weight.shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    t = x2.shape[0]
    if t > MAX_TOKENS:
        raise ValueError(
            f"{t} rows is more than the int4 decode kernel's {MAX_TOKENS}. Hint: split the "
            "rows into calls of at most 64, or use a dense route for prefill."
        )
    y = torch.empty(t, n, dtype=x.dtype, device=x.device)
    if t == 0 or n == 0:
        return y.reshape(*lead, n)
    x2 = _aligned(x2)
    dev = x2.device.index or 0
    config = launch_config(config, n, k, t, dev, _format(weight), weight.group_size)
    from explorer.gpu.cuda.kernels import launch

    args = tuple(
        _NUMPY[kind](value)
        for kind, value in zip(_ARG_KINDS, _arguments(_tiled(weight), bias, x2, y), strict=True)
    )
    launch(
        "decode24_int4",
        config.kernel_name(x.dtype, t),
        x2,
        (math.ceil(n / 16),),
        args,
        block=(32 * config.warps,),
        shared=config.shared,
        defines=config.defines,
    )
    return y.reshape(*lead, n)


class Int4DecodeCall:
    """:func:`decode_int4_matmul` for one weight, bias and row count, set up once.

    A call costs about the host time of ``F.linear`` (an output allocation and one driver launch).

    Kernel, launch shape and the weight's and bias's pointers are decided here once; a call
    writes the input's and output's pointers and launches on torch's current stream, so it
    can be captured in a CUDA graph. Under ``torch.compile`` a call goes through the opaque op
    ``torch.ops.explorer.sparse_forward`` (:mod:`explorer.gpu.cuda.ops`), which runs the same
    launch. Build it again after the weight moves.

    Parameters
    ----------
    weight : Int4Weight, Int8Weight or CodeTiles
        From :func:`pack_int4_weight` or :func:`pack_int8_weight`, on a CUDA device, or its
        tiles (a weight is tiled here, once; pass the tiles to share them between calls of
        several row counts).
    bias : torch.Tensor, optional
        ``[N]`` of the activations' dtype, on the weight's device.
    tokens : int
        Rows of every input (1 to :data:`MAX_TOKENS`).
    dtype : torch.dtype
        The activations' dtype (float16 or bfloat16).
    config : Int4LaunchConfig, optional
        How to launch; :func:`~explorer.gpu.cuda.coded_launch.default_int4_config` by default.
    module : cupy.RawModule, optional
        Another build of ``decode24_int4.cu`` to take the kernel from (benchmarks of its
        variants); the package's own build by default.
    overlap : bool
        Launch overlapped with the kernel before it where the GPU allows (for a call after one
        of the explorer's kernels: :meth:`~explorer.gpu.cuda.launch.Launcher.for_kernel`).

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(64, 256, device="cuda")  # doctest: +GPU
    >>> call = Int4DecodeCall(pack_int4_weight(w * make_mask(w, "2:4")), None, 3, torch.half)  # doctest: +GPU
    >>> call(torch.randn(3, 256, device="cuda").half()).shape  # doctest: +GPU
    torch.Size([3, 64])
    """

    def __init__(
        self,
        weight: GroupCodedWeight | CodeTiles,
        bias: torch.Tensor | None,
        tokens: int,
        dtype: torch.dtype,
        config: Int4LaunchConfig | None = None,
        module=None,
        overlap: bool = False,
    ) -> None:
        from explorer.gpu.cuda.sources import compiled_function

        if not 1 <= tokens <= MAX_TOKENS:
            raise ValueError(
                f"tokens = {tokens}; the int4 decode kernel takes 1 to {MAX_TOKENS} rows"
            )
        if dtype not in _SIXTEEN:
            raise TypeError(
                f"activations are {dtype}; the int4 decode kernel takes float16 or bfloat16"
            )
        n, k = weight.shape
        self.device = _weight_device(weight)
        _check(torch.empty(0, k, dtype=dtype, device=self.device), weight, bias)
        tiles = _tiled(weight)
        dev = self.device.index or 0
        self.config = config = launch_config(
            config, n, k, tokens, dev, tiles.format, tiles.group_size
        )
        # tiles, x, bias, y, n, k, tokens, x row stride, y row stride: all but x, y and x's row
        # stride are fixed for this call
        fixed = {
            0: tiles.data.data_ptr(),
            2: 0 if bias is None else bias.data_ptr(),
            4: n,
            5: k,
            6: tokens,
            8: n,
        }
        name = config.kernel_name(dtype, tokens)
        if module is None:
            function = compiled_function("decode24_int4", name, dev, config.defines)
        else:
            function = module.get_function(name)
        self._launcher = Launcher.for_kernel(function, _ARG_KINDS, fixed, dev, overlap)
        self._grid, self._block = (math.ceil(n / 16), 1, 1), (32 * config.warps, 1, 1)
        self._shared, self._dev = config.shared, dev
        self._shape, self._dtype, self._k = (tokens, n), dtype, k
        # the tensors whose pointers are kept: alive as long as this call
        self._keep = (tiles, bias)
        self._op_id = ops.register(self)

    def __call__(self, x2: torch.Tensor) -> torch.Tensor:
        """``x2 @ W^T (+ b)`` for ``x2`` of ``[tokens, K]`` (any strides)."""
        if torch.compiler.is_compiling():  # one opaque op for the compiler (gpu.cuda.ops)
            return ops.forward(x2, self._op_id)
        if x2.stride(1) != 1 or x2.stride(0) % 8 or x2.data_ptr() % 16:
            x2 = x2.contiguous()
        y = torch.empty(self._shape, dtype=self._dtype, device=self.device)
        self._launcher.launch_changed(
            self._grid,
            self._block,
            self._shared,
            current_stream(self._dev),
            (x2.data_ptr(), y.data_ptr(), x2.stride(0)),
        )
        return y

    def run_compiled(self, x: torch.Tensor) -> torch.Tensor:
        """The launch the compiled op runs (``x`` of ``[tokens, K]`` or with leading dims).

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., K)``.

        Returns
        -------
        torch.Tensor
            The product, ``(..., out_features)``.
        """
        return self(x.reshape(-1, self._k)).reshape(*x.shape[:-1], self._shape[1])

    def fake_output(self, x: torch.Tensor) -> torch.Tensor:
        """An empty tensor shaped like the output for ``x`` (what the compiled op returns).

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., K)``.

        Returns
        -------
        torch.Tensor
            An empty tensor of the output's shape and dtype.
        """
        return x.new_empty((*x.shape[:-1], self._shape[1]), dtype=self._dtype)

    def __repr__(self) -> str:
        (t, n), k = self._shape, self._k
        return f"Int4DecodeCall({n}x{k}, {t} rows, {dtype_name(self._dtype)}, {self.config!r})"
