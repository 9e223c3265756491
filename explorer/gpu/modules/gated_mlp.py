"""``SparseGatedMLP``: a LLaMA-style ``down(silu(gate(x)) * up(x))`` block on 2:4 kernels.

The gate and up projections read the same input, so they run as one sparse matmul over their
stacked weights (twice the rows: a larger, more efficient problem, and one call instead of two;
Phi-3 and GLM blocks hold them stacked already, :meth:`SparseGatedMLP.from_fused`). SwiGLU's
elementwise step runs in one pass (:func:`explorer.gpu.cuda.kernels.silu_mul`) and keeps the
layout the matmul wrote, so the down projection reads it without a copy. The block's output is
always row-major: the down projection hands its result to a residual add, not to a sparse layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from explorer import _html
from explorer.dtypes import dtype_name
from explorer.gpu.cuda import native, ops
from explorer.gpu.cuda.native_table import NativeTable, hint_grad_input
from explorer.gpu.modules.sparse_linear import SparseLinear
from explorer.gpu.modules.sparse_options import SparseOptions
from explorer.gpu.modules.sparse_weight import stack_linears
from explorer.gpu.routes.layer_decisions import OP_BITS_AT, SMALL_ROWS_UP_TO

if TYPE_CHECKING:
    from explorer.gpu.modules.int4_linear import Int4Linear

__all__ = [
    "FUSED_GATED_MLP_CLASSES",
    "GATED_MLP_CLASSES",
    "SparseGatedMLP",
    "gated_mlp_parts",
    "is_gated_mlp",
]

# bound here for the compiled decode step: Dynamo guards a function by its identity, where a
# path through this module's ``torch`` and ``nn`` adds Python guards on those modules
_is_compiling = torch.compiler.is_compiling
_silu = nn.functional.silu

#: Module classes known to compute ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``.
GATED_MLP_CLASSES = frozenset(
    {"LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP", "SmolLM3MLP", "OlmoMLP", "Olmo2MLP"}
)

#: Module classes known to compute ``down_proj(u * activation_fn(g))`` where ``g, u`` are the two
#: halves of ``gate_up_proj(x)``: the gate and up projections already stacked in one Linear.
FUSED_GATED_MLP_CLASSES = frozenset(
    {"Phi3MLP", "Phi4MultimodalMLP", "GlmMLP", "Glm4MLP", "Glm4vTextMLP"}
)


def _is_silu(act) -> bool:
    return isinstance(act, nn.SiLU) or type(act).__name__ in ("SiLUActivation", "SiLU")


def is_gated_mlp(module: nn.Module) -> bool:
    """True if ``module`` is a known SwiGLU block (``gate_proj``, ``up_proj``, ``down_proj``, SiLU).

    Parameters
    ----------
    module : torch.nn.Module
        The module to test.

    Returns
    -------
    bool
        True for a SwiGLU block this layer can replace.

    Examples
    --------
    >>> is_gated_mlp(nn.Linear(4, 4))
    False
    """
    if type(module).__name__ not in GATED_MLP_CLASSES:
        return False
    parts = [getattr(module, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(p, nn.Linear) for p in parts):
        return False
    gate, up, down = parts
    return (
        gate.in_features == up.in_features == down.out_features
        and gate.out_features == up.out_features == down.in_features
        and _is_silu(getattr(module, "act_fn", None))
    )


def gated_mlp_parts(module: nn.Module) -> tuple[str, ...] | None:
    """The names of the Linear layers of a known SwiGLU block ``module``, or None.

    ``("gate_proj", "up_proj", "down_proj")`` for a block with separate gate and up projections
    (:func:`is_gated_mlp`); ``("gate_up_proj", "down_proj")`` for a Phi-3 or GLM-style block,
    whose one ``gate_up_proj`` already holds the gate rows above the up rows, the layout of
    :meth:`SparseGatedMLP.from_fused`.

    Parameters
    ----------
    module : torch.nn.Module
        Any module; a block is known by its class's name, its Linear parts' shapes and its SiLU.

    Returns
    -------
    tuple of str or None
        The parts' attribute names, in the order :meth:`SparseGatedMLP.from_modules` or
        :meth:`SparseGatedMLP.from_fused` takes them; None for any other module.

    Examples
    --------
    >>> gated_mlp_parts(nn.Linear(4, 4)) is None
    True
    """
    if is_gated_mlp(module):
        return ("gate_proj", "up_proj", "down_proj")
    if type(module).__name__ not in FUSED_GATED_MLP_CLASSES:
        return None
    gate_up, down = (getattr(module, n, None) for n in ("gate_up_proj", "down_proj"))
    if not (isinstance(gate_up, nn.Linear) and isinstance(down, nn.Linear)):
        return None
    if gate_up.in_features != down.out_features or gate_up.out_features != 2 * down.in_features:
        return None
    if not _is_silu(getattr(module, "activation_fn", None)):
        return None
    return ("gate_up_proj", "down_proj")


def _silu_mul(gu: torch.Tensor) -> torch.Tensor:
    try:
        from explorer.gpu.cuda.kernels import silu_mul

        return silu_mul(gu)
    except ImportError:  # no CuPy: the same arithmetic in two torch calls
        g, u = gu.chunk(2, dim=-1)
        return nn.functional.silu(g) * u


def _silu_call(gu: torch.Tensor, hidden: int, overlap: bool):
    """A set-up-once SwiGLU launch for ``gu``'s rows and dtype, or None where there is none.

    There is none without CuPy, or for a dtype or hidden size the kernel does not take.
    ``overlap`` launches it overlapped with the gate/up kernel before it.
    """
    try:
        from explorer.gpu.cuda.kernels import SiluMulCall

        return SiluMulCall(gu.shape[0], hidden, gu.dtype, gu.device, overlap)
    except (ImportError, ValueError):
        return None


class SparseGatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with gate and up fused into one 2:4 sparse matmul.

    Build it with :meth:`from_modules` (or let :func:`explorer.sparsify` swap known blocks).

    Parameters
    ----------
    gate_up : SparseLinear or Int4Linear
        The stacked ``[gate; up]`` projection (``2 * hidden`` outputs).
    down : SparseLinear or Int4Linear
        The down projection. Both 2:4 in 16 bits, or both 2:4 with int4 kept values
        (``sparsify(model, dtype="int4")``).

    Examples
    --------
    >>> import explorer
    >>> gate, up = nn.Linear(256, 512, bias=False), nn.Linear(256, 512, bias=False)
    >>> block = nn.Sequential(gate, up, nn.Linear(512, 256, bias=False))
    >>> _ = explorer.prune(block, progress=False)
    >>> gate, up, down = block.half().cuda()  # doctest: +GPU
    >>> x = torch.randn(16, 256, dtype=torch.half, device="cuda")
    >>> mlp = SparseGatedMLP.from_modules(gate, up, down)
    >>> torch.allclose(mlp(x), down(nn.functional.silu(gate(x)) * up(x)), rtol=1e-2, atol=1e-1)
    True
    """

    def __init__(self, gate_up: SparseLinear | Int4Linear, down: SparseLinear | Int4Linear) -> None:
        super().__init__()
        if gate_up.out_features != 2 * down.in_features:
            raise ValueError(
                f"gate_up has {gate_up.out_features} outputs; expected twice the down "
                f"projection's {down.in_features} inputs"
            )
        if down.output != "rows":
            raise ValueError("the down projection must return row-major outputs (output='rows')")
        self.gate_up = gate_up
        self.down = down
        self.hidden = down.in_features
        for part in (gate_up, down):
            if isinstance(part, SparseLinear):
                part.block_part = True  # by the wall clock, routes the block's program can make
        # int4 parts are the explorer's kernels, each letting the next start early: the down
        # projection launches overlapped, and so does the SwiGLU kernel (explorer.gpu.cuda.launch)
        if hasattr(down, "set_overlapped_launch"):
            down.set_overlapped_launch(True)
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        """A new op id, and no launch state or programs of this process yet."""
        old = self.__dict__.get("native_table")
        if old is not None:
            old.forget()
        self._op_id = ops.register(self)
        self._silu_calls: dict = {}  # (rows, dtype) -> kernels.SiluMulCall or None (this process)
        self.native_table = NativeTable(self._op_id)  # the block's programs for C++
        # (shape, strides, device, dtype, clock, parts' tokens) asked for a program already
        self._native_tried: set = set()

    @classmethod
    def from_modules(
        cls,
        gate: nn.Linear,
        up: nn.Linear,
        down: nn.Linear,
        options: SparseOptions | None = None,
        *,
        backend: str = "cusparselt",
        **option_fields,
    ) -> SparseGatedMLP:
        """Compress three 2:4 CUDA ``nn.Linear`` layers of a SwiGLU block.

        Parameters
        ----------
        gate, up, down : nn.Linear
            ``gate`` and ``up`` map ``d -> hidden``, ``down`` maps ``hidden -> d``.
        options, backend, **option_fields
            As for :meth:`SparseLinear.from_linear`. The gate/up product may hand the SwiGLU
            kernel a transposed ``Y^T`` view (its ``output`` is ``"any"``); the down product's
            output, the block's, is row-major.

        Raises
        ------
        ValueError
            Shapes that do not form a block, or any of the reasons of ``from_linear``.
        """
        if gate.weight.shape != up.weight.shape or down.in_features != gate.out_features:
            raise ValueError(
                f"gate {tuple(gate.weight.shape)}, up {tuple(up.weight.shape)} and down "
                f"{tuple(down.weight.shape)} do not form a gated MLP block"
            )
        return cls.from_fused(
            stack_linears(gate, up), down, options, backend=backend, **option_fields
        )

    @classmethod
    def from_fused(
        cls,
        gate_up: nn.Linear,
        down: nn.Linear,
        options: SparseOptions | None = None,
        *,
        backend: str = "cusparselt",
        **option_fields,
    ) -> SparseGatedMLP:
        """Compress a SwiGLU block whose gate and up projections are already one 2:4 Linear.

        The layout of Phi-3 and GLM (``gate_up_proj``): the gate's rows first, then the up
        projection's, so the block computes ``down(silu(g) * u)`` with ``g, u`` the two halves
        of ``gate_up(x)``.

        Parameters
        ----------
        gate_up : nn.Linear
            Maps ``d -> 2 * hidden``, gate rows above up rows.
        down : nn.Linear
            Maps ``hidden -> d``.
        options, backend, **option_fields
            As for :meth:`from_modules`.

        Raises
        ------
        ValueError
            Shapes that do not form a block, or any of the reasons of ``from_linear``.
        """
        if gate_up.out_features != 2 * down.in_features or gate_up.in_features != down.out_features:
            raise ValueError(
                f"gate_up {tuple(gate_up.weight.shape)} and down {tuple(down.weight.shape)} do "
                "not form a gated MLP block: expected gate_up (2 * hidden, d) and down (d, hidden)"
            )
        options = (options or SparseOptions()).replace(**option_fields)
        return cls(
            SparseLinear.from_linear(gate_up, options.replace(output="any"), backend=backend),
            SparseLinear.from_linear(down, options.replace(output="rows"), backend=backend),
        )

    def __getstate__(self) -> dict:
        """What a copy or a pickle keeps: not the kernel launch state of this process."""
        state = self.__dict__.copy()
        for name in ("_silu_calls", "native_table", "_native_tried"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        """A copy gets its own id for the custom op."""
        super().__setstate__(state)
        self._reset_runtime()

    def _apply(self, fn, recurse: bool = True):
        """``.to(device)`` and the like: the SwiGLU launches are set up again on first use."""
        out = super()._apply(fn, recurse)
        self._reset_runtime()
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``x[..., d]``."""
        if _is_compiling():
            rows = x.shape[:-1].numel()
            if type(rows) is int and 0 < rows <= SMALL_ROWS_UP_TO:  # one int settles it
                if self.gate_up.small_row_routes >> OP_BITS_AT + rows & 1:
                    return ops.forward(x, self._op_id)  # gate/up not traced dense: the block op
            gate_up = self.gate_up.traced_linear(x)  # a settled dense verdict: few guards
            if gate_up is not None:
                g, u = gate_up.chunk(2, dim=-1)
                y = self.down.traced_linear(_silu(g) * u)
                if y is not None:
                    return y  # (else the compiler drops the unused product)
            tokens = x.numel() // self.gate_up.in_features
            if self.gate_up.traces_dense(tokens) and self.down.traces_dense(tokens):
                # both products dense here: torch calls the compiler fuses (no op to call)
                g, u = self.gate_up.traced_dense(x).chunk(2, dim=-1)
                return self.down.traced_dense(nn.functional.silu(g) * u)
            return ops.forward(x, self._op_id)  # one opaque op for torch.compile
        return self.run(x)

    def fake_output(self, x: torch.Tensor) -> torch.Tensor:
        """An empty tensor shaped like the output for ``x`` (what the compiled op returns).

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., hidden)``.

        Returns
        -------
        torch.Tensor
            An empty tensor of the output's shape and dtype.
        """
        return self.down.fake_output(x)

    def run_compiled(self, x: torch.Tensor) -> torch.Tensor:
        """The forward the compiled op runs: each part's compiled-mode call.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., hidden)``.

        Returns
        -------
        torch.Tensor
            The block's output.
        """
        y = self._through(x, self.gate_up.run_compiled, self.down.run_compiled)
        if native.loaded():
            self._remember_program(x)
        return y

    def _remember_program(self, x: torch.Tensor) -> None:
        """Hand the compiled operator this block's call for inputs like ``x`` as one program.

        The gate/up product's step, the SwiGLU launch and the down product's step, where each
        part remembered a call the operator can make (see :mod:`explorer.gpu.cuda.native`);
        else no program, and the block's eager calls of ``x``'s shape stay in Python. The
        parts' tables are tied to the block's: when a part's routes change, the block's
        programs and eager calls go too.
        """
        if not x.is_contiguous():
            return
        tables = [getattr(part, "native_table", None) for part in (self.gate_up, self.down)]
        if None in tables:
            return
        clock = native.clock_of(self.gate_up.mode)
        tokens = tuple(t.token() for t in tables)
        asked = (x.shape, x.stride(), x.get_device(), x.dtype, clock, tokens)
        if asked in self._native_tried:
            return
        if len(self._native_tried) >= 64:
            self._native_tried.clear()
        self._native_tried.add(asked)
        for table in tables:
            table.tie(self.native_table)
        steps = self._program_steps(x.reshape(-1, x.shape[-1]), tables, clock)
        self.native_table.remember_steps(x, steps, self.gate_up.mode, clock)

    def _program_steps(self, x2: torch.Tensor, tables: list, clock: str) -> list | None:
        """The block's steps for 2-D inputs like ``x2``, or None where a part has none."""
        first = tables[0].steps_for(x2, x2.shape[1], clock)
        silu = self._silu_calls.get((x2.shape[0], x2.dtype))
        if not first or not silu or silu.launcher.overlapping:
            return None
        last = tables[1].steps_for(x2, self.hidden, clock)  # on the SwiGLU output
        if not last:
            return None
        per_call = {
            0: (native.IN_PTR, 0),
            1: (native.IN_PTR, silu.up_bytes),
            2: (native.OUT_PTR, 0),
        }
        swiglu = native.launch_step(
            silu.launcher, silu.grid, silu.block, 0, per_call, self.hidden, silu
        )
        return [*first, swiglu, *last]

    def set_mode(self, mode: str) -> None:
        """Choose both products' routes for execution mode ``mode`` (see ``SparseLinear``).

        Parameters
        ----------
        mode : {"auto", "eager", "compile", "graphs"}
            The execution mode.
        """
        self.gate_up.set_mode(mode)
        self.down.set_mode(mode)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """The eager forward: the fused gate/up product, the SwiGLU kernel, the down product.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., hidden)``.

        Returns
        -------
        torch.Tensor
            The block's output, ``(..., hidden)``.
        """
        # the block's program, made from C++ where the compiled operator has one for x
        call = self.native_table.eager.get((x.shape, x.stride(), x.get_device(), x.dtype), False)
        if call:
            if not x.requires_grad:  # (the operator has no autograd formula)
                return call(x)
            hint_grad_input()
        # the parts' own eager calls, without nn.Module's call machinery: host time per step
        y = self._through(x, self.gate_up.run, self.down.run)
        if call is False and native.loaded():
            self._remember_program(x)  # (None: asked already, no program)
        return y

    def _through(self, x: torch.Tensor, gate_up, down) -> torch.Tensor:
        """``down(swiglu(gate_up(x)))`` with the parts' calls ``gate_up`` and ``down``."""
        if x.dim() == 2:
            return down(self._swiglu(gate_up(x)))
        lead = x.shape[:-1]
        y = down(self._swiglu(gate_up(x.reshape(-1, x.shape[-1]))))
        return y.reshape(*lead, y.shape[-1])

    def _swiglu(self, gu: torch.Tensor) -> torch.Tensor:
        """``silu(gate) * up``.

        A launch set up once per row count and dtype where ``gu`` is row-major (every decode step),
        else the general kernel.
        """
        key = (gu.shape[0], gu.dtype)
        call = self._silu_calls.get(key, False)
        if call is False and gu.is_cuda and len(self._silu_calls) < 64:
            overlap = getattr(self.down, "overlapped_launch", False)  # as the down projection
            call = self._silu_calls[key] = _silu_call(gu, self.hidden, overlap)
        if call and call.fits(gu):
            return call(gu)
        return _silu_mul(gu)

    def extra_repr(self) -> str:
        """The text shown inside the module's repr."""
        return f"hidden={self.hidden}, fused gate+up"

    def _repr_html_(self) -> str:
        rows = [
            ("gate+up", f"{self.gate_up.out_features} x {self.gate_up.in_features} (fused)"),
            ("down", f"{self.down.out_features} x {self.down.in_features}"),
            ("dtype", dtype_name(self.down.dtype)),
            ("backend", self.down.backend),
        ]
        return _html.table(["SparseGatedMLP", ""], rows)
