"""The explorer's compiled operator: a layer's remembered calls run from C++ (``kernels/native_op.cpp``).

A model compiled with ``torch.compile`` calls each swapped layer through one opaque operator.
Written in Python, that operator costs about 25 us of host time a call on an H200's host, more
than ``F.linear``, because the dispatcher steps into Python and the layer's call runs there.
The compiled operator ``explorer::sparse_call`` runs the calls a layer has already made once
from C++ instead: after the first call of an input shape has chosen its route and set it up,
the layer hands this module a *program* (:class:`LaunchStep` and :class:`MatmulStep`: the
cuSPARSELt matmul or the kernel launch, every argument fixed but the input's and output's
pointers; :class:`LinearStep`: torch's dense product on a weight the program holds), and later
calls of that shape are one output allocation and one library or driver
call per step. Anything else goes to the Python operator as before.

The source is compiled once per torch build with :func:`torch.utils.cpp_extension.load`
(a C++ compiler and ninja; no CUDA toolkit) into torch's extension folder
(``TORCH_EXTENSIONS_DIR``, by default under ``~/.cache``). Where it cannot be built, or with
``SPARSITY_EXPLORER_NATIVE=0`` in the environment, the Python operator serves every call, and
:func:`status` says why.

Raw pointers are kept honest by tokens: a program names the tokens of what its pointers belong
to (a layer's table of remembered calls, a plan, a kernel's set-up); each is retired when that
is dropped, and a program with a retired token is never run again.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import threading
import warnings
import weakref
from dataclasses import dataclass

import torch

__all__ = [
    "CLOCK_CODES",
    "MODE_CODES",
    "NATIVE_ENV",
    "LaunchStep",
    "LinearStep",
    "MatmulStep",
    "clock_of",
    "counts",
    "forget",
    "launch_step",
    "load",
    "loaded",
    "new_token",
    "retire",
    "retire_with",
    "status",
    "steps_of",
]

NATIVE_ENV = "SPARSITY_EXPLORER_NATIVE"
"""The environment variable that keeps the compiled operator off where it reads ``0``."""

#: Where a launch argument's value comes from (``kernels/native_op.cpp``'s ``Source``).
FIXED, IN_PTR, OUT_PTR, IN_ROW_STRIDE = 0, 1, 2, 3
#: Execution modes and clocks as ``native_op.cpp`` numbers them.
MODE_CODES = {"auto": 0, "eager": 1, "compile": 1, "graphs": 2}
CLOCK_CODES = {"wall": 0, "gpu": 1}
_LOG = logging.getLogger(__name__)
_LOCK = threading.Lock()
_STATE: dict = {"loaded": False, "reason": "not loaded yet"}


@dataclass(frozen=True)
class LaunchStep:
    """One kernel launch of a program: its input is the step before's output (or the call's).

    Attributes
    ----------
    function : int
        The driver's ``CUfunction``.
    grid, block : tuple of int
        Three dimensions each.
    shared : int
        Dynamic shared memory in bytes.
    args : tuple of (source, bytes, value)
        One per kernel parameter: ``FIXED`` with its value, ``IN_PTR`` with a byte offset into
        the input, ``OUT_PTR``, or ``IN_ROW_STRIDE`` (the input's columns); 4 or 8 bytes.
    out_cols : int
        Columns of the output, which has the input's rows and dtype.
    tokens : tuple of int
        What the fixed pointers belong to.
    """

    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    args: tuple[tuple[int, int, int], ...]
    out_cols: int
    tokens: tuple[int, ...] = ()

    def code(self) -> list[int]:
        """The step as ``native_op.cpp`` reads it."""
        flat = [a for arg in self.args for a in arg]
        return [0, self.out_cols, self.function, *self.grid, *self.block, self.shared,
                len(self.args), *flat]  # fmt: skip

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors the step holds: none (its pointers are kept alive by their owners)."""
        return ()


@dataclass(frozen=True)
class MatmulStep:
    """One ``cusparseLtMatmul`` of a program: ``D = A @ B`` with ``B`` the input, ``D`` the output.

    Attributes
    ----------
    handle, plan, alpha, a, beta, workspace : int
        The library call's fixed pointers (:meth:`explorer.gpu.library.cusparselt.Plan.raw_arguments`).
    out_cols : int
        Columns of the output (the weight's rows), in the input's dtype.
    tokens : tuple of int
        What the fixed pointers belong to (the plan's token).
    """

    handle: int
    plan: int
    alpha: int
    a: int
    beta: int
    workspace: int
    out_cols: int
    tokens: tuple[int, ...] = ()

    def code(self) -> list[int]:
        """The step as ``native_op.cpp`` reads it."""
        return [1, self.out_cols, self.handle, self.plan, self.alpha, self.a, self.beta,
                self.workspace]  # fmt: skip

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors the step holds: none (its pointers are kept alive by their owners)."""
        return ()


@dataclass(frozen=True, eq=False)
class LinearStep:
    """Torch's dense product ``x @ weight^T + bias`` (``at::linear``) as one step of a program.

    The step of a route that stayed dense: the same cuBLAS call ``F.linear`` makes, so a block
    whose part runs dense is still one program (:class:`~explorer.gpu.SparseGatedMLP`). The
    program holds the tensors until it is dropped, so no pointer can outlive them; a call the
    product refuses (another dtype or device) goes to Python.

    Attributes
    ----------
    weight : torch.Tensor
        ``[out_cols, in]``, in the input's dtype and on its device.
    bias : torch.Tensor or None
        ``[out_cols]``, or None.
    tokens : tuple of int
        What else the step depends on (none of its own).
    """

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    tokens: tuple[int, ...] = ()

    @property
    def out_cols(self) -> int:
        """Columns of the output: the weight's rows."""
        return self.weight.shape[0]

    def code(self) -> list[int]:
        """The step as ``native_op.cpp`` reads it; the tensors go beside it (:meth:`tensors`)."""
        return [2, self.out_cols, int(self.bias is not None)]

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The weight, then the bias where there is one: handed to the operator with the code."""
        return (self.weight,) if self.bias is None else (self.weight, self.bias)


def launch_step(
    launcher, grid, block, shared: int, per_call: dict, out_cols: int, owner
) -> LaunchStep:
    """A :class:`~explorer.gpu.cuda.launch.Launcher`'s kernel as one program step.

    Parameters
    ----------
    launcher : Launcher
        The kernel's launcher, with every parameter but those in ``per_call`` fixed.
    grid, block : tuple of int
        The launch's dimensions.
    shared : int
        Dynamic shared memory in bytes.
    per_call : dict
        Parameter index to ``(source, value)``: ``(IN_PTR, byte offset)``, ``(OUT_PTR, 0)`` or
        ``(IN_ROW_STRIDE, 0)``.
    out_cols : int
        Columns of the step's output.
    owner : object
        What the fixed pointers belong to: the step's token is retired when it is dropped.

    Returns
    -------
    LaunchStep
    """
    function, slots = launcher.raw_arguments()
    args = []
    for i, (size, fixed) in enumerate(slots):
        source, value = per_call.get(i, (FIXED, fixed))
        args.append((source, size, value))
    token = retire_with(owner)
    return LaunchStep(function, tuple(grid), tuple(block), shared, tuple(args), out_cols, (token,))


def _wanted() -> str | None:
    """Why the operator is not to be built here, or None."""
    if os.environ.get(NATIVE_ENV, "1").strip() == "0":
        return f"is turned off ({NATIVE_ENV}=0)"
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return (
            f"has no C++ compiler ({compiler} not found); install one (Debian: apt-get install g++)"
        )
    return None


def _ninja_on_path() -> None:
    """Put the ``ninja`` of the Python package on the PATH where no other is (torch needs one)."""
    if shutil.which("ninja") is not None:
        return
    try:
        import ninja
    except ImportError:
        return
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def load(build: bool = True) -> bool:
    """Build (once per torch build) and load the compiled operator; True if it is in use.

    The first build takes about 10-60 s; later processes load it from torch's extension folder
    in well under a second. A build that fails is not tried again in this process, and
    :func:`status` gives the reason.

    Parameters
    ----------
    build : bool, default True
        Build if needed; False only reports whether it is loaded.

    Returns
    -------
    bool
        Whether ``explorer::sparse_call`` serves compiled calls.
    """
    if _STATE["loaded"] or not build or "tried" in _STATE:
        return _STATE["loaded"]
    with _LOCK:
        if "tried" in _STATE:
            return _STATE["loaded"]
        _STATE["tried"] = True
        why = _wanted()
        if why is None:
            try:
                _build()
            except Exception as exc:  # a compiler error, a missing header: the Python op serves
                why = f"could not be built ({type(exc).__name__}: {str(exc)[-300:]})"
        if why is not None:
            _STATE["reason"] = why
            if os.environ.get(NATIVE_ENV, "1").strip() != "0":
                warnings.warn(
                    f"sparsity-explorer's compiled operator {why}: sparse layers are called "
                    "through Python, eagerly and under torch.compile (about 8 us more a "
                    "compiled call), and compiled models trace the dense matmul at decode "
                    "sizes. Hint: install a C++ "
                    f"compiler and restart, or set {NATIVE_ENV}=0 to silence this.",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return False
        from explorer.gpu.cuda import ops

        ops.use_native(torch.ops.explorer.sparse_call, forget)
        if torch.cuda.is_available():
            _set_real_functions()
        _STATE["loaded"], _STATE["reason"] = True, "loaded"
    return True


def _build() -> None:
    from torch.utils import cpp_extension

    from explorer.gpu.cuda.sources import kernel_dir

    source = kernel_dir() / "native_op.cpp"
    _ninja_on_path()
    _LOG.info("building the explorer's compiled operator (once per torch build)")
    cpp_extension.load(
        name="explorer_native_op",
        sources=[str(source)],
        extra_cflags=["-O2"],
        is_python_module=False,
        verbose=False,
    )


def _set_real_functions() -> None:
    """Point the operator at the CUDA driver's launch and capture query and cuSPARSELt's matmul."""
    driver = ctypes.CDLL("libcuda.so.1")
    launch = ctypes.cast(driver.cuLaunchKernel, ctypes.c_void_p).value or 0
    capturing = ctypes.cast(driver.cuStreamIsCapturing, ctypes.c_void_p).value or 0
    torch.ops.explorer.native_set_functions(launch, capturing, _matmul_address())


def _matmul_address() -> int:
    """``cusparseLtMatmul``'s address as nvmath-python loaded it, or 0 (no matmul programs)."""
    try:
        from nvmath.bindings._internal import cusparseLt as inner

        return int(inner._inspect_function_pointer("__cusparseLtMatmul"))
    except Exception:  # no nvmath, or another layout of its internals: launches only
        return 0


def loaded() -> bool:
    """Whether the compiled operator is loaded (without building it)."""
    return _STATE["loaded"]


def status() -> str:
    """A sentence on the compiled operator: in use, or why not.

    Returns
    -------
    str
        For reports and error messages.

    Examples
    --------
    >>> isinstance(status(), str)
    True
    """
    if _STATE["loaded"]:
        matmul = torch.ops.explorer.native_functions()[2] != 0
        extra = "" if matmul else " (kernel launches only: cuSPARSELt's matmul was not found)"
        return f"compiled operator explorer::sparse_call in use{extra}"
    return f"compiled operator not in use (it {_STATE['reason']}); compiled calls go through Python"


def new_token() -> int:
    """A new token (0 when the operator is not loaded: nothing will use it)."""
    return int(torch.ops.explorer.native_new_token()) if _STATE["loaded"] else 0


def retire(token: int) -> None:
    """Retire ``token``: no program naming it runs again.

    Parameters
    ----------
    token : int
        From :func:`new_token`; 0 is ignored.
    """
    if token and _STATE["loaded"]:
        torch.ops.explorer.native_retire(token)


def retire_with(owner: object) -> int:
    """A token retired when ``owner`` is garbage-collected (0 when the operator is not loaded).

    Parameters
    ----------
    owner : object
        What the token's pointers belong to (weak-referenceable).

    Returns
    -------
    int
        The token.
    """
    token = new_token()
    if token:
        weakref.finalize(owner, retire, token)
    return token


def forget(module_id: int) -> None:
    """Drop every program of ``module_id`` (the module is gone).

    Parameters
    ----------
    module_id : int
        The module's op id.
    """
    if _STATE["loaded"]:
        torch.ops.explorer.native_forget(module_id)


def counts(module_id: int = 0) -> dict[str, int]:
    """Calls served by C++ and by Python so far in this process, and ``module_id``'s programs.

    Parameters
    ----------
    module_id : int
        A module's op id.

    Returns
    -------
    dict
        ``native_calls``, ``python_calls``, ``programs`` and ``refused_calls`` (calls the driver
        or library refused from C++, then made by Python); all 0 when not loaded.
    """
    names = ("native_calls", "python_calls", "programs", "refused_calls")
    if not _STATE["loaded"]:
        return dict.fromkeys(names, 0)
    return dict(zip(names, torch.ops.explorer.native_counts(module_id), strict=True))


def steps_of(call) -> list | None:
    """A remembered call's program steps (its ``native_steps()``), or None where it has none.

    Parameters
    ----------
    call : callable or None
        A call a layer remembered for an input.

    Returns
    -------
    list or None
    """
    make = getattr(call, "native_steps", None)
    return None if make is None else make()


def clock_of(mode: str) -> str:
    """The clock a call in ``mode`` takes its route by at this moment (``"gpu"`` or ``"wall"``).

    Parameters
    ----------
    mode : str
        ``"auto"``, ``"eager"``, ``"compile"`` or ``"graphs"``.

    Returns
    -------
    str
        ``"gpu"`` for ``"graphs"``, and for ``"auto"`` inside a CUDA-graph capture.
    """
    if mode == "graphs":
        return "gpu"
    if mode == "auto" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return "gpu"
    return "wall"
