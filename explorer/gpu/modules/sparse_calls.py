"""A route's product as one call: a cuSPARSELt plan run on a 2-D input, or the dense product.

Padding and layout are handled, and everything that does not change between calls is bound once.

A :class:`~explorer.gpu.SparseLinear` keeps the call its route makes for each input it has
seen and runs it directly the next time (its fast path), so what a call does here is what a
layer costs in host time per forward. The functions take the plan and the compressed weight's
pointer; they know nothing of the module that holds them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from explorer.gpu.library import cusparselt as C

__all__ = [
    "ACTIVATIONS",
    "apply_activation",
    "linear_call",
    "rows_from_transposed",
    "run_plan",
    "sparse_call",
]

#: Activations a sparse layer applies after its product (fused into the kernel where allowed).
ACTIVATIONS = ("none", "relu", "gelu")


def apply_activation(y: torch.Tensor, activation: str) -> torch.Tensor:
    """``y`` after ``activation``.

    ReLU in place; GELU with the tanh approximation, as cuSPARSELt's fused epilogue computes it.

    Parameters
    ----------
    y : torch.Tensor
        The product.
    activation : str
        ``"relu"``, ``"gelu"``, or anything else for none.

    Returns
    -------
    torch.Tensor
        The result (``y`` itself for ReLU and for none).

    Examples
    --------
    >>> apply_activation(torch.tensor([-1.0, 2.0]), "relu").tolist()
    [0.0, 2.0]
    """
    if activation == "relu":
        return torch.relu_(y)
    if activation == "gelu":
        return nn.functional.gelu(y, approximate="tanh")
    return y


def rows_from_transposed(y: torch.Tensor, tokens: int) -> torch.Tensor:
    """Row-major ``Y[:tokens]`` from the transposed view of ``Y^T`` a sparse product returned.

    The explorer's tiled transpose kernel; padded tokens are dropped in the same pass.

    Parameters
    ----------
    y : torch.Tensor
        The transposed view of ``Y^T``, ``[n, out]``.
    tokens : int
        Rows to keep.

    Returns
    -------
    torch.Tensor
        Row-major ``[tokens, out]``.
    """
    from explorer.gpu.cuda.kernels import transpose_rows

    return transpose_rows(y.t(), tokens)


def run_plan(
    plan: C.Plan,
    weight_ptr: int,
    x2: torch.Tensor,
    out_features: int,
    out_dtype: torch.dtype,
    n: int | None = None,
    alpha_ptr: int = 0,
) -> torch.Tensor:
    """``x2 @ W^T`` through ``plan`` for ``n`` rows (default: all of ``x2``).

    The input is brought to the plan's layout (free when it already is in it); the output is
    ``Y`` for a ``"?c"`` layout and a transposed view of a row-major ``Y^T`` for ``"?r"``.

    Parameters
    ----------
    plan : Plan
        The cuSPARSELt plan.
    weight_ptr : int
        The compressed weight's device pointer.
    x2 : torch.Tensor
        The 2-D input, ``[n, in]``.
    out_features : int
        The weight's rows.
    out_dtype : torch.dtype
        The output's dtype.
    n : int, optional
        Rows of the plan (default: ``x2``'s).
    alpha_ptr : int, default 0
        The ``alpha`` vector's device pointer, or 0 for none.

    Returns
    -------
    torch.Tensor
        ``Y``, ``[n, out]`` (a transposed view for a ``"?r"`` layout).
    """
    n = x2.shape[0] if n is None else n
    lay = plan.key.layout
    if lay[0] == "r":
        x2 = x2.t().contiguous()  # free when x2 is itself a transposed view (chained layers)
    elif not x2.is_contiguous():
        x2 = x2.contiguous()
    if lay[1] == "c":
        y = torch.empty(n, out_features, dtype=out_dtype, device=x2.device)
        plan.run(weight_ptr, x2.data_ptr(), y.data_ptr(), alpha_ptr)
        return y
    d = torch.empty(out_features, n, dtype=out_dtype, device=x2.device)
    plan.run(weight_ptr, x2.data_ptr(), d.data_ptr(), alpha_ptr)
    return d.t()  # a transposed view of Y^T: no copy


def sparse_call(
    plan: C.Plan,
    weight_ptr: int,
    out_features: int,
    out_dtype: torch.dtype,
    n: int,
    t: int,
    transpose: bool,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The sparse route for ``t`` rows (padded to ``n``) as one closure, 2-D in, 2-D out.

    ``transpose``: the ``Y^T`` output is copied to row-major. A row-major route at exactly
    ``n`` rows binds everything but the input and output pointers once: the eager call with
    the least host time.

    Parameters
    ----------
    plan : Plan
        The cuSPARSELt plan, built for ``n`` rows.
    weight_ptr : int
        The compressed weight's device pointer.
    out_features : int
        The weight's rows.
    out_dtype : torch.dtype
        The output's dtype.
    n : int
        Rows of the plan.
    t : int
        Rows of the input.
    transpose : bool
        Copy a ``Y^T`` output to row-major.

    Returns
    -------
    callable
        ``call(x2)``: ``[t, out]`` for a ``[t, in]`` input.
    """
    if not transpose and n == t and plan.key.layout == "cc":
        return _bound(plan, weight_ptr, (n, out_features), out_dtype)
    run = partial(run_plan, plan, weight_ptr, out_features=out_features, out_dtype=out_dtype, n=n)
    pad = n - t
    if transpose:
        if pad:
            return lambda x_: rows_from_transposed(run(nn.functional.pad(x_, (0, 0, 0, pad))), t)
        return lambda x_: rows_from_transposed(run(x_), t)
    if pad:
        return lambda x_: run(nn.functional.pad(x_, (0, 0, 0, pad)))[:t]
    return run


def _bound(plan: C.Plan, weight_ptr: int, shape: tuple[int, int], dtype: torch.dtype):
    launch = plan.bind(weight_ptr)
    device = torch.device("cuda", plan.key.device)

    def call(x_: torch.Tensor) -> torch.Tensor:
        if not x_.is_contiguous():
            x_ = x_.contiguous()
        y = torch.empty(shape, dtype=dtype, device=device)
        launch(x_.data_ptr(), y.data_ptr())
        return y

    call.native_steps = _MatmulSteps(plan, weight_ptr, shape[1])  # for the compiled operator
    return call


class _MatmulSteps:
    """A bound call's ``native_steps()``: its one cuSPARSELt step, made on first use."""

    __slots__ = ("out_cols", "plan", "steps", "weight_ptr")

    def __init__(self, plan: C.Plan, weight_ptr: int, out_cols: int) -> None:
        self.plan, self.weight_ptr, self.out_cols = plan, weight_ptr, out_cols
        self.steps: list | None = None

    def __call__(self) -> list | None:
        if self.steps is None and self.plan.alive:
            from explorer.gpu.cuda import native

            token = native.new_token()
            if token:
                self.plan.when_closed(partial(native.retire, token))
            raw = self.plan.raw_arguments(self.weight_ptr)
            self.steps = [native.MatmulStep(*raw, self.out_cols, (token,))]
        return self.steps


def linear_call(
    weight: torch.Tensor, bias: torch.Tensor | None, program: bool = True
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The dense route as one call: ``F.linear`` on ``weight`` and ``bias``, any leading dims.

    A ``functools.partial``, called from C: one Python frame less per eager call than a
    closure. With ``program``, its ``native_steps()`` give the compiled operator the same
    product as one :class:`~explorer.gpu.cuda.native.LinearStep`, so a block with a part that
    runs dense is still one program.

    Parameters
    ----------
    weight : torch.Tensor
        ``[out, in]``.
    bias : torch.Tensor or None
        ``[out]``, or None.
    program : bool, default True
        Whether the call has program steps (False where inputs are not in ``weight``'s dtype).

    Returns
    -------
    callable
        ``call(x)``: ``F.linear(x, weight, bias)``.

    Examples
    --------
    >>> call = linear_call(torch.eye(2), None)
    >>> call(torch.tensor([[1.0, 2.0]])).tolist()
    [[1.0, 2.0]]
    """
    call = partial(nn.functional.linear, weight=weight, bias=bias)
    if program:
        call.native_steps = partial(_linear_steps, weight, bias)
    return call


def _linear_steps(weight: torch.Tensor, bias: torch.Tensor | None) -> list:
    from explorer.gpu.cuda import native

    return [native.LinearStep(weight, bias)]
