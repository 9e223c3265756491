"""The explorer's own CUDA kernels (``kernels/*.cu``), loaded with CuPy ``RawModule``.

Each GPU function has a pure-torch CPU reference of the same name with ``_reference`` appended;
the tests compare the two on fresh random inputs.

* :func:`nm_mask` - N:M mask selection from scores (keep the N largest of every M).
* :func:`nm_histogram` - one pass over a weight: N:M validity and the 2:4 pattern histogram.
* :func:`block_density` - mean of a bool mask over tiles (at most 512 x 512 cells) for heatmaps.
* :func:`silu_mul` - SwiGLU's ``silu(gate) * up`` in one pass over a fused gate/up output.
* :func:`transpose_rows` - a row-major copy of a ``Y^T`` output (padded tokens dropped on the way).

The sources are found and compiled by :mod:`explorer.gpu.cuda.sources`.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from explorer import _html
from explorer.errors import require
from explorer.gpu.cuda.launch import Launcher, LaunchRefused, current_stream
from explorer.gpu.cuda.sources import compiled_function

__all__ = [
    "PATTERNS_24",
    "NMHistogram",
    "SiluMulCall",
    "block_density",
    "block_density_reference",
    "cupy_stream",
    "launch",
    "nm_histogram",
    "nm_histogram_into",
    "nm_histogram_reference",
    "nm_mask",
    "nm_mask_reference",
    "silu_mul",
    "silu_mul_reference",
    "transpose_rows",
    "transpose_rows_reference",
]

#: The six legal 2:4 position patterns, in histogram order.
PATTERNS_24: tuple[tuple[int, int], ...] = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))
_BITS_TO_BIN = {(1 << a) | (1 << b): i for i, (a, b) in enumerate(PATTERNS_24)}
_THREADS = 256
_NO_BAD = 2**63 - 1


_KINDS = {
    np.dtype(np.uint64): "u64",
    np.dtype(np.uint32): "u32",
    np.dtype(np.int64): "i64",
    np.dtype(np.int32): "i32",
    np.dtype(np.float32): "f32",
}
_LAUNCHERS: dict[tuple, Launcher] = {}


def _dim3(v) -> tuple[int, int, int]:
    v = tuple(int(a) for a in (v if isinstance(v, tuple) else (v,)))
    return v + (1,) * (3 - len(v))


def launch(
    name: str,
    fn: str,
    tensor: torch.Tensor,
    grid,
    args: tuple,
    block=(_THREADS,),
    shared=0,
    defines: tuple = (),
) -> None:
    """Launch kernel ``fn`` of ``kernels/<name>.cu`` on the current stream of the tensor's device.

    The stream is torch's. Modules, functions and argument slots are made once, and the launch goes
    to the CUDA driver directly (:mod:`explorer.gpu.cuda.launch`): a few microseconds of host time,
    which a model calling kernels per layer pays on every call. CuPy launches where the driver call
    cannot (another device than the current one).

    Parameters
    ----------
    name : str
        The kernel file's name, without ``.cu``.
    fn : str
        The kernel's name in it.
    tensor : torch.Tensor
        A CUDA tensor on the device to launch on.
    grid : int or tuple of int
        Blocks per grid dimension.
    args : tuple
        The kernel's arguments, numpy scalars (``uint64`` for pointers, ``uint32``, ``int32``,
        ``int64``, ``float32``).
    block : tuple of int, default (_THREADS,)
        Threads per block dimension.
    shared : int, default 0
        Dynamic shared memory in bytes.
    defines : tuple of (str, int) pairs, optional
        The build of the file to take the kernel from (:func:`compiled_function`).
    """
    dev = tensor.device.index or 0
    defines = tuple(defines)
    if dev == torch.cuda.current_device():
        key = (name, fn, dev, defines)
        launcher = _LAUNCHERS.get(key)
        if launcher is None:  # a kernel's parameter types never change: read them once
            kinds = tuple(_KINDS[a.dtype] for a in args)
            launcher = _LAUNCHERS[key] = Launcher(compiled_function(name, fn, dev, defines), kinds)
        try:
            launcher.launch(
                _dim3(grid), _dim3(block), shared, current_stream(dev), [a.item() for a in args]
            )
            return
        except LaunchRefused:
            pass  # no current context on this thread: CuPy sets one up
    kern = compiled_function(name, fn, dev, defines)
    grid = grid if isinstance(grid, tuple) else (grid,)
    with cupy_stream(dev):
        kern(grid, block, args, shared_mem=shared)


@contextlib.contextmanager
def cupy_stream(dev: int):
    """CuPy's device ``dev`` and torch's current stream on it, for a CuPy launch.

    Parameters
    ----------
    dev : int
        The CUDA device index.

    Yields
    ------
    None
        Inside the block, CuPy launches go to torch's current stream on ``dev``.
    """
    cp = require("cupy", "gpu")
    with cp.cuda.Device(dev), _stream(dev):
        yield


_STREAMS: dict[tuple[int, int], object] = {}


def _stream(dev: int):
    """CuPy's handle on torch's current stream of ``dev``.

    Made once per stream: it is cheap to keep and costs microseconds of host time to make, on every
    call otherwise.
    """
    raw = torch.cuda.current_stream(dev).cuda_stream
    ext = _STREAMS.get((dev, raw))
    if ext is None:
        cp = require("cupy", "gpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # CuPy 14 renamed ExternalStream
            ext = _STREAMS[(dev, raw)] = cp.cuda.ExternalStream(raw, dev)
    return ext


def _ptr(t: torch.Tensor) -> np.uint64:
    return np.uint64(t.data_ptr())


def _cuda_only(t: torch.Tensor, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ValueError(
            f"{what} is on {t.device}; this kernel needs a CUDA tensor. Hint: use the "
            f"CPU reference {what}_reference or move it with .cuda()."
        )


@cache
def _sms(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _grid(work: int, device: int) -> int:
    sms = _sms(device)
    return int(max(1, min(math.ceil(work / _THREADS), sms * 8)))


def _check_nm(n: int, m: int, last: int) -> None:
    if not (1 <= n <= m <= 64):
        raise ValueError(f"N:M = {n}:{m} is not a valid pattern; expected 1 <= N <= M <= 64")
    if last % m:
        raise ValueError(
            f"the last dimension ({last}) is not a multiple of M={m}; groups of M run along it. "
            "Hint: pad the tensor or keep this layer dense."
        )


# ---------------------------------------------------------------------------------------------
# N:M mask selection
# ---------------------------------------------------------------------------------------------
def nm_mask_reference(scores: torch.Tensor, n: int = 2, m: int = 4) -> torch.Tensor:
    """CPU reference of :func:`nm_mask`: keep the ``n`` largest of each ``m`` (ties: lower index).

    Parameters
    ----------
    scores : torch.Tensor
        Groups of ``m`` run along the last dimension; NaN ranks lowest.
    n, m : int, default 2, 4
        Keep ``n`` of every ``m``.

    Returns
    -------
    torch.Tensor
        Bool mask of ``scores``' shape.

    Examples
    --------
    >>> nm_mask_reference(torch.tensor([[1.0, 4.0, 3.0, 2.0]])).int().tolist()
    [[0, 1, 1, 0]]
    """
    _check_nm(n, m, scores.shape[-1])
    s = scores.detach().float().reshape(-1, m)
    s = torch.where(torch.isnan(s), torch.full_like(s, -math.inf), s)
    # rank_i = #{j: s_j > s_i} + #{j < i: s_j == s_i}
    gt = (s[:, None, :] > s[:, :, None]).sum(-1)
    idx = torch.arange(m)
    eq_before = ((s[:, None, :] == s[:, :, None]) & (idx[None, :] < idx[:, None])).sum(-1)
    return ((gt + eq_before) < n).reshape(scores.shape)


def nm_mask(scores: torch.Tensor, n: int = 2, m: int = 4) -> torch.Tensor:
    """Bool mask keeping the ``n`` highest scores of every ``m`` consecutive ones (GPU).

    Parameters
    ----------
    scores : torch.Tensor
        CUDA tensor; groups of ``m`` run along the last dimension.
    n, m : int, default 2, 4
        Keep ``n`` of every ``m``.

    Returns
    -------
    torch.Tensor
        Bool mask of ``scores``' shape.

    Examples
    --------
    >>> nm_mask(torch.rand(64, 64, device="cuda")).float().mean().item()  # doctest: +SKIP
    0.5
    """
    _cuda_only(scores, "nm_mask")
    _check_nm(n, m, scores.shape[-1])
    s = scores.detach().float().contiguous()
    out = torch.empty(s.shape, dtype=torch.uint8, device=s.device)
    groups = s.numel() // m
    if groups:
        launch(
            "nm_mask",
            "nm_select_f32",
            s,
            _grid(groups, s.device.index or 0),
            (_ptr(s), _ptr(out), np.int64(groups), np.int32(n), np.int32(m)),
        )
    return out.view(torch.bool)


# ---------------------------------------------------------------------------------------------
# N:M validity check + histogram
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NMHistogram:
    """Result of an N:M check: counts of groups by 2:4 pattern, other valid groups, violations.

    ``counts`` has 8 entries: the six :data:`PATTERNS_24` (groups with exactly 2 nonzeros, only
    for 2:4; labelled ``"1100"`` ... ``"0011"`` as in :func:`explorer.checks.keep_patterns`),
    other valid groups (``"sparser"`` for 2:4) and too-dense groups. ``first_violation`` is the
    flat index of the first too-dense group (row-major), or None.
    """

    n: int
    m: int
    counts: tuple[int, ...]
    first_violation: int | None = None
    labels: tuple[str, ...] = field(
        default=("1100", "1010", "1001", "0110", "0101", "0011", "sparser", "too dense"),
        repr=False,
    )

    @property
    def groups(self) -> int:
        """Total number of groups."""
        return int(sum(self.counts))

    @property
    def violations(self) -> int:
        """Groups with more than N nonzeros."""
        return int(self.counts[7])

    @property
    def valid(self) -> bool:
        """True if no group has more than N nonzeros."""
        return self.violations == 0

    @property
    def valid_fraction(self) -> float:
        """Share of groups that satisfy the pattern (1.0 for an empty tensor)."""
        return 1.0 if self.groups == 0 else 1.0 - self.violations / self.groups

    def as_dict(self) -> dict:
        """Labels to counts, keyed like :attr:`explorer.checks.PatternReport.histogram` for 2:4.

        For other patterns only ``"valid"`` (at most N nonzeros) and ``"too dense"`` are given.
        """
        if self.n == 2 and self.m == 4:
            return dict(zip(self.labels, self.counts, strict=True))
        return {"valid": self.groups - self.violations, "too dense": self.violations}

    def __repr__(self) -> str:
        return (
            f"NMHistogram({self.n}:{self.m}, groups={self.groups}, violations={self.violations}, "
            f"valid={self.valid_fraction:.2%})"
        )

    def _repr_html_(self) -> str:
        lvl = "ok" if self.valid else "error"
        head = _html.badge("valid" if self.valid else f"{self.violations} violations", lvl)
        return head + _html.table(["pattern", "groups"], list(self.as_dict().items()))


def _zmask(dtype: torch.dtype) -> int:
    if dtype.is_floating_point:
        return {1: 0x7F, 2: 0x7FFF, 4: 0x7FFFFFFF}[dtype.itemsize]
    return {1: 0xFF, 2: 0xFFFF, 4: 0xFFFFFFFF}[dtype.itemsize]


def nm_histogram_reference(tensor: torch.Tensor, n: int = 2, m: int = 4) -> NMHistogram:
    """CPU reference of :func:`nm_histogram`.

    Parameters
    ----------
    tensor : torch.Tensor
        Groups of ``m`` run along the last dimension.
    n, m : int, default 2, 4
        At most ``n`` nonzeros in every ``m`` is valid.

    Returns
    -------
    NMHistogram
        The counts and the first invalid group.

    Examples
    --------
    >>> nm_histogram_reference(torch.tensor([[1.0, 0, 2, 0, 1, 1, 1, 0]])).counts
    (0, 1, 0, 0, 0, 0, 0, 1)
    """
    _check_nm(n, m, tensor.shape[-1] if tensor.dim() else 1)
    nz = (tensor.detach().cpu().reshape(-1, m) != 0) if tensor.numel() else torch.zeros(0, m)
    nz = nz.bool()
    c = nz.sum(1)
    bins = torch.full((nz.shape[0],), 6, dtype=torch.long)
    if n == 2 and m == 4:
        bits = (nz[:, :4].long() * torch.tensor([1, 2, 4, 8])).sum(1)
        for b, i in _BITS_TO_BIN.items():
            bins[(c == 2) & (bits == b)] = i
    bad = c > n
    bins[bad] = 7
    counts = tuple(int(v) for v in torch.bincount(bins, minlength=8).tolist())
    first = int(bad.nonzero()[0, 0]) if bool(bad.any()) else None
    return NMHistogram(n, m, counts, first)


def nm_histogram(tensor: torch.Tensor, n: int = 2, m: int = 4) -> NMHistogram:
    """Check the N:M pattern of a CUDA tensor in one pass and count the 2:4 patterns.

    Groups of ``m`` run along the last dimension; a group is valid with at most ``n`` nonzeros
    (the definition of :func:`explorer.checks.check_pattern`).

    Parameters
    ----------
    tensor : torch.Tensor
        CUDA tensor; groups of ``m`` run along the last dimension.
    n, m : int, default 2, 4
        At most ``n`` nonzeros in every ``m`` is valid.

    Returns
    -------
    NMHistogram
        The counts and the first invalid group.

    Examples
    --------
    >>> nm_histogram(torch.randn(64, 64, device="cuda")).valid  # doctest: +SKIP
    False
    """
    _cuda_only(tensor, "nm_histogram")
    t = tensor.detach().contiguous()
    hist = torch.empty(8, dtype=torch.int64, device=t.device)
    first = torch.empty(1, dtype=torch.int64, device=t.device)
    nm_histogram_into(t, n, m, hist, first)
    counts = tuple(int(v) for v in hist.tolist())
    f = int(first.item())
    return NMHistogram(n, m, counts, None if f == _NO_BAD else f)


def nm_histogram_into(
    t: torch.Tensor, n: int, m: int, hist: torch.Tensor, first: torch.Tensor
) -> None:
    """Launch the N:M check of :func:`nm_histogram` into preallocated output tensors.

    The launch alone, with no allocation and no copy back to the host, so that it can be timed.

    Parameters
    ----------
    t : torch.Tensor
        A contiguous CUDA tensor of a 1-, 2- or 4-byte real dtype.
    n, m : int
        At most ``n`` nonzeros in every ``m`` consecutive values of the last dimension.
    hist : torch.Tensor
        8 x int64 on the tensor's device: the counts of :attr:`NMHistogram.counts`.
    first : torch.Tensor
        1 x int64 on the tensor's device: the first group that breaks the pattern.

    Raises
    ------
    TypeError
        For a dtype the kernel does not read (bool, complex, 8-byte).
    ValueError
        For a bad ``n``/``m`` or a tensor that is not contiguous.
    """
    if t.itemsize not in (1, 2, 4) or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(
            f"nm_histogram handles 1-, 2- and 4-byte real dtypes; got {t.dtype}. "
            "Hint: pass (tensor != 0).to(torch.uint8)."
        )
    _check_nm(n, m, t.shape[-1] if t.dim() else 1)
    if not t.is_contiguous():
        raise ValueError("the tensor must be contiguous")
    dev = t.device.index or 0
    hist.zero_()
    first.fill_(_NO_BAD)
    zm = np.uint32(_zmask(t.dtype))
    if not t.numel():
        return
    if t.itemsize == 2 and m == 4 and t.numel() % 8 == 0:
        n_vec = t.numel() // 8
        launch(
            "nm_check",
            "nm_hist_m4_u16",
            t,
            _grid(n_vec, dev),
            (_ptr(t), np.int64(n_vec), np.int32(n), zm, _ptr(hist), _ptr(first)),
        )
    else:
        fn = {1: "nm_hist_u8", 2: "nm_hist_u16", 4: "nm_hist_u32"}[t.itemsize]
        groups = t.numel() // m
        launch(
            "nm_check",
            fn,
            t,
            _grid(groups, dev),
            (_ptr(t), np.int64(groups), np.int32(n), np.int32(m), zm, _ptr(hist), _ptr(first)),
        )


# ---------------------------------------------------------------------------------------------
# block density
# ---------------------------------------------------------------------------------------------
def _tiles(rows: int, cols: int, max_cells: int) -> tuple[int, int]:
    return max(1, math.ceil(rows / max_cells)), max(1, math.ceil(cols / max_cells))


def block_density_reference(
    mask: torch.Tensor, max_cells: int = 512, tile: tuple[int, int] | None = None
) -> torch.Tensor:
    """CPU reference of :func:`block_density`.

    Parameters
    ----------
    mask : torch.Tensor
        The mask; dimensions after the first are flattened into columns.
    max_cells : int, default 512
        Cells per side of the output (the tile size is chosen so the grid fits).
    tile : (int, int), optional
        Explicit tile height and width.

    Returns
    -------
    torch.Tensor
        float32 fraction of True per tile.

    Examples
    --------
    >>> block_density_reference(torch.tensor([[1, 0, 1], [1, 1, 0]]).bool(), tile=(2, 2)).tolist()
    [[0.75, 0.5]]
    """
    m2 = mask.detach().cpu().reshape(mask.shape[0], -1) if mask.dim() > 1 else mask.reshape(1, -1)
    rows, cols = m2.shape
    th, tw = tile or _tiles(rows, cols, max_cells)
    gr, gc = math.ceil(rows / th), math.ceil(cols / tw)
    x = torch.zeros(gr * th, gc * tw, dtype=torch.float64)
    ones = torch.zeros_like(x)
    x[:rows, :cols] = (m2 != 0).double()
    ones[:rows, :cols] = 1
    s = x.reshape(gr, th, gc, tw).sum((1, 3))
    c = ones.reshape(gr, th, gc, tw).sum((1, 3))
    return (s / c).float()


def block_density(
    mask: torch.Tensor, max_cells: int = 512, tile: tuple[int, int] | None = None
) -> torch.Tensor:
    """Mean of a bool ``mask`` over tiles, at most ``max_cells`` per side (GPU).

    Parameters
    ----------
    mask : torch.Tensor
        CUDA tensor (bool or any dtype, nonzero = kept), 2-D or flattened to 2-D.
    max_cells : int
        Cells per side of the output (the tile size is chosen so the grid fits).
    tile : (int, int), optional
        Explicit tile height and width.

    Returns
    -------
    torch.Tensor
        float32 ``[ceil(rows/th), ceil(cols/tw)]`` on the mask's device.

    Examples
    --------
    >>> block_density(torch.rand(4096, 4096, device="cuda") > 0.5).shape  # doctest: +SKIP
    torch.Size([512, 512])
    """
    _cuda_only(mask, "block_density")
    m2 = mask.detach().reshape(mask.shape[0], -1) if mask.dim() > 1 else mask.reshape(1, -1)
    m2 = (m2 != 0).to(torch.uint8).contiguous() if m2.dtype != torch.bool else m2.contiguous()
    m2 = m2.view(torch.uint8)
    rows, cols = m2.shape
    th, tw = tile or _tiles(rows, cols, max_cells)
    if th < 1 or tw < 1:
        raise ValueError(f"tile {tile} must have positive sides")
    gr, gc = math.ceil(rows / th), math.ceil(cols / tw)
    out = torch.empty(gr, gc, dtype=torch.float32, device=m2.device)
    if out.numel():
        blocks = math.ceil(gr * gc * 32 / _THREADS)
        launch(
            "block_density",
            "block_density_u8",
            m2,
            blocks,
            (
                _ptr(m2),
                _ptr(out),
                np.int32(rows),
                np.int32(cols),
                np.int32(th),
                np.int32(tw),
                np.int32(gr),
                np.int32(gc),
            ),
        )
    return out


# ---------------------------------------------------------------------------------------------
# SwiGLU's elementwise step
# ---------------------------------------------------------------------------------------------
_SILU_MUL = {torch.float16: "silu_mul_f16", torch.bfloat16: "silu_mul_bf16"}


def _split_gate_up(gu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if gu.dim() != 2 or gu.shape[1] % 2:
        raise ValueError(
            f"expected a fused gate/up output [tokens, 2 * hidden], got shape {tuple(gu.shape)}"
        )
    return gu.chunk(2, dim=1)


def silu_mul_reference(gu: torch.Tensor) -> torch.Tensor:
    """CPU reference of :func:`silu_mul`: ``silu(gate) * up`` in float32, rounded once.

    Parameters
    ----------
    gu : torch.Tensor
        ``[tokens, 2 * hidden]``, gate in the first half of the last dimension, up in the second.

    Returns
    -------
    torch.Tensor
        ``[tokens, hidden]`` in ``gu``'s dtype, on the CPU.

    Examples
    --------
    >>> silu_mul_reference(torch.tensor([[0.0, 2.0, 5.0, 3.0]])).tolist()
    [[0.0, 5.284782409667969]]
    """
    g, u = _split_gate_up(gu.detach().cpu().float())
    return (torch.nn.functional.silu(g) * u).to(gu.dtype)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for a fused gate/up projection output, in one pass (GPU).

    ``gu`` is ``[tokens, 2 * hidden]`` with the gate in the first half of the last dimension and
    up in the second, either row-major or a transposed view of a row-major ``[2 * hidden,
    tokens]`` (what a sparse layer with the ``r`` output layout returns). The result keeps the
    layout: ``[tokens, hidden]`` row-major, or a transposed view of ``[hidden, tokens]``, so a
    following sparse layer reading the ``r`` layout needs no copy. Half the memory traffic of
    ``silu(g) * u`` in two torch calls, and one rounding instead of two.

    Other layouts, dtypes other than float16/bfloat16, and sizes that are not whole 16-byte
    vectors fall back to torch (same result up to one rounding).

    Parameters
    ----------
    gu : torch.Tensor
        CUDA ``[tokens, 2 * hidden]``, gate first, up second.

    Returns
    -------
    torch.Tensor
        ``[tokens, hidden]`` in ``gu``'s dtype.

    Examples
    --------
    >>> silu_mul(torch.randn(4096, 2 * 11008, dtype=torch.half, device="cuda")).shape  # doctest: +SKIP
    torch.Size([4096, 11008])
    """
    _cuda_only(gu, "silu_mul")
    if gu.dim() != 2 or gu.shape[1] % 2:
        _split_gate_up(gu)  # raises, naming the shape
    tokens, hidden = gu.shape[0], gu.shape[1] // 2
    transposed = gu.stride(0) == 1 and gu.stride(1) == tokens and not gu.is_contiguous()
    if transposed:  # view of [2h, tokens]: rows are features
        rows, cols, ld = hidden, tokens, tokens
    else:
        rows, cols, ld = tokens, hidden, 2 * hidden
    fn = _SILU_MUL.get(gu.dtype)
    aligned = (
        fn is not None
        and (gu.is_contiguous() or transposed)
        and cols % 8 == 0
        and gu.data_ptr() % 16 == 0
        and (hidden * (tokens if transposed else 1)) % 8 == 0
    )
    if not aligned or gu.numel() == 0:
        g, u = _split_gate_up(gu)
        return torch.nn.functional.silu(g) * u
    out = torch.empty(rows, cols, dtype=gu.dtype, device=gu.device)
    up_offset = hidden * (tokens if transposed else 1)
    base = gu.data_ptr()
    vectors = rows * (cols // 8)
    launch(
        "silu_mul",
        fn,
        gu,
        _grid(vectors, gu.device.index or 0),
        (
            np.uint64(base),
            np.uint64(base + up_offset * gu.element_size()),
            _ptr(out),
            np.int64(rows),
            np.int64(cols // 8),
            np.int64(ld // 8),
        ),
    )
    return out.t() if transposed else out


class SiluMulCall:
    """:func:`silu_mul` for one row-major ``[tokens, 2 * hidden]`` shape and dtype, set up once.

    Each call makes the output and launches with three new pointers, the least host time a model's
    decode step can pay for it (the general function checks layouts and builds its arguments on
    every call).

    Parameters
    ----------
    tokens, hidden : int
        Rows, and the width of each half (a multiple of 8).
    dtype : torch.dtype
        float16 or bfloat16.
    device : torch.device
        The CUDA device.
    overlap : bool
        Launch overlapped after the gate/up kernel (one of the explorer's, which lets it).

    Examples
    --------
    >>> gu = torch.randn(16, 2 * 64, dtype=torch.half, device="cuda")  # doctest: +GPU
    >>> call = SiluMulCall(16, 64, torch.half, gu.device)
    >>> torch.equal(call(gu), silu_mul(gu))
    True
    """

    def __init__(self, tokens: int, hidden: int, dtype: torch.dtype, device, overlap=False) -> None:
        if dtype not in _SILU_MUL or hidden % 8 or tokens < 1:
            raise ValueError(
                f"SiluMulCall takes float16/bfloat16 and a hidden size that is a multiple of 8; "
                f"got {dtype}, hidden {hidden}, tokens {tokens}"
            )
        self.device = torch.device(device)
        self._dev = self.device.index or 0
        # base, up, out, rows, vectors per row, row stride in vectors: the last three fixed
        fixed = {3: tokens, 4: hidden // 8, 5: 2 * hidden // 8}
        function = compiled_function("silu_mul", _SILU_MUL[dtype], self._dev)
        kinds = ("u64", "u64", "u64", "i64", "i64", "i64")
        self.launcher = Launcher.for_kernel(function, kinds, fixed, self._dev, overlap)
        self.grid = _dim3(_grid(tokens * (hidden // 8), self._dev))
        self.block = _dim3((_THREADS,))
        self._shape, self._dtype = (tokens, hidden), dtype
        self.up_bytes = hidden * torch.empty((), dtype=dtype).element_size()

    def fits(self, gu: torch.Tensor) -> bool:
        """Whether ``gu`` is the row-major, 16-byte aligned input this call was made for.

        Parameters
        ----------
        gu : torch.Tensor
            The fused gate/up output.

        Returns
        -------
        bool
            True where this call can run on it.
        """
        return (
            gu.dtype == self._dtype
            and gu.shape[0] == self._shape[0]
            and gu.is_contiguous()
            and gu.data_ptr() % 16 == 0
        )

    def __call__(self, gu: torch.Tensor) -> torch.Tensor:
        """``silu(gate) * up`` of ``gu`` (which :meth:`fits`)."""
        out = torch.empty(self._shape, dtype=self._dtype, device=self.device)
        base = gu.data_ptr()
        self.launcher.launch_changed(
            self.grid,
            self.block,
            0,
            current_stream(self._dev),
            (base, base + self.up_bytes, out.data_ptr()),
        )
        return out

    def __repr__(self) -> str:
        tokens, hidden = self._shape
        return f"SiluMulCall({tokens} x 2*{hidden}, {str(self._dtype).removeprefix('torch.')})"


# ---------------------------------------------------------------------------------------------
# Y^T -> Y
# ---------------------------------------------------------------------------------------------
_TILE = 32


def transpose_rows_reference(d: torch.Tensor, tokens: int | None = None) -> torch.Tensor:
    """CPU reference of :func:`transpose_rows`: ``d[:, :tokens].T`` as a row-major tensor.

    Parameters
    ----------
    d : torch.Tensor
        The 2-D tensor to transpose.
    tokens : int, optional
        Columns of ``d`` to keep (default: all).

    Returns
    -------
    torch.Tensor
        ``d[:, :tokens].T``, row-major, on the CPU.

    Examples
    --------
    >>> transpose_rows_reference(torch.arange(6.0).reshape(2, 3), tokens=2).tolist()
    [[0.0, 3.0], [1.0, 4.0]]
    """
    tokens = d.shape[1] if tokens is None else tokens
    return d.detach().cpu()[:, :tokens].t().contiguous()


def transpose_rows(d: torch.Tensor, tokens: int | None = None) -> torch.Tensor:
    """Row-major ``Y[tokens, out]`` from a sparse layer's ``Y^T[out, padded tokens]`` (GPU).

    The fast Hopper kernels of cuSPARSELt write ``Y^T``; a consumer that is not a sparse layer
    (attention, a norm, a residual add) needs ``Y`` row-major. This is one tiled pass through
    shared memory, coalesced on both sides, and drops padded token columns in the same pass.
    16-bit values only (bits are moved, never converted); other dtypes use torch's copy.

    Parameters
    ----------
    d : torch.Tensor
        Row-major ``[out, n]`` CUDA tensor.
    tokens : int, optional
        Columns to keep (``n`` by default).

    Examples
    --------
    >>> transpose_rows(torch.randn(4096, 1024, dtype=torch.half, device="cuda")).shape  # doctest: +SKIP
    torch.Size([1024, 4096])
    """
    _cuda_only(d, "transpose_rows")
    if d.dim() != 2 or not d.is_contiguous():
        raise ValueError(
            f"transpose_rows expects a row-major 2-D tensor, got shape {tuple(d.shape)} with "
            f"strides {d.stride()}. Hint: pass the tensor a sparse layer wrote (Y^T)."
        )
    rows, cols = d.shape
    tokens = cols if tokens is None else int(tokens)
    if not 0 <= tokens <= cols:
        raise ValueError(f"tokens={tokens} is outside 0..{cols} (the columns of d)")
    if d.element_size() != 2 or d.numel() == 0 or tokens == 0:
        return d[:, :tokens].t().contiguous()
    out = torch.empty(tokens, rows, dtype=d.dtype, device=d.device)
    args = (_ptr(d), _ptr(out), np.int64(rows), np.int64(tokens), np.int64(cols), np.int64(rows))
    # two values per access where rows and the row stride are even (always, for sparse layers)
    paired = rows % 2 == 0 and cols % 2 == 0 and d.data_ptr() % 4 == 0
    tile = 2 * _TILE if paired else _TILE
    fn = "transpose16x2" if paired else "transpose16"
    launch("transpose", fn, d, (-(-tokens // tile), -(-rows // tile)), args, block=(_TILE, 8))
    return out
