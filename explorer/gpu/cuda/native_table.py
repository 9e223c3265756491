"""A module's programs for the compiled operator, and the token they depend on.

See :mod:`explorer.gpu.cuda.native` for the operator and its programs. A
:class:`~explorer.gpu.modules.sparse_linear.SparseLinear` keeps one :class:`NativeTable`: each
call it remembers for an input shape is set here as a program (or, where the operator cannot
make it, drops the program that shape had), and forgetting its calls retires them all.
"""

from __future__ import annotations

from dataclasses import replace

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

__all__ = ["NativeTable"]


class NativeTable:
    """The programs of one module's remembered calls, and the token they all depend on.

    :meth:`forget` retires the token (the module forgot its calls: routes, plans or its mode
    changed); the next program takes a new one. The steps set are kept here too, so a block
    can make one program of its parts' (:meth:`steps_for`).

    Parameters
    ----------
    module_id : int
        The module's op id (:func:`explorer.gpu.cuda.ops.register`).
    """

    __slots__ = ("__weakref__", "_steps", "_token", "module_id")

    def __init__(self, module_id: int) -> None:
        self.module_id = module_id
        self._token = 0
        self._steps: dict[tuple, list] = {}

    def token(self) -> int:
        """The token of the calls remembered since the last :meth:`forget` (0 if not loaded)."""
        if not self._token:
            self._token = new_token()
        return self._token

    def forget(self) -> None:
        """Retire every program set so far (they run no more)."""
        retire(self._token)
        forget(self.module_id)
        self._token = 0
        self._steps.clear()

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
        steps : sequence of LaunchStep or MatmulStep, or None
            The steps; None where the call is not one the operator can make.
        mode : str
            The module's execution mode.
        clock : {"wall", "gpu"}
            The clock the steps' routes were chosen by.

        Returns
        -------
        bool
            Whether a program was set.

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
        modes = (MODE_CODES[mode], CLOCK_CODES[clock])
        wrong = torch.ops.explorer.native_set_program(
            self.module_id, *modes, rows, cols, x.dtype, device, tokens, code
        )
        if wrong:
            raise ValueError(f"{wrong}; the steps were {steps!r}")
        return bool(code)

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
        return f"NativeTable(module {self.module_id}, {len(self._steps)} programs)"
