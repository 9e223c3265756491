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

Examples
--------
>>> slots = argument_slots(("u64", "i32", "i64"))
>>> [ctypes.sizeof(s) for s in slots]
[8, 4, 8]
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from functools import cache

import torch

__all__ = ["LaunchRefused", "Launcher", "argument_slots", "current_stream"]

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
    """

    def __init__(
        self, function, kinds: Sequence[str], fixed: dict | None = None, driver=None
    ) -> None:
        self._slots = argument_slots(kinds)
        self.function = function
        raw = getattr(function, "kernel", function)  # a CuPy RawKernel holds its Function
        self._handle = ctypes.c_void_p(int(raw.ptr))
        array = ctypes.c_void_p * len(self._slots)
        self._params = array(*(ctypes.addressof(s) for s in self._slots))
        self._params_ptr = ctypes.addressof(self._params)
        self._lock = threading.Lock()
        self._launch = driver if driver is not None else _driver()
        for index, value in (fixed or {}).items():
            self._slots[index].value = value
        self._changing = [s for i, s in enumerate(self._slots) if i not in (fixed or {})]

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
            code = self._launch(self._handle, *grid, *block, shared, stream, self._params_ptr, None)
        if code:
            raise LaunchRefused(f"cuLaunchKernel returned CUDA error {code}")

    def __repr__(self) -> str:
        return f"Launcher({len(self._slots)} arguments, {len(self._changing)} set per launch)"
