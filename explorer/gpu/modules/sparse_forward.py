"""How a ``SparseLinear`` call finds and runs its route: eager, compiled and inside CUDA graphs.

:class:`SparseForward` is the part of :class:`~explorer.gpu.modules.sparse_linear.SparseLinear`
that runs a call:

* eagerly (:meth:`SparseForward.run`), an input seen before (same shape, strides, device and
  dtype) goes straight to the call its route makes, found in a table per clock; a shape dense
  by every clock the layer may run by is found by shape, device and dtype alone;
* under ``torch.compile`` (:meth:`SparseForward.forward` while compiling), a token count whose
  decision is dense is traced as the compiler's own matmul, any other is the opaque op
  ``explorer::sparse_forward`` (:mod:`explorer.gpu.cuda.ops`), which calls
  :meth:`SparseForward.run_compiled`;
* any other input takes the full path (``_forward``): checks, quantization of int8 and fp8
  inputs, the route from :class:`~explorer.gpu.modules.route_choice.RouteChoice`, the product
  on it (cuBLAS, the decode kernel or a cuSPARSELt plan), and the call remembered for the next
  input like it.

It holds no state of its own: the tables, plans and weights are the layer's (built in
``sparse_linear``), read through its attributes and methods; ``SparseLinear`` is built on it.
"""

from __future__ import annotations

import warnings
from functools import partial

import torch
from torch import nn

from explorer.gpu.cuda import decode as D
from explorer.gpu.cuda import ops
from explorer.gpu.cuda.native_table import hint_grad_input
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library import torch_backend as TB
from explorer.gpu.modules import fp8, quant
from explorer.gpu.modules.fp8_dense import scaled_linear, scaled_matmul
from explorer.gpu.modules.sparse_calls import (
    apply_activation,
    linear_call,
    rows_from_transposed,
    run_plan,
    sparse_call,
)
from explorer.gpu.routes.dispatch import DENSE
from explorer.gpu.routes.layer_decisions import OP_BITS_AT, SMALL_ROWS_UP_TO
from explorer.gpu.routes.mode_check import mode_mismatch

__all__ = ["SparseForward"]

# functions a compiled step calls, bound here: Dynamo guards a function by its identity, where a
# path through ``torch``, ``nn`` and ``C`` adds guards that those modules are still the same ones
_is_compiling = torch.compiler.is_compiling
_linear = nn.functional.linear
_decision_tokens = C.decision_tokens

# epilogues cuSPARSELt refused at least once: (dtype, activation)
_UNFUSED: set[tuple] = set()


class SparseForward:
    """The forward paths of :class:`~explorer.gpu.modules.sparse_linear.SparseLinear` (a base class).

    See the module's docstring for the paths; the layer's tables of remembered calls are
    ``_fast`` and ``_fast_graph`` (by clock), ``_dense_any`` and ``_wall_dense``.
    """

    # -- forward ---------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``x[..., in_features]`` (any leading dims, any strides)."""
        if _is_compiling():
            rows = x.shape[:-1].numel()
            if type(rows) is int and 0 < rows <= SMALL_ROWS_UP_TO:  # one int settles it
                if self.small_row_routes >> OP_BITS_AT + rows & 1:
                    return ops.forward(x, self._op_id)  # one opaque op (explorer.gpu.cuda.ops)
            traced = self.traced_linear(x)  # a settled dense verdict: few reads, few guards
            if traced is not None:
                return traced
            if self.traces_dense(x.numel() // self.in_features):
                return self.traced_dense(x)  # the compiler's own matmul: no op to call
            return ops.forward(x, self._op_id)
        return self.run(x)

    def traced_linear(self, x: torch.Tensor) -> torch.Tensor | None:
        """The traced dense product of a compiled call its verdict settles, or None.

        Dynamo guards every attribute a traced call reads and checks the guards on each call of
        the compiled model, and a host-bound compiled step (decode, a BERT-like prefill of short
        sequences) pays for each: the general path (:meth:`traces_dense`, :meth:`traced_dense`)
        reads about thirty, ``nn.Linear`` about six. This one reads the verdict (up to 64 rows
        the int ``small_row_routes``, above the activation and ``LayerDecisions.traced_large``),
        the weight's dtype and the two tensors; None where that does not settle it (symbolic
        sizes, a fused activation, an fp8 or freed dense weight, an input of another dtype, a
        count not traced), and the general path decides. A route imposed while timing is not
        looked at: timing runs eagerly, never under the compiler.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.

        Returns
        -------
        torch.Tensor or None
            ``F.linear`` on the dense weight, or None.
        """
        rows = x.shape[:-1].numel()
        if type(rows) is not int or rows < 1:
            return None
        if rows <= SMALL_ROWS_UP_TO:
            if not self.small_row_routes >> rows & 1:  # (set: no activation, not FP8 dense)
                return None
        elif self.activation != "none" or (
            _decision_tokens(rows, self.dtype) not in self.decisions_made.traced_large
        ):
            return None
        # both tensors from the buffer table itself: through nn.Module's attribute lookup each
        # read also guards the parameter and submodule tables it searches first
        buffers = self._buffers
        weight = buffers["_dense"]
        if weight is None or weight.dtype != x.dtype:
            return None
        return _linear(x, weight, buffers["bias"])

    def traces_dense(self, tokens) -> bool:
        """Whether a compiled model should run this layer as a traced matmul at ``tokens`` rows.

        A plain matmul on the dense weight, where the layer's decisions say so for its mode
        (:meth:`LayerDecisions.traces_dense`). Token counts never measured, or not known while
        tracing (symbolic sizes), go to the op. An fp8 layer with its fp8 codes traces FP8 dense:
        the compiler fuses its quantization with the step before, which the op cannot (docs/gpu.md).

        Parameters
        ----------
        tokens : int or symbolic size
            Rows of the input.

        Returns
        -------
        bool
            True for a traced matmul, False for the op.
        """
        if self._force is None and self._fp8_dense:
            return True  # compiled fp8: FP8 dense, quantized in the step before
        if self._force is not None or not isinstance(tokens, int) or tokens < 1:
            return False  # a symbolic (dynamic) size: the op decides at each call
        return self.decisions_made.traces_dense(C.decision_tokens(tokens, self.dtype))

    def traced_dense(self, x: torch.Tensor) -> torch.Tensor:
        """The dense route written as torch calls a compiler can trace and fuse.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.
        """
        return self._dense_forward(x, self.activation != "none")

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """The eager forward: an input seen before goes straight to the call its route makes.

        Seen before means the same shape, strides, device and dtype; one call then costs about the
        host time of ``F.linear``, or less where the compiled operator makes it from C++
        (``native_table.eager``). Any other input takes the full path, which chooses and remembers.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.

        Returns
        -------
        torch.Tensor
            The layer's output, ``(..., out_features)``.
        """
        # a shape dense by every clock this layer may run by: one F.linear, found by shape, device
        # and dtype alone (no capture check, no strides; decode sizes, eager is host-bound there)
        key = (x.shape, x.get_device(), x.dtype)
        dense = self._dense_any.get(key)
        if dense is not None:
            return dense(x)
        dense = self._wall_dense.get(key)  # (a capture takes the GPU clock's route instead)
        if dense is not None and not torch.cuda.is_current_stream_capturing():
            return dense(x)
        full = (x.shape, x.stride(), key[1], key[2])
        native = self.native_table.eager.get(full)  # the call made from C++ (less host time)
        if native is not None:
            if not x.requires_grad:  # (the operator has no autograd formula)
                return native(x)
            hint_grad_input()
        fast = self._fast_table(self._clock_now()).get(full)
        if fast is not None:
            return fast(x)
        self._warn_if_mode_differs("eager", x)
        return self._forward(x)

    def run_compiled(self, x: torch.Tensor) -> torch.Tensor:
        """The forward the compiled op runs (``torch.compile``): :meth:`run`'s fast path.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.
        """
        clock = self._clock_now()
        fast = self._fast_table(clock).get((x.shape, x.stride(), x.get_device(), x.dtype))
        if fast is not None:
            if self.mode == "graphs" and not self._warned:
                # a second call of this input outside a capture: no CUDA graph replays it
                self._warn_if_mode_differs("compile", x)  # (inside a capture it says nothing)
            return fast(x)
        if self.mode != "graphs":  # (there the first call may be the CUDA-graph warm-up)
            self._warn_if_mode_differs("compile", x)
        return self._forward(x)

    def _clock_now(self) -> str:
        """The clock this call's route is chosen by (``"gpu"`` or ``"wall"``)."""
        mode = self.mode
        if mode == "auto":
            return "gpu" if torch.cuda.is_current_stream_capturing() else "wall"
        return "gpu" if mode == "graphs" else "wall"

    def _fast_table(self, clock: str) -> dict:
        return self._fast_graph if clock == "gpu" else self._fast

    def _warn_if_mode_differs(self, running: str, x: torch.Tensor) -> None:
        """Warn once per process when the model runs in a mode its routes were not chosen for.

        ``running`` is ``"eager"`` or ``"compile"``, or ``"graphs"`` inside a capture; the rule
        and the text are :func:`~explorer.gpu.routes.mode_check.mode_mismatch`'s.
        """
        if torch.cuda.is_current_stream_capturing():
            running = "graphs"
        if running in self._warned:
            return
        key = (self.mode, running, x.numel() // max(1, x.shape[-1]))
        if key in self._quiet:
            return
        text = mode_mismatch(*key)
        if text is None:
            self._quiet.add(key)  # the rule depends on these alone: not asked again
            return
        self._warned.add(running)
        warnings.warn(text, RuntimeWarning, stacklevel=4)

    def fake_output(self, x: torch.Tensor) -> torch.Tensor:
        """An empty tensor shaped like the output for ``x`` (what the compiled op returns).

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.

        Returns
        -------
        torch.Tensor
            An empty tensor of the output's shape and dtype.
        """
        return x.new_empty((*x.shape[:-1], self.out_features), dtype=self._result_dtype(x))

    def _result_dtype(self, x: torch.Tensor) -> torch.dtype:
        if x.is_floating_point() and x.dtype.itemsize > 1:
            return x.dtype
        return self.out_dtype

    def _decode_call(self, tokens: int, act: torch.dtype):
        """The decode kernel for ``tokens`` rows of ``act`` activations, set up once."""
        key = (tokens, act)
        call = self._decode_calls.get(key)
        if call is None:
            call = self._decode_calls[key] = D.DecodeCall(
                self.decode_weight(), self.bias, tokens, act
            )
        return call

    def _decode_forward(self, x: torch.Tensor, fused_act: bool) -> torch.Tensor:
        """The decode kernel on ``x`` (2-D, at most 64 rows), bias and activation included."""
        act = self._dec_values.dtype if self._dec_scale is None else self.out_dtype
        y = self._decode_call(x.shape[0], act)(x if x.dtype == act else x.to(act))
        return apply_activation(y, self.activation) if self.activation != "none" else y

    def _dense_call(self, fused_act: bool):
        """The dense route as one call of a 2-D (or any-leading-dims) input."""
        if fused_act or self._fp8_dense:
            return partial(self._dense_forward, fused_act=fused_act)
        # a block's program makes it from C++ where the weight is in the layer's 16-bit dtype
        return linear_call(self._dense, self.bias, program=self._dense.dtype == self.dtype)

    def _dense_forward(self, x: torch.Tensor, fused_act: bool) -> torch.Tensor:
        """The product on the dense weight (FP8 dense for fp8), in the input's dtype."""
        w = self._dense
        if self._fp8_dense:
            y = scaled_linear(x, w, self.weight_scale, self.bias, self.out_dtype)
        else:
            y = nn.functional.linear(x if x.dtype == w.dtype else x.to(w.dtype), w, self.bias)
        y = apply_activation(y, self.activation) if fused_act else y
        return y if y.dtype == self._result_dtype(x) else y.to(self._result_dtype(x))

    @property
    def _fp8_dense(self) -> bool:
        """Whether the dense route is FP8 dense (``torch._scaled_mm`` on the fp8 codes)."""
        return self._dense is not None and self._dense.dtype.itemsize == 1

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"input has {x.shape[-1]} features in its last dimension, expected "
                f"{self.in_features}"
            )
        if x.device.type != "cuda":
            raise ValueError(f"input is on {x.device}; SparseLinear runs on CUDA tensors")
        clock = self._clock_now()
        lead = x.shape[:-1]
        x2 = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        if self.backend == "torch":
            return self._forward_torch(x2).reshape(*lead, self.out_features)
        if self.decode_kept and 0 < x2.shape[0] <= D.MAX_TOKENS and x2.is_floating_point():
            y = self._maybe_decode(x, x2, clock)
            if y is not None:
                return y if len(lead) == 1 else y.reshape(*lead, self.out_features)
        scale_t, x_in = None, x2  # x_in: the input before any quantization (the dense route's)
        if self.dtype == torch.int8:
            x2, scale_t = quant.quantize_per_token(x2)
        elif self.dtype.itemsize == 1:  # fp8: dynamic per-token scales, like int8's
            x2, scale_t = fp8.quantize_activations(x2)
        elif x2.dtype != self.dtype:
            if not x2.is_floating_point():
                raise TypeError(f"input dtype {x2.dtype} is not a floating type")
            x2 = x2.to(self.dtype)  # e.g. a float32 model run with 16-bit sparse layers
        if not x2.is_contiguous() and not x2.t().is_contiguous():
            x2 = x2.contiguous()
        t = x2.shape[0]
        if t == 0:
            return x.new_empty(*lead, self.out_features, dtype=self._result_dtype(x))
        n = self._padded(t)
        # "r": a transposed view of a row-major X^T (what an "r"-output layer returns)
        first = "c" if x2.is_contiguous() else "r"
        dev = x2.device.index or 0
        alpha, fuse = self._alpha_vector, self._fuses
        route = self._route(n, t, dev, fuse, alpha, first, clock)
        capturing = torch.cuda.is_current_stream_capturing()
        # dense by every clock this layer may run by: its mode's one, or both for "auto"
        dense_always = route == DENSE and (self.mode != "auto" or not capturing)
        if clock == "wall" and self.mode == "auto" and not capturing:
            # a CUDA-graph capture of this input takes the GPU clock's route: build its plan now
            ahead = self._route(n, t, dev, fuse, alpha, first, "gpu")
            dense_always = dense_always and ahead == DENSE
            if ahead.kind == "sparse":
                try:
                    self._plan_for(n, dev, fuse, alpha, ahead)
                except C.CusparseltRefused:
                    pass  # the capture finds no plan and runs dense; nothing to build ahead
        if route.kind == "sparse" and not self._plan_ready(n, fuse, alpha, route):
            if self._dense is not None and capturing:
                # a plan built now would put its workspace in the graph's private memory pool,
                # alive after the capture but no output of it (torch's CUDA-graph trees refuse
                # that): this capture runs dense; an eager call builds the plan
                route = DENSE
        if route.kind == "dense":
            # the activation belongs to the dense route whether or not a sparse kernel fuses it
            act = self.activation != "none"
            if self._fp8_dense and scale_t is not None:  # FP8 dense on the quantized input
                w, out = self._dense, self.out_dtype
                y = scaled_matmul(x2, scale_t, w, self.weight_scale, self.bias, out)
                y = (apply_activation(y, self.activation) if act else y).to(self._result_dtype(x))
            else:
                y = self._dense_forward(x_in if scale_t is not None else x2, act)
            if (x2.dtype == x.dtype or scale_t is not None) and self._force is None:
                # F.linear takes any leading dims: one call, no reshapes (host time in decode)
                call = self._dense_call(act)
                self._remember(x, call, clock, any_dims=True)
                key = (x.shape, x.get_device(), x.dtype)
                if dense_always and len(self._dense_any) < 64:
                    self._dense_any[key] = call
                elif clock == "wall" and not capturing and len(self._wall_dense) < 64:
                    self._wall_dense[key] = call
            return y if len(lead) == 1 else y.reshape(*lead, self.out_features)
        pad = n - t
        xp = nn.functional.pad(x2, (0, 0, 0, pad)) if pad else x2
        alpha_ptr = self.weight_scale.data_ptr() if alpha else 0
        try:
            plan = self._plan_for(n, dev, fuse, alpha, route)
            y = self._run(plan, xp, n, alpha_ptr)
        except C.CusparseltRefused:
            if not fuse:
                raise
            # cuSPARSELt has no kernel with this fused activation: apply it after, from now on
            _UNFUSED.add((self.dtype, self.activation))
            self._plans.clear()
            self._routes.clear()
            self._forget_fast_paths()
            fuse = False
            route = self._route(n, t, dev, fuse, alpha, first, clock)
            plan = self._plan_for(n, dev, fuse, alpha, route)
            y = self._run(plan, xp, n, alpha_ptr)
        if route.transpose:
            y = rows_from_transposed(y, t)  # row-major, padded tokens dropped in the same pass
        elif pad:
            y = y[:t]
        if self.weight_scale is not None and not alpha:
            y = y * self.weight_scale.to(y.dtype)  # fp8: no alpha vector in cuSPARSELt
        if scale_t is not None:
            # one fused step: per-token scale plus the bias (which must come after the scale)
            s = scale_t[:t, None].to(y.dtype)
            y = torch.addcmul(self.bias, y, s) if self.bias is not None else y * s
        if self.activation != "none" and not fuse:
            y = apply_activation(y, self.activation)
        if x.is_floating_point() and y.dtype != x.dtype and x.dtype.itemsize > 1:
            y = y.to(x.dtype)
        direct = (
            x2.dtype == x.dtype  # a dtype cast is not in the fast path; a copy to rows is
            and self.weight_scale is None
            and (fuse or self.activation == "none")
            and y.dtype == x.dtype
            and self._force is None
        )
        if direct:
            self._remember(x, self._fast_sparse(plan, n, t, route.transpose), clock)
        return y if len(lead) == 1 else y.reshape(*lead, self.out_features)

    def _padded(self, t: int) -> int:
        """The token count ``t`` rows run at (cuSPARSELt's multiple), remembered per ``t``."""
        n = self._npad.get(t)  # one lookup once seen: this runs on every full-path call
        return n if n is not None else self._npad.setdefault(t, C.padded_tokens(t, self.dtype))

    @property
    def _alpha_vector(self) -> bool:
        """int8 weights pass their per-channel scales to cuSPARSELt as an alpha vector."""
        return self.weight_scale is not None and self.dtype == torch.int8

    @property
    def _fuses(self) -> bool:
        """Whether the activation is fused into the kernel (cuSPARSELt has not refused it)."""
        return (
            self.activation != "none"
            and self.weight_scale is None
            and (self.dtype, self.activation) not in _UNFUSED
        )

    def _maybe_decode(self, x: torch.Tensor, x2: torch.Tensor, clock: str) -> torch.Tensor | None:
        """Run ``x2`` (at most 64 rows) on the decode kernel if that is its route, else None."""
        t = x2.shape[0]
        n = self._padded(t)
        first = "c" if x2.is_contiguous() or not x2.t().is_contiguous() else "r"
        fuse = self._fuses
        route = self._route(n, t, x2.device.index or 0, fuse, self._alpha_vector, first, clock)
        if route.kind != "decode":
            return None
        y = self._decode_forward(x2, fuse)
        if x.is_floating_point() and y.dtype != x.dtype and x.dtype.itemsize > 1:
            y = y.to(x.dtype)
        if y.dtype == x.dtype and self._force is None:
            act = self._dec_values.dtype if self._dec_scale is None else self.out_dtype
            if x2.dtype == act and self.activation == "none":
                fn2d = self._decode_call(x2.shape[0], act)  # one launch, nothing around it
            else:
                fn2d = partial(self._decode_forward, fused_act=fuse)
            self._remember(x, fn2d, clock)
        return y

    def _fast_sparse(self, plan: C.Plan, n: int, t: int, transpose: bool):
        """The sparse route for ``t`` rows (padded to ``n``) as one call (:func:`sparse_call`)."""
        ptr = self.compressed.data_ptr()
        return sparse_call(plan, ptr, self.out_features, self.out_dtype, n, t, transpose)

    def _remember(self, x: torch.Tensor, fn2d, clock: str, any_dims: bool = False) -> None:
        """Keep ``fn2d`` as the whole forward for inputs like ``x`` under ``clock``.

        ``fn2d`` maps a 2-D input to a 2-D output, or takes any leading dims with ``any_dims``.
        """
        table = self._fast_table(clock)
        if len(table) >= 64:
            return
        if x.dim() == 2 or any_dims:
            fn = fn2d
        else:
            lead, k, out = x.shape[:-1], self.in_features, self.out_features

            def fn(x_, fn2d=fn2d):
                return fn2d(x_.reshape(-1, k)).reshape(*lead, out)

        table[(x.shape, x.stride(), x.get_device(), x.dtype)] = fn
        self.native_table.remember_call(x, fn2d, self.mode, clock)  # compiled calls run it in C++

    def _run(
        self, plan: C.Plan, x2: torch.Tensor, n: int | None = None, alpha_ptr: int = 0
    ) -> torch.Tensor:
        ptr = self.compressed.data_ptr()
        return run_plan(plan, ptr, x2, self.out_features, self.out_dtype, n, alpha_ptr)

    def _forward_torch(self, x2: torch.Tensor) -> torch.Tensor:
        if x2.dtype != self.dtype:
            return self._forward_torch(x2.to(self.dtype)).to(x2.dtype)
        t = x2.shape[0]
        pad = -t % self._mult
        if pad:
            x2 = nn.functional.pad(x2, (0, 0, 0, pad))
        y = TB.sparse_mm(self.compressed, x2.contiguous(), bias=self.bias)
        y = apply_activation(y[:t] if pad else y, self.activation)
        return y
