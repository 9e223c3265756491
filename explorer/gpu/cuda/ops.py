"""The sparse modules as one ``torch.library`` operator, for ``torch.compile`` and CUDA graphs.

Under ``torch.compile`` a :class:`~explorer.gpu.SparseLinear` (or a fused block) does not let
Dynamo trace its Python (plan dictionaries, raw pointers, ctypes calls: graph breaks and
recompiles); it calls ``torch.ops.explorer.sparse_forward(x, module_id)`` instead. The op is
opaque to the compiler, has a fake implementation that gives the output's shape and dtype
(always a new row-major tensor), and runs the module's compiled-mode call
(``module.run_compiled(x)``): a dictionary lookup of the route already chosen for this input
and one library call, so a compiled model takes exactly the routes the eager one does, at
about the host cost of an ``aten::mm``. Inside ``mode="reduce-overhead"`` the op is captured in
the CUDA graph like any other kernel launch: no host cost per call at replay.

The op is registered with ``torch.library.Library.define`` and ``impl`` directly rather than
with the ``torch.library.custom_op`` decorator: the decorator's Python wrappers (autograd and
argument checks on every call) cost more host time per call than the whole sparse product
needs in a default-mode compiled decode step.

Where the explorer's compiled operator is loaded (:mod:`explorer.gpu.cuda.native`),
:func:`forward` calls ``explorer::sparse_call`` instead, with the same arguments and fake
implementation: it runs an input's remembered call from C++ and hands any other to this op.

Modules register themselves when built (:func:`register`); the registry holds weak references.
The op does not alias its input, mutates nothing and has no autograd formula (inference only).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from functools import partial

import torch

__all__ = ["call_overhead_us", "forward", "register", "use_native"]

_MODULES: dict[int, weakref.ReferenceType] = {}
_IDS = itertools.count(1)
_LOCK = threading.Lock()
# the compiled operator and the function that drops a gone module's programs, once loaded
_NATIVE: list = [None, None]

_LIB = torch.library.Library("explorer", "FRAGMENT")
_LIB.define("sparse_forward(Tensor x, int module_id) -> Tensor")


def register(module: torch.nn.Module) -> int:
    """Give ``module`` an id for the op; it needs ``run_compiled(x)`` and ``fake_output(x)``.

    Parameters
    ----------
    module : torch.nn.Module
        The module; it is held by a weak reference.

    Returns
    -------
    int
        The module's id.

    Examples
    --------
    >>> class Twice(torch.nn.Module):
    ...     def run_compiled(self, x):
    ...         return 2 * x
    ...
    ...     def fake_output(self, x):
    ...         return torch.empty_like(x)
    >>> m = Twice()
    >>> forward(torch.ones(2), register(m)).tolist()
    [2.0, 2.0]
    """
    with _LOCK:
        mid = next(_IDS)
        _MODULES[mid] = weakref.ref(module, partial(_gone, mid))
    if _NATIVE[0] is None and torch.cuda.is_available():
        from explorer.gpu.cuda import native

        native.load()  # once per process: the compiled operator, built once per torch build
    return mid


def _gone(mid: int, _ref=None) -> None:
    _MODULES.pop(mid, None)
    forget = _NATIVE[1]
    if forget is not None:
        forget(mid)


def use_native(op, forget) -> None:
    """Send :func:`forward`'s calls to the compiled operator ``op`` from now on.

    Parameters
    ----------
    op : torch._ops.OpOverloadPacket
        ``torch.ops.explorer.sparse_call`` (:mod:`explorer.gpu.cuda.native`).
    forget : callable
        ``forget(module_id)``: drops a module's programs once the module is gone.
    """
    torch.library.register_fake("explorer::sparse_call", _fake, lib=_LIB)
    _NATIVE[:] = [op, forget]


def _module(module_id: int) -> torch.nn.Module:
    ref = _MODULES.get(module_id)
    mod = ref() if ref is not None else None
    if mod is None:
        raise RuntimeError(
            f"sparse module {module_id} no longer exists (it was deleted or replaced); "
            "rebuild the compiled model after changing it. Hint: torch.compile(model) again."
        )
    return mod


def _sparse_forward(x: torch.Tensor, module_id: int) -> torch.Tensor:
    ref = _MODULES.get(module_id)
    mod = ref() if ref is not None else None
    if mod is None:
        mod = _module(module_id)  # raises, naming the fix
    y = mod.run_compiled(x)
    # the op promises a row-major tensor (what its fake implementation describes)
    return y if y.is_contiguous() else y.contiguous()


def _fake(x: torch.Tensor, module_id: int) -> torch.Tensor:
    return _module(module_id).fake_output(x)


for _key in ("CUDA", "CPU"):
    _LIB.impl("sparse_forward", _sparse_forward, _key)
torch.library.register_fake("explorer::sparse_forward", _fake, lib=_LIB)


def forward(x: torch.Tensor, module_id: int) -> torch.Tensor:
    """Run registered module ``module_id`` on ``x`` through the op.

    Parameters
    ----------
    x : torch.Tensor
        The input.
    module_id : int
        An id from :func:`register`.

    Returns
    -------
    torch.Tensor
        The module's ``run_compiled(x)``.
    """
    native = _NATIVE[0]
    if native is not None:
        return native(x, module_id)
    return torch.ops.explorer.sparse_forward(x, module_id)


class _Echo(torch.nn.Module):
    """A registered module that returns its input: the op's own cost, nothing else."""

    def run_compiled(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def fake_output(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)


_OVERHEAD_US: dict[int, float] = {}


def call_overhead_us(measure: bool = False) -> float:
    """Host microseconds the op adds to a call of its module on this machine.

    0 until measured; ``measure=True`` measures it once per process on the current CUDA device,
    outside any CUDA-graph capture.

    A compiled model pays this on every sparse call and not on a traced dense matmul, so
    routes for ``torch.compile``'s default mode are chosen with it counted.

    Parameters
    ----------
    measure : bool, default False
        Measure it if not measured yet.

    Returns
    -------
    float
        Microseconds per call; 0 without CUDA or until measured.
    """
    if not torch.cuda.is_available():
        return 0.0
    dev = torch.cuda.current_device()
    found = _OVERHEAD_US.get(dev)
    if found is None:
        if not measure or torch.cuda.is_current_stream_capturing():
            return 0.0
        from explorer.gpu.routes.timing import host_us

        echo = _Echo()
        mid = register(echo)
        x = torch.empty(8, device=f"cuda:{dev}")
        op = torch.ops.explorer.sparse_forward
        through = min(host_us(lambda: op(x, mid)) for _ in range(3))
        direct = min(host_us(lambda: echo.run_compiled(x).is_contiguous()) for _ in range(3))
        found = _OVERHEAD_US[dev] = max(0.0, through - direct)
    return found
