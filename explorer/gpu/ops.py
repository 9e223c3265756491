"""The sparse modules as one ``torch.library`` custom op, for ``torch.compile`` and CUDA graphs.

Under ``torch.compile`` a :class:`~explorer.gpu.SparseLinear` (or a fused block) does not let
Dynamo trace its Python (plan dictionaries, raw pointers, ctypes calls: graph breaks and
recompiles); it calls ``torch.ops.explorer.sparse_forward(x, module_id)`` instead. The op is
opaque to the compiler, has a fake implementation that gives the output's shape and dtype
(always a new row-major tensor), and runs the module's eager forward, so a compiled model takes
exactly the routes the eager one does. Inside ``mode="reduce-overhead"`` the op is captured in
the CUDA graph like any other kernel launch: no host cost per call at replay.

Modules register themselves when built (:func:`register`); the registry holds weak references.
The op does not alias its input, mutates nothing and has no autograd formula (inference only).
"""

from __future__ import annotations

import itertools
import threading
import weakref

import torch

__all__ = ["forward", "register"]

_MODULES: dict[int, weakref.ReferenceType] = {}
_IDS = itertools.count(1)
_LOCK = threading.Lock()


def register(module: torch.nn.Module) -> int:
    """Give ``module`` an id for the custom op; it needs ``_forward`` and ``_fake_output``.

    Examples
    --------
    >>> class Twice(torch.nn.Module):
    ...     def _forward(self, x):
    ...         return 2 * x
    ...
    ...     def _fake_output(self, x):
    ...         return torch.empty_like(x)
    >>> m = Twice()
    >>> forward(torch.ones(2), register(m)).tolist()
    [2.0, 2.0]
    """
    with _LOCK:
        mid = next(_IDS)
        _MODULES[mid] = weakref.ref(module, lambda _, mid=mid: _MODULES.pop(mid, None))
    return mid


def _module(module_id: int) -> torch.nn.Module:
    ref = _MODULES.get(module_id)
    mod = ref() if ref is not None else None
    if mod is None:
        raise RuntimeError(
            f"sparse module {module_id} no longer exists (it was deleted or replaced); "
            "rebuild the compiled model after changing it. Hint: torch.compile(model) again."
        )
    return mod


@torch.library.custom_op("explorer::sparse_forward", mutates_args=())
def _sparse_forward(x: torch.Tensor, module_id: int) -> torch.Tensor:
    y = _module(module_id)._forward(x)
    # the op promises a row-major tensor (what its fake implementation describes)
    return y if y.is_contiguous() else y.contiguous()


@_sparse_forward.register_fake
def _(x: torch.Tensor, module_id: int) -> torch.Tensor:
    return _module(module_id)._fake_output(x)


def forward(x: torch.Tensor, module_id: int) -> torch.Tensor:
    """Run registered module ``module_id`` on ``x`` through the custom op."""
    return torch.ops.explorer.sparse_forward(x, module_id)
