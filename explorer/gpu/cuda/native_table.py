"""A module's programs for the compiled operator, and the token they depend on.

See :mod:`explorer.gpu.cuda.native` for the operator and its programs. A
:class:`~explorer.gpu.modules.sparse_linear.SparseLinear` keeps one :class:`NativeTable`: each
call it remembers for an input shape is set here as a program (or, where the operator cannot
make it, drops the program that shape had), and forgetting its calls retires them all.

A program set for the wall clock also serves the module's eager calls: :attr:`NativeTable.eager`
maps each input it was set for (shape, strides, device, dtype) to a call of the operator, which
a module's eager forward makes instead of its Python call (the ``host`` suite measured 12 us a
call on an H200's host, against 17-19 us for the decode kernel's launch from Python and for
``F.linear``: 9c96699, bf16, one 1024 x 1024 layer at one token). An eager call
the operator cannot serve (a misaligned input, a program retired since) goes to the module's
compiled-mode call, which runs the same routes by the same wall clock.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import replace
from functools import partial

import torch

from explorer.gpu.cuda.native import (
    CLOCK_CODES,
    MODE_CODES,
    forget,
    loaded,
    new_token,
    retire,
    steps_of,
)

__all__ = ["NativeTable", "hint_grad_input", "operator_calls"]


class NativeTable:
    """The programs of one module's remembered calls, and the token they all depend on.

    :meth:`forget` retires the token (the module forgot its calls: routes, plans or its mode
    changed); the next program takes a new one. The steps set are kept here too, so a block
    can make one program of its parts' (:meth:`steps_for`), and so are the eager calls of the
    wall clock's programs (:attr:`eager`).

    Parameters
    ----------
    module_id : int
        The module's op id (:func:`explorer.gpu.cuda.ops.register`).
    """

    __slots__ = ("__weakref__", "_steps", "_tied", "_token", "eager", "module_id")

    def __init__(self, module_id: int) -> None:
        self.module_id = module_id
        self._token = 0
        self._steps: dict[tuple, list] = {}
        #: ``{(shape, strides, device, dtype): call}``: the operator's call for eager inputs
        #: whose program is set for the wall clock, None for those that have none (at most 64;
        #: nothing in mode ``"graphs"``).
        self.eager: dict[tuple, partial | None] = {}
        self._tied: weakref.WeakSet = weakref.WeakSet()

    def token(self) -> int:
        """The token of the calls remembered since the last :meth:`forget` (0 if not loaded)."""
        if not self._token:
            self._token = new_token()
        return self._token

    def forget(self) -> None:
        """Retire every program set so far (they run no more), and those of the tables tied."""
        retire(self._token)
        forget(self.module_id)
        self._token = 0
        self._steps.clear()
        self.eager.clear()
        tied, self._tied = list(self._tied), weakref.WeakSet()
        for other in tied:
            other.forget()

    def tie(self, other: NativeTable) -> None:
        """Make :meth:`forget` forget ``other``'s programs too, until then.

        For a block whose programs are made of this module's steps: its eager calls go when
        this module's routes change.

        Parameters
        ----------
        other : NativeTable
            The block's table.
        """
        self._tied.add(other)

    def remember_call(self, x: torch.Tensor, call, mode: str, clock: str) -> bool:
        """Set the program of ``call``, remembered for inputs like ``x`` (or drop a stale one).

        Parameters
        ----------
        x : torch.Tensor
            An input the call was made for; only a row-major one gets a program.
        call : callable
            The remembered call; its ``native_steps()`` gives the program, if it has one.
        mode : str
            The module's execution mode (``"auto"``, ``"eager"``, ``"compile"``, ``"graphs"``).
        clock : {"wall", "gpu"}
            The clock the call's route was chosen by.

        Returns
        -------
        bool
            Whether a program was set.
        """
        if not loaded():
            return False
        return self.remember_steps(x, steps_of(call), mode, clock)

    def remember_steps(self, x: torch.Tensor, steps, mode: str, clock: str) -> bool:
        """Set the program ``steps`` for inputs like ``x`` (or drop it where ``steps`` is None).

        Parameters
        ----------
        x : torch.Tensor
            An input the steps were set up for; only a row-major one gets a program.
        steps : sequence of LaunchStep, MatmulStep or LinearStep, or None
            The steps; None where the call is not one the operator can make.
        mode : str
            The module's execution mode.
        clock : {"wall", "gpu"}
            The clock the steps' routes were chosen by.

        Returns
        -------
        bool
            Whether a program was set. A wall-clock program outside mode ``"graphs"`` also
            serves eager inputs like ``x`` (:attr:`eager`, which records None where no program
            was set).

        Raises
        ------
        ValueError
            A step the operator cannot read (a bug in the code that made it), with the reason.
        """
        if not loaded() or x.dim() < 1 or not x.is_contiguous() or x.shape[-1] < 1:
            return False
        cols = x.shape[-1]
        rows = x.numel() // cols
        if rows < 1:
            return False
        device = x.get_device() if x.is_cuda else -1
        key = (clock, rows, cols, x.dtype, device)
        if clock == "wall":
            self._drop_eager(rows, cols, x.dtype, device)
        steps = list(steps or ())
        if steps and all(all(step.tokens) for step in steps):
            first = steps[0]
            steps[0] = replace(first, tokens=(*first.tokens, self.token()))
            self._steps[key] = steps
        else:  # none, or set up before the operator was loaded (no token): no program
            steps = []
            self._steps.pop(key, None)
        code = [n for step in steps for n in step.code()]
        tokens = [t for step in steps for t in step.tokens]
        held = [t for step in steps for t in step.tensors()]
        modes = (MODE_CODES[mode], CLOCK_CODES[clock])
        wrong = torch.ops.explorer.native_set_program(
            self.module_id, *modes, rows, cols, x.dtype, device, tokens, code, held
        )
        if wrong:
            raise ValueError(f"{wrong}; the steps were {steps!r}")
        if clock == "wall" and mode != "graphs" and len(self.eager) < 64:
            op = torch.ops.explorer.sparse_call.default
            call = partial(op, module_id=self.module_id) if code else None
            self.eager[(x.shape, x.stride(), device, x.dtype)] = call
        return bool(code)

    def _drop_eager(self, rows: int, cols: int, dtype: torch.dtype, device: int) -> None:
        """Drop the eager calls of inputs of ``rows`` x ``cols`` (their program is set again)."""
        for key in [k for k in self.eager if k[0][-1] == cols and k[2:] == (device, dtype)]:
            if key[0].numel() == rows * cols:
                del self.eager[key]

    def steps_for(self, like: torch.Tensor, cols: int, clock: str) -> list | None:
        """The steps set for row-major ``[rows, cols]`` inputs of ``like``'s rows, dtype and device.

        Parameters
        ----------
        like : torch.Tensor
            A 2-D tensor with the input's rows, dtype and device.
        cols : int
            The input's columns.
        clock : {"wall", "gpu"}
            The clock.

        Returns
        -------
        list or None
            They name this table's token among theirs.
        """
        device = like.get_device() if like.is_cuda else -1
        return self._steps.get((clock, like.shape[0], cols, like.dtype, device))

    def __repr__(self) -> str:
        return (
            f"NativeTable(module {self.module_id}, {len(self._steps)} programs, "
            f"{len(self.eager)} eager inputs)"
        )


class _StandIn:
    """A registered stand-in module whose one program is a call's: for timing the operator."""

    def __init__(self, call) -> None:
        from explorer.gpu.cuda import ops

        self.call = call
        self.table = NativeTable(ops.register(self))

    def run_compiled(self, x: torch.Tensor) -> torch.Tensor:
        return self.call(x)  # the operator's fallback: the call itself, from Python

    def fake_output(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a timing stand-in is never compiled")


# whether the hint of hint_grad_input is still to be given in this process
_GRAD_HINT_DUE = [True]


def hint_grad_input() -> None:
    """Say once a process that eager inputs needing gradients keep the slower Python call.

    The operator has no autograd formula, so a module whose input requires gradients (a model
    run outside ``torch.no_grad()``: a norm's weight is a parameter) calls its route from
    Python, about 8-10 us more host time a call on an H200's host (an estimate from the
    ``host`` suite's figures above). The results are the same.
    """
    if not _GRAD_HINT_DUE[0]:
        return
    _GRAD_HINT_DUE[0] = False
    warnings.warn(
        "a sparse layer's input requires gradients, so its eager calls run through Python "
        "instead of the compiled operator (the same results, more host time a call; the "
        "sparse layers compute no gradients). Hint: run inference under "
        "torch.inference_mode() or torch.no_grad(), as model.generate() does.",
        RuntimeWarning,
        stacklevel=4,
    )


def operator_calls(x: torch.Tensor, calls: dict) -> dict:
    """``{key: call of the operator on x}`` for each of ``calls`` the operator can make.

    A layer times its routes by the wall clock to choose among them for eager and compiled
    calls; where the operator runs a route's remembered call, those calls cost its host time,
    not the Python call's. Each call with a program (``native_steps()``) gets a stand-in module
    whose one program it is; the stand-in lives as long as the returned call and takes its
    program with it when collected.

    Parameters
    ----------
    x : torch.Tensor
        The input the calls are timed on.
    calls : dict
        ``{key: call}``, each call taking ``x`` alone.

    Returns
    -------
    dict
        ``{key: call without arguments}`` for the calls that got a program; empty where the
        operator is not loaded.
    """
    if not loaded():
        return {}
    made = {}
    for key, call in calls.items():
        steps = steps_of(call)
        if not steps:
            continue
        stand_in = _StandIn(call)
        if stand_in.table.remember_steps(x, steps, "eager", "wall"):
            op = torch.ops.explorer.sparse_call.default
            timed = partial(op, x, module_id=stand_in.table.module_id)
            timed.stand_in = stand_in  # alive while the call is
            made[key] = timed
    return made
