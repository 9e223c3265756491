"""The explorer's own 2:4 decode kernel: ``Y = X W^T (+ b)`` for 1 to 64 rows of ``X``.

Generation reads every weight once per step, so a decode step is bound by memory traffic, and
cuSPARSELt has no matrix-vector path: at 16 tokens its products run slower than dense cuBLAS.
This kernel (``kernels/decode24.cu``) reads the weight in the compressed layout that
:func:`explorer.compress` documents and emulates on the CPU (kept values plus 2-bit
positions, 9/16 of the dense bytes in 16-bit, 5/16 with int8 values and per-row scales), so a
step moves fewer bytes than dense. The physical limits over dense are 16/9 = 1.78x for a 16-bit
weight and 16/5 = 3.2x for int8 values; what it reaches is measured by
``sparsity-explorer bench --suite decode`` (see docs/gpu.md), never assumed.

Every function here has a CPU reference (:func:`decode_matmul_reference`), and the GPU tests
compare the two on fresh random inputs.

Examples
--------
>>> from explorer import compress, make_mask
>>> w = make_mask(torch.randn(32, 64), "2:4") * torch.randn(32, 64)
>>> x = torch.randn(3, 64)
>>> y = decode_matmul_reference(x, compress(w))
>>> bool(torch.allclose(y, x @ w.t(), atol=1e-5))
True
"""

from __future__ import annotations

import math

import numpy as np
import torch

from explorer.compression import CompressedWeight, compress
from explorer.dtypes import dtype_name
from explorer.gpu.cuda.launch import Launcher, current_stream

__all__ = [
    "MAX_TOKENS",
    "DecodeCall",
    "decode_matmul",
    "decode_matmul_reference",
    "default_warps",
    "pack",
]

#: Most activation rows one call takes (8 token tiles of 8).
MAX_TOKENS = 64
_SIXTEEN = (torch.float16, torch.bfloat16)
_MAX_WARPS = {1: 32, 2: 32, 4: 16, 8: 8}  # per token tiles: what the register budget allows
_TARGET_WARPS_PER_SM = 32  # measured on an H100: fewer leaves bandwidth unused
_FEWEST_WARPS_UP_TO_16_TOKENS = 8  # measured on an H200 (benchmarks/decode_kernel.py --sweep-only)


def pack(weight: torch.Tensor, int8: bool = False) -> CompressedWeight:
    """The decode kernel's weight: :func:`explorer.compress` on the weight's own device.

    Parameters
    ----------
    weight : torch.Tensor
        ``[N, K]`` 2:4 along K, float16 or bfloat16, ``K`` a multiple of 16.
    int8 : bool
        Store the kept values as int8 with a float32 scale per output row.

    Raises
    ------
    ValueError
        Shape or pattern off (the message says which), or a dtype the kernel does not read.

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = make_mask(torch.randn(16, 32), "2:4") * 1.0
    >>> pack(w.half()).values.shape
    torch.Size([16, 16])
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError("the decode kernel's weight must be a 2-D tensor [N, K]")
    if weight.dtype not in _SIXTEEN:
        raise TypeError(
            f"the decode kernel reads float16 or bfloat16 weights, got {weight.dtype}. "
            "Hint: weight.to(torch.bfloat16) (int8=True quantizes it afterwards)."
        )
    if weight.shape[1] % 16:
        raise ValueError(
            f"K = {weight.shape[1]} is not a multiple of 16, which the decode kernel needs. "
            "Hint: keep this layer dense, or pad its inputs."
        )
    return compress(weight.contiguous(), int8=int8)


def decode_matmul_reference(
    x: torch.Tensor, weight: CompressedWeight, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """What :func:`decode_matmul` computes, in float32 on any device: ``x @ W^T + b``.

    The sum runs in float32 (as the kernel's tensor-core accumulation does), int8 values are
    scaled per row, and the result is rounded once to ``x``'s dtype.

    Parameters
    ----------
    x : torch.Tensor
        The input, ``(..., in_features)``.
    weight : CompressedWeight
        The compressed 2:4 weight, ``(out_features, in_features)`` once decompressed.
    bias : torch.Tensor, optional
        Added to the result.

    Returns
    -------
    torch.Tensor
        ``x @ W^T + b`` in ``x``'s dtype.

    Examples
    --------
    >>> w = torch.tensor([[0.0, 2.0, 0.0, 1.0] * 4])
    >>> decode_matmul_reference(torch.ones(1, 16), compress(w)).tolist()
    [[12.0]]
    """
    dense = weight.decompress().float()
    y = x.float() @ dense.to(x.device).t()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def default_warps(rows: int, k: int, tokens: int, sms: int) -> int:
    """Warps per block: enough blocks x warps to keep every SM busy, within the register budget.

    A block covers 16 rows and its warps split K, so small ``rows`` take more warps per block.
    Up to 16 tokens a block takes at least 8 warps: on an H200 the wide layers (14336 to 28672
    rows) ran 4-11% faster with 8 than with the 4 that the SM count alone asks for. A layer
    with fewer 64-column chunks than warps may take up to the next power of two of its chunks
    (1536 columns: 32 warps for 24 chunks ran 5-8% faster than 16).

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

    Returns
    -------
    int
        The warps per block, a power of two.

    Examples
    --------
    >>> default_warps(4096, 4096, 1, 132), default_warps(1024, 4096, 1, 132)
    (16, 32)
    >>> default_warps(28672, 4096, 8, 132), default_warps(1536, 1536, 8, 132)
    (8, 32)
    >>> default_warps(14336, 4096, 64, 132)
    4
    """
    tiles = _tiles(tokens)
    blocks = math.ceil(rows / 16)
    want = math.ceil(sms * _TARGET_WARPS_PER_SM / max(blocks, 1))
    warps = 1 << max(0, round(math.log2(max(want, 1))))
    if tiles <= 2:
        warps = max(warps, _FEWEST_WARPS_UP_TO_16_TOKENS)
    chunks = max(1, math.ceil(k / 64))
    return int(max(1, min(warps, _MAX_WARPS[tiles], 1 << math.ceil(math.log2(chunks)))))


def _tiles(tokens: int) -> int:
    """Token tiles of 8 the kernel is compiled for (1, 2, 4 or 8)."""
    need = math.ceil(tokens / 8)
    return 1 << max(0, math.ceil(math.log2(need)))


def _check(x: torch.Tensor, weight: CompressedWeight, bias: torch.Tensor | None) -> None:
    if not isinstance(weight, CompressedWeight):
        raise TypeError(
            f"weight must be a CompressedWeight (explorer.gpu.cuda.decode.pack), got "
            f"{type(weight).__name__}"
        )
    n, k = weight.shape
    if x.device.type != "cuda" or weight.values.device != x.device:
        raise ValueError(
            f"x is on {x.device} and the weight on {weight.values.device}; the decode kernel "
            "needs both on one CUDA device. Hint: decode_matmul_reference runs on the CPU."
        )
    if x.dtype not in _SIXTEEN:
        raise TypeError(f"x is {x.dtype}; the decode kernel takes float16 or bfloat16 inputs")
    if weight.scale is None and weight.values.dtype != x.dtype:
        raise TypeError(
            f"x is {x.dtype} and the weight {weight.values.dtype}; they must match "
            "(or the weight must be int8)"
        )
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features in its last dimension, expected K = {k}")
    if k % 16:
        raise ValueError(f"K = {k} is not a multiple of 16, which the decode kernel needs")
    if bias is not None and (bias.shape != (n,) or bias.dtype != x.dtype):
        raise ValueError(
            f"bias must be [{n}] of {x.dtype}, got {tuple(bias.shape)} of {bias.dtype}"
        )


def decode_matmul(
    x: torch.Tensor,
    weight: CompressedWeight,
    bias: torch.Tensor | None = None,
    warps: int | None = None,
) -> torch.Tensor:
    """``x @ W^T (+ bias)`` on the GPU for ``x[..., K]`` with at most 64 rows.

    Parameters
    ----------
    x : torch.Tensor
        CUDA, float16 or bfloat16, any leading dims holding at most :data:`MAX_TOKENS` rows in
        all. Rows that are not 16-byte aligned with a unit last stride are copied first.
    weight : CompressedWeight
        From :func:`pack`, on ``x``'s device (16-bit values of ``x``'s dtype, or int8).
    bias : torch.Tensor, optional
        ``[N]`` of ``x``'s dtype.
    warps : int, optional
        Warps per block (1 to 32); by default :func:`default_warps`.

    Returns
    -------
    torch.Tensor
        ``[..., N]`` row-major, ``x``'s dtype.

    Raises
    ------
    ValueError, TypeError
        Devices, dtypes or shapes off, or more than 64 rows (the message says which).

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(64, 64).half().cuda()  # doctest: +GPU
    >>> w = w * make_mask(w, "2:4")  # doctest: +GPU
    >>> decode_matmul(torch.randn(3, 64).half().cuda(), pack(w)).shape  # doctest: +GPU
    torch.Size([3, 64])
    """
    _check(x, weight, bias)
    n, k = weight.shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    t = x2.shape[0]
    if t > MAX_TOKENS:
        raise ValueError(
            f"{t} rows is more than the decode kernel's {MAX_TOKENS}. Hint: run larger token "
            "counts through SparseLinear, which sends them to cuSPARSELt."
        )
    y = torch.empty(t, n, dtype=x.dtype, device=x.device)
    if t == 0 or n == 0:
        return y.reshape(*lead, n)
    if x2.stride(1) != 1 or x2.stride(0) % 8 or x2.data_ptr() % 16:
        x2 = x2.contiguous()
    _launch(x2, weight, bias, y, warps)
    return y.reshape(*lead, n)


_ARG_KINDS = ("u64",) * 6 + ("i32", "i32", "i32", "i64", "i64")


def _kernel_name(dtype: torch.dtype, int8: bool, tokens: int, k: int) -> str:
    """The kernel's name for ``dtype`` activations and ``tokens`` rows.

    int8 values with ``K % 32 == 0`` up to 16 tokens take the wide kernel (128-column chunks:
    16-byte loads of values and 4-byte loads of positions).
    """
    kind = "bf16" if dtype == torch.bfloat16 else "f16"
    values = ("_int8w" if k % 32 == 0 and tokens <= 16 else "_int8") if int8 else ""
    return f"decode24_{kind}{values}_t{8 * _tiles(tokens)}"


def _launch(x2, weight: CompressedWeight, bias, y, warps: int | None, module=None) -> None:
    """Launch the kernel for ``x2``'s dtype and row count.

    ``module`` is another build of ``decode24.cu``, for benchmarks of its variants.
    """
    n, k = weight.shape
    t = x2.shape[0]
    dev = x2.device.index or 0
    tiles = _tiles(t)
    if warps is None:
        warps = default_warps(n, k, t, _sms(dev))
    if not 1 <= warps <= _MAX_WARPS[tiles]:
        raise ValueError(f"warps = {warps}; expected 1 to {_MAX_WARPS[tiles]} for {t} rows")
    name = _kernel_name(x2.dtype, weight.scale is not None, t, k)
    args = (
        _ptr(weight.values),
        _ptr(weight.metadata),
        _ptr(weight.scale),
        _ptr(x2),
        _ptr(bias),
        _ptr(y),
        np.int32(n),
        np.int32(k),
        np.int32(t),
        np.int64(x2.stride(0)),
        np.int64(y.stride(0)),
    )
    grid, block = (math.ceil(n / 16),), (32 * warps,)
    if module is not None:
        from explorer.gpu.cuda.kernels import cupy_stream

        with cupy_stream(dev):
            module.get_function(name)(grid, block, args, shared_mem=512 * warps)
        return
    from explorer.gpu.cuda.kernels import launch

    launch("decode24", name, x2, grid, args, block=block, shared=512 * warps)


class DecodeCall:
    """:func:`decode_matmul` for one weight, bias and row count, set up once.

    A call costs about the host time of ``F.linear`` (an output allocation and one driver launch).

    What :func:`decode_matmul` decides per call (kernel variant, warps, grid, the pointers of
    the weight and bias) is decided here once; a call writes the input's and output's pointers
    and launches. Build it again after the weight moves (``module.to(...)``).

    Parameters
    ----------
    weight : CompressedWeight
        From :func:`pack`, on a CUDA device.
    bias : torch.Tensor, optional
        ``[N]`` of the activations' dtype.
    tokens : int
        Rows of every input (1 to :data:`MAX_TOKENS`).
    dtype : torch.dtype
        The activations' dtype (float16 or bfloat16).

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(64, 64).half().cuda()  # doctest: +GPU
    >>> w = w * make_mask(w, "2:4")  # doctest: +GPU
    >>> call = DecodeCall(pack(w), None, 3, torch.half)  # doctest: +GPU
    >>> call(torch.randn(3, 64).half().cuda()).shape  # doctest: +GPU
    torch.Size([3, 64])
    """

    def __init__(
        self, weight: CompressedWeight, bias: torch.Tensor | None, tokens: int, dtype: torch.dtype
    ) -> None:
        from explorer.gpu.cuda.sources import compiled_function

        if not 1 <= tokens <= MAX_TOKENS:
            raise ValueError(f"tokens = {tokens}; the decode kernel takes 1 to {MAX_TOKENS} rows")
        if dtype not in _SIXTEEN:
            raise TypeError(f"activations are {dtype}; the decode kernel takes float16 or bfloat16")
        n, k = weight.shape
        self.device = weight.values.device
        dev = self.device.index or 0
        warps = default_warps(n, k, tokens, _sms(dev))
        name = _kernel_name(dtype, weight.scale is not None, tokens, k)
        # values, metadata, scale, x, bias, y, n, k, tokens, x row stride, y row stride: all
        # but x, y and x's row stride are fixed for this call
        fixed = {
            0: int(_ptr(weight.values)),
            1: int(_ptr(weight.metadata)),
            2: int(_ptr(weight.scale)),
            4: int(_ptr(bias)),
            6: n,
            7: k,
            8: tokens,
            10: n,
        }
        function = compiled_function("decode24", name, dev)
        self._launcher = Launcher(function, _ARG_KINDS, fixed)
        self._grid, self._block = (math.ceil(n / 16), 1, 1), (32 * warps, 1, 1)
        self._shared, self._dev = 512 * warps, dev
        self._shape, self._dtype = (tokens, n), dtype
        self._nkt = (n, k, tokens)
        # the tensors whose pointers are kept: alive as long as this call
        self._keep = (weight, bias)
        self._steps: list | None = None

    def __call__(self, x2: torch.Tensor) -> torch.Tensor:
        """``x2 @ W^T (+ b)`` for ``x2`` of ``[tokens, K]`` (row stride a multiple of 8)."""
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

    def native_steps(self) -> list:
        """The call as the compiled operator's one launch step (:mod:`explorer.gpu.cuda.native`).

        Returns
        -------
        list of LaunchStep
            Its token is retired when this call is dropped.
        """
        if self._steps is None:
            from explorer.gpu.cuda import native

            per_call = {3: (native.IN_PTR, 0), 5: (native.OUT_PTR, 0), 9: (native.IN_ROW_STRIDE, 0)}
            self._steps = [
                native.launch_step(
                    self._launcher, self._grid, self._block, self._shared, per_call,
                    self._shape[1], self,
                )
            ]  # fmt: skip
        return self._steps

    def __repr__(self) -> str:
        n, k, t = self._nkt
        return f"DecodeCall({n}x{k}, {t} rows, {dtype_name(self._dtype)})"


_SMS: dict[int, int] = {}


def _sms(dev: int) -> int:
    sms = _SMS.get(dev)
    if sms is None:
        sms = _SMS[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    return sms


def _ptr(t: torch.Tensor | None) -> np.uint64:
    return np.uint64(0 if t is None else t.data_ptr())
