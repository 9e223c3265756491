"""Kernel launches that cost about as much host time as a torch op: the CUDA driver, directly.

A CuPy ``RawKernel`` call wraps every argument, looks up the stream and checks the grid on each
launch: 20 to 60 microseconds of host time, more than the GPU time of a decode-size product.
A :class:`Launcher` keeps one kernel's argument slots in ``ctypes`` storage made once, so a launch
is: write the values that changed into their slots, then one ``cuLaunchKernel`` call through
``ctypes``. The kernel's function handle comes from CuPy's compiled module, so CuPy still builds
and caches the code; only the launch bypasses it.

A :class:`Launcher` launches on the calling thread's current CUDA context (torch's primary
context of the current device). Where the driver refuses (no current context, another device),
:meth:`Launcher.launch` raises :class:`LaunchRefused` and callers fall back to CuPy's launch.

Overlapped launches. A kernel whose code waits for its inputs (PTX ``griddepcontrol.wait``
before it reads anything the kernel before it writes, and before it writes anything) can be
launched overlapped (:meth:`Launcher.for_kernel`): ``cuLaunchKernelEx`` with the driver's
programmatic stream serialization attribute, so the GPU may start it while the kernel before it
in the stream finishes, in a stream and in a CUDA graph captured from one (programmatic
dependent launch, Hopper and newer, CUDA driver 12.3 or newer: :func:`overlap_supported`). A
decode kernel uses that time to start reading its weight; it pays only after one of the
explorer's own kernels, which let the next start early. ``SPARSITY_EXPLORER_OVERLAP=0`` in the
environment turns it off for launchers made afterwards.

Examples
--------
>>> slots = argument_slots(("u64", "i32", "i64"))
>>> [ctypes.sizeof(s) for s in slots]
[8, 4, 8]
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from functools import cache

import torch

__all__ = [
    "OVERLAP_ENV",
    "LaunchRefused",
    "Launcher",
    "argument_slots",
    "current_stream",
    "overlap_supported",
]

OVERLAP_ENV = "SPARSITY_EXPLORER_OVERLAP"
"""The environment variable that turns overlapped launches off where it reads ``0``."""

# CUDA 12.3: the first driver that captures programmatic dependencies into CUDA graphs
_OVERLAP_DRIVER = 12030
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID

_SLOT_TYPES = {
    "u64": ctypes.c_uint64,
    "u32": ctypes.c_uint32,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "f32": ctypes.c_float,
}


class LaunchRefused(RuntimeError):
    """The driver refused a launch (a code other than success); the caller may use CuPy."""


def argument_slots(kinds: Sequence[str]) -> list[ctypes._SimpleCData]:
    """One ``ctypes`` value per kernel argument.

    The kinds are ``"u64"`` (pointers), ``"u32"``, ``"i32"``, ``"i64"`` and ``"f32"``.

    Parameters
    ----------
    kinds : sequence of str
        One kind per argument.

    Returns
    -------
    list of ctypes values
        The slots, zero-initialised.

    Raises
    ------
    ValueError
        A kind outside those.
    """
    bad = [k for k in kinds if k not in _SLOT_TYPES]
    if bad:
        raise ValueError(f"argument kinds {bad} unknown; expected one of {sorted(_SLOT_TYPES)}")
    return [_SLOT_TYPES[k]() for k in kinds]


@cache
def _driver():
    """``cuLaunchKernel`` from the CUDA driver library, with its argument types declared.

    Loaded with ``ctypes.PyDLL``, which keeps the GIL through the call: a launch returns in
    microseconds, and releasing the GIL around it would let any other Python thread (a
    compiler's worker, a progress bar's monitor) take it, so that the caller waits for the
    interpreter's switch interval (milliseconds) before it can issue the next call.
    """
    lib = ctypes.PyDLL("libcuda.so.1")
    fn = lib.cuLaunchKernel
    u = ctypes.c_uint
    fn.argtypes = [
        ctypes.c_void_p,  # CUfunction
        u,
        u,
        u,  # grid
        u,
        u,
        u,  # block
        u,  # dynamic shared memory
        ctypes.c_void_p,  # stream
        ctypes.c_void_p,  # kernelParams
        ctypes.c_void_p,  # extra
    ]
    fn.restype = ctypes.c_int
    return fn


class _LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an id, padding, and a 64-byte value union (an int here)."""

    _fields_ = [
        ("id", ctypes.c_int),
        ("pad", ctypes.c_char * 4),
        ("value", ctypes.c_int),
        ("rest", ctypes.c_char * 60),
    ]


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig``: grid, block, shared bytes, stream and the attributes."""

    _fields_ = [
        ("grid_x", ctypes.c_uint),
        ("grid_y", ctypes.c_uint),
        ("grid_z", ctypes.c_uint),
        ("block_x", ctypes.c_uint),
        ("block_y", ctypes.c_uint),
        ("block_z", ctypes.c_uint),
        ("shared", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_LaunchAttribute)),
        ("num_attrs", ctypes.c_uint),
    ]


@cache
def _driver_ex():
    """``cuLaunchKernelEx``, or None where the driver library lacks it."""
    lib = ctypes.PyDLL("libcuda.so.1")
    fn = getattr(lib, "cuLaunchKernelEx", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


@cache
def _driver_version() -> int:
    """The CUDA driver's version, 1000 * major + 10 * minor (0 where it cannot be read)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    version = ctypes.c_int(0)
    return version.value if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 else 0


def overlap_supported(device: int) -> bool:
    """Whether kernels on ``device`` can be launched overlapped (see the module's docstring).

    True on a Hopper or newer GPU (compute capability 9.0) with a CUDA driver of 12.3 or newer
    that has ``cuLaunchKernelEx``, unless ``SPARSITY_EXPLORER_OVERLAP=0``.

    Parameters
    ----------
    device : int
        The CUDA device index.

    Returns
    -------
    bool
    """
    if os.environ.get(OVERLAP_ENV, "1").strip() == "0":
        return False
    if torch.cuda.get_device_capability(device) < (9, 0):
        return False
    return _driver_version() >= _OVERLAP_DRIVER and _driver_ex() is not None


class _OverlappedDriver:
    """A callable with ``cuLaunchKernel``'s signature that launches overlapped.

    One per :class:`Launcher` (it keeps the launch's configuration between calls, so a call
    writes only what changed).
    """

    def __init__(self, launch_ex) -> None:
        self._launch_ex = launch_ex
        self._attribute = _LaunchAttribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
        self._config = _LaunchConfig(attrs=ctypes.pointer(self._attribute), num_attrs=1)
        self._config_ptr = ctypes.addressof(self._config)
        self._shape = None

    def __call__(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        config = self._config
        if self._shape != (gx, gy, gz, bx, by, bz, shared):
            self._shape = (gx, gy, gz, bx, by, bz, shared)
            config.grid_x, config.grid_y, config.grid_z = gx, gy, gz
            config.block_x, config.block_y, config.block_z = bx, by, bz
            config.shared = shared
        config.stream = stream
        return self._launch_ex(self._config_ptr, function, params, extra)


def current_stream(device: int) -> int:
    """Torch's current CUDA stream on ``device`` as a raw handle (no Python stream object).

    Parameters
    ----------
    device : int
        The CUDA device index.

    Returns
    -------
    int
        The stream's raw handle.
    """
    return torch._C._cuda_getCurrentRawStream(device)


class Launcher:
    """Launch one compiled kernel with arguments kept in slots made once.

    Parameters
    ----------
    function : cupy.RawKernel or cupy.cuda.Function
        The kernel (the ``ptr`` of its ``Function`` is the driver's ``CUfunction``).
    kinds : sequence of str
        The kernel's parameters in order: ``"u64"`` for pointers, ``"u32"``, ``"i32"``,
        ``"i64"``, ``"f32"``.
    fixed : mapping of int to number, optional
        Values of parameters that never change (a weight's pointer, its shape), written once;
        :meth:`launch_changed` then writes only the others.
    driver : callable, optional
        What launches: ``cuLaunchKernel``'s signature (function, grid x/y/z, block x/y/z,
        shared bytes, stream, parameter array, extra) returning a CUDA error code. The CUDA
        driver's by default.
    overlapped : callable, optional
        What launches overlapped, with the same signature; given, every launch after the first
        goes through it (the first is ordinary, so a weight written just before by the stream
        is complete before any overlapped launch reads it). Where it returns an error the
        launch is made again through ``driver`` and overlapped launches stop. Only for kernels
        that wait for their inputs; see :meth:`for_kernel`.
    """

    def __init__(
        self,
        function,
        kinds: Sequence[str],
        fixed: dict | None = None,
        driver=None,
        overlapped=None,
    ) -> None:
        self._slots = argument_slots(kinds)
        self.function = function
        raw = getattr(function, "kernel", function)  # a CuPy RawKernel holds its Function
        self._handle = ctypes.c_void_p(int(raw.ptr))
        array = ctypes.c_void_p * len(self._slots)
        self._params = array(*(ctypes.addressof(s) for s in self._slots))
        self._params_ptr = ctypes.addressof(self._params)
        self._lock = threading.Lock()
        self._launch = self._plain = driver if driver is not None else _driver()
        self._overlapped = overlapped
        for index, value in (fixed or {}).items():
            self._slots[index].value = value
        self._changing = [s for i, s in enumerate(self._slots) if i not in (fixed or {})]

    @classmethod
    def for_kernel(
        cls,
        function,
        kinds: Sequence[str],
        fixed: dict | None = None,
        device: int = 0,
        overlap: bool = True,
    ) -> Launcher:
        """A launcher of a kernel that waits for its inputs: overlapped where ``device`` allows.

        An overlapped launch pays after one of the explorer's kernels, which lets the next one
        start once all its blocks have begun (``griddepcontrol.launch_dependents``): the
        SwiGLU kernel, or a decode kernel after the SwiGLU kernel. After another library's
        kernel, which does not, it costs a little (measured on an H200: docs/gpu.md).

        Parameters
        ----------
        function : cupy.RawKernel or cupy.cuda.Function
            The kernel; its code must run ``griddepcontrol.wait`` before it reads what an
            earlier kernel writes and before it writes anything.
        kinds : sequence of str
            The kernel's parameters in order (as for the constructor).
        fixed : mapping of int to number, optional
            Values of parameters that never change.
        device : int
            The CUDA device the kernel runs on (:func:`overlap_supported` decides).
        overlap : bool
            False gives an ordinary launcher (the caller's choice, e.g. a kernel after
            another library's).

        Returns
        -------
        Launcher
        """
        overlapped = None
        if overlap and overlap_supported(device):
            overlapped = _OverlappedDriver(_driver_ex())
        return cls(function, kinds, fixed, overlapped=overlapped)

    @property
    def overlapping(self) -> bool:
        """Whether launches go, or will go after the first, overlapped."""
        return self._overlapped is not None

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: int,
        values: Sequence[int],
    ) -> None:
        """Launch with ``values`` (one per parameter) on ``stream`` (a raw handle).

        Parameters
        ----------
        grid : (int, int, int)
            Blocks per grid dimension.
        block : (int, int, int)
            Threads per block dimension.
        shared : int
            Dynamic shared memory in bytes.
        stream : int
            The raw stream handle.
        values : sequence of int
            One value per kernel parameter.

        Raises
        ------
        LaunchRefused
            The driver returned an error code (no current context, a bad configuration).
        """
        self._fire(self._slots, grid, block, shared, stream, values)

    def launch_changed(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: int,
        values: Sequence[int],
    ) -> None:
        """Launch with ``values`` for the parameters not fixed at construction, in order.

        Parameters
        ----------
        grid : (int, int, int)
            Blocks per grid dimension.
        block : (int, int, int)
            Threads per block dimension.
        shared : int
            Dynamic shared memory in bytes.
        stream : int
            The raw stream handle.
        values : sequence of int
            The values of the parameters not fixed at construction, in order.

        Raises
        ------
        LaunchRefused
            The driver returned an error code.
        """
        self._fire(self._changing, grid, block, shared, stream, values)

    def _fire(self, slots, grid, block, shared: int, stream: int, values) -> None:
        with self._lock:  # the slots are shared: one launch writes them at a time
            for slot, value in zip(slots, values, strict=True):
                slot.value = value
            launch = self._launch
            code = launch(self._handle, *grid, *block, shared, stream, self._params_ptr, None)
            if code and launch is not self._plain:  # overlapped refused: ordinary from now on
                self._launch, self._overlapped = self._plain, None
                code = self._plain(
                    self._handle, *grid, *block, shared, stream, self._params_ptr, None
                )
            elif not code and self._overlapped is not None:
                self._launch = self._overlapped  # the first launch was ordinary
        if code:
            raise LaunchRefused(f"cuLaunchKernel returned CUDA error {code}")

    def raw_arguments(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """The kernel's driver handle and each parameter's size and value as last written.

        For a caller that launches the same kernel from C++ (:mod:`explorer.gpu.cuda.native`):
        the values of fixed parameters are what the constructor wrote; the others are whatever
        the last launch left.

        Returns
        -------
        tuple
            ``(function, ((bytes, value), ...))``, each value as the signed integer its bytes
            read as (a float parameter's bits).
        """
        slots = tuple(
            (ctypes.sizeof(s), int.from_bytes(bytes(s), "little", signed=True)) for s in self._slots
        )
        return self._handle.value or 0, slots

    def __repr__(self) -> str:
        overlap = ", overlapped" if self._overlapped is not None else ""
        return (
            f"Launcher({len(self._slots)} arguments, {len(self._changing)} set per launch{overlap})"
        )
