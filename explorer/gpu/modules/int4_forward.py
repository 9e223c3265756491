"""How an ``Int4Linear`` call finds and runs its route: eager, compiled and inside CUDA graphs.

:class:`Int4Forward` is the part of :class:`~explorer.gpu.modules.int4_linear.Int4Linear` that
chooses and runs a call; it holds no state of its own (the weights, tiles and tables are the
layer's, built in ``int4_linear``).

Each token count up to 64 is timed once (per problem, shared like every decision,
:mod:`explorer.gpu.routes.route_timing`) between the dense route, torch's int4 weight-only
matmul (``aten._weight_int4pack_mm``; where that kernel does not take the layer, the
dequantized weight in 16 bits through ``F.linear``), and the decode route, the explorer's 2:4 +
int4 kernel (:mod:`explorer.gpu.cuda.decode_int4`). The faster is kept (dense unless the decode
kernel is measurably faster). Above 64 tokens the dense route is cuBLAS on the weight
dequantized for the call by one kernel (:mod:`explorer.gpu.cuda.int4_dequant`): torch's int4
kernel slows down with the token count.

Under ``torch.compile`` in its default mode every count up to 64 is traced as the dense route
(the compiler's own call of torch's int4 kernel, no host cost of ours), even where the 2:4
kernel is faster on the GPU: such a compiled decode step is bound by the host, as in 16 bits
(:data:`~explorer.gpu.routes.dispatch.COMPILED_HOST_BOUND_UP_TO`). Measured on one H200 with
the benchmark's LLaMA-3-8B-like model (4 layers, int4 at groups of 128): compiled by default,
its int4 dense step took 1.3-2.2 ms at 16 x 1 and 1 x 1 (two runs), against 1.47 and 0.65 ms
of GPU time under CUDA graphs, and sending the layers whose 2:4 kernel gained more GPU time than the op costs in
host time through the op made the step 0.77x and 0.86x of int4 dense (docs/quantized.md).
Larger counts, symbolic sizes, and every count in ``mode="graphs"`` run as one opaque op
(:mod:`explorer.gpu.cuda.ops`) that CUDA graphs capture like any kernel.
"""

from __future__ import annotations

import torch
from torch import nn

from explorer.gpu.cuda import ops
from explorer.gpu.routes.dispatch import DECODE, DENSE, Route, check_mode
from explorer.gpu.routes.route_timing import BOOK

__all__ = ["DECODE_MAX_TOKENS", "Int4Forward"]

DECODE_MAX_TOKENS = 64  #: the most tokens the decode route takes; above them, dense


class Int4Forward:
    """The routes and forward paths of :class:`~explorer.gpu.modules.int4_linear.Int4Linear` (a base class).

    See the module's docstring. The layer's tables are ``_routes`` (``(tokens, clock) ->
    Route``), ``_calls`` (decode launches by row count) and ``_fast`` (remembered calls).
    """

    #: Whether the decode kernel is launched overlapped with the kernel before it (see
    #: :meth:`set_overlapped_launch`).
    overlapped_launch = False
    #: The counterpart of ``SparseLinear.small_row_routes``, for a block of either kind of part:
    #: no bit set, so a compiled call asks :meth:`traces_dense` at every row count.
    small_row_routes = 0

    def set_overlapped_launch(self, enabled: bool) -> None:
        """Launch the decode kernel overlapped with the kernel before it, or in order.

        An overlapped launch (:mod:`explorer.gpu.cuda.launch`; Hopper and newer) lets the
        kernel read its weight while the kernel before it finishes. That pays where the kernel
        before is one of the explorer's own, which lets the next start early: a gated MLP's
        down projection after its SwiGLU kernel
        (:class:`~explorer.gpu.modules.gated_mlp.SparseGatedMLP` asks for it). After another
        library's kernel it costs a little. The launches are set up again on the next call.

        Parameters
        ----------
        enabled : bool
            True to overlap.
        """
        self.overlapped_launch = bool(enabled)
        self._calls.clear()
        self._fast.clear()

    # -- routes ----------------------------------------------------------------------------
    def set_mode(self, mode: str) -> None:
        """Choose routes by the clock of ``mode`` from now on.

        Parameters
        ----------
        mode : {"auto", "eager", "compile", "graphs"}
        """
        self.mode = check_mode(mode)
        self._routes.clear()
        self._fast.clear()

    def route(self, tokens: int, clock: str) -> Route:
        """The route (``DENSE`` or ``DECODE``) ``tokens`` rows take by ``clock``, measured once.

        Both routes are timed by both clocks once per problem; inside a CUDA-graph capture the
        nearest measured count decides, dense if none.

        Parameters
        ----------
        tokens, clock : int, str
            Rows of the input, and ``"gpu"`` or ``"wall"``.
        """
        if tokens > DECODE_MAX_TOKENS or self.decode_refusal is not None:
            return DENSE
        key = (tokens, clock)
        found = self._routes.get(key)
        if found is None:
            problem = self._problem()
            decision = BOOK.decided(problem, tokens)
            if decision is None:
                if torch.cuda.is_current_stream_capturing():
                    return BOOK.nearest(problem, tokens, clock) or DENSE
                x = torch.randn(
                    tokens, self.in_features, device=self.codes.device, dtype=self.dtype
                )
                calls = {DENSE: lambda: self._dense(x), DECODE: lambda: self._decode(x)}
                decision = BOOK.decide(problem, tokens, calls)
            found = self._routes[key] = decision.route(clock)
        return found

    def decisions(self) -> dict:
        """``{(tokens, clock): Route}`` chosen so far."""
        return dict(self._routes)

    def route_times(self, tokens: int, clock: str) -> dict:
        """``{Route: ms}`` measured at ``tokens`` rows by ``clock`` (empty if not measured).

        Parameters
        ----------
        tokens, clock : int, str
            Rows of the input, and ``"gpu"`` or ``"wall"``.
        """
        decision = BOOK.decided(self._problem(), tokens)
        return {} if decision is None else decision.times(clock)

    def _problem(self) -> tuple:
        dev = self.codes.device.index or 0
        return (
            self.format,
            self.out_features,
            self.in_features,
            self.group_size,
            self.dtype,
            self.bias is not None,
            dev,
            self.torch_kernel_refusal is None,
            True,  # the dense route is always open
        )

    def _clock(self) -> str:
        if self.mode == "graphs":
            return "gpu"
        if self.mode == "auto" and torch.cuda.is_current_stream_capturing():
            return "gpu"
        return "wall"

    # -- forward -----------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``x[..., in_features]``."""
        if torch.compiler.is_compiling():
            if self.traces_dense(x.numel() // self.in_features):
                return self._dense(x)  # traced: the compiler's own int4 op
            return ops.forward(x, self._op_id)  # the chosen route (or dequantizing), one op
        return self.run(x)

    def traced_linear(self, x: torch.Tensor) -> None:
        """None: an int4 layer decides under the compiler by :meth:`traces_dense` alone.

        The counterpart of ``SparseLinear.traced_linear``, so a block of either kind of part asks
        the same question; here the dense route is torch's int4 op, whatever the row count.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.

        Returns
        -------
        None
        """
        return None

    def traces_dense(self, tokens) -> bool:
        """Whether a compiled model traces the dense route at ``tokens`` rows (else the op).

        Traced up to 64 tokens, outside ``mode="graphs"`` (see the module); symbolic sizes go to
        the op.

        Parameters
        ----------
        tokens : int or symbolic size
            Rows of the input.
        """
        return self.mode != "graphs" and isinstance(tokens, int) and not self._dequantizes(tokens)

    def traced_dense(self, x: torch.Tensor) -> torch.Tensor:
        """The dense route as torch calls a compiler traces (where :meth:`traces_dense`).

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.
        """
        return self._dense(x)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """The eager forward: the route chosen for this row count.

        An input seen before (same shape, device and dtype, same clock) goes straight to the call
        its route makes: a decode step is host-bound in eager mode, so a repeated call costs
        one dictionary lookup more than the kernel's own launch.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.

        Returns
        -------
        torch.Tensor
            ``(..., out_features)`` in the layer's dtype.
        """
        clock = self._clock()
        fast = self._fast.get((x.shape, x.get_device(), x.dtype, clock))
        if fast is not None:
            return fast(x)
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"input has {x.shape[-1]} features in its last dimension, expected "
                f"{self.in_features}"
            )
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != self.dtype:
            x2 = x2.to(self.dtype)
        t = x2.shape[0]
        if t == 0:
            return x.new_empty(*lead, self.out_features, dtype=self.dtype)
        route = self.route(t, clock)
        y = self._decode(x2) if route == DECODE else self._dense(x2)
        settled = t > DECODE_MAX_TOKENS or self.decode_refusal is not None
        if x.dtype == self.dtype and x.is_cuda and (settled or (t, clock) in self._routes):
            self._remember(x, route, clock)  # a measured decision, not a capture's nearest
        return y.reshape(*lead, self.out_features)

    def _remember(self, x: torch.Tensor, route: Route, clock: str) -> None:
        """Keep the call ``x``'s route makes, for the next input like ``x``."""
        t, k = x.numel() // self.in_features, self.in_features
        out = (*x.shape[:-1], self.out_features)
        if route == DECODE:
            call = self._calls[t]
            fast = lambda x: call(x.reshape(t, k)).view(out)  # noqa: E731
        else:
            fast = self._dense
        self._fast[(x.shape, x.get_device(), x.dtype, clock)] = fast

    def run_compiled(self, x: torch.Tensor) -> torch.Tensor:
        """What the compiled op runs (``mode="graphs"``, above 64 tokens): :meth:`run`.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.
        """
        return self.run(x)

    def fake_output(self, x: torch.Tensor) -> torch.Tensor:
        """An empty tensor shaped like the output for ``x``.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.
        """
        return x.new_empty((*x.shape[:-1], self.out_features), dtype=self.dtype)

    def _dequantizes(self, tokens: int) -> bool:
        """Whether the dense route runs cuBLAS on the weight dequantized for the call."""
        return tokens > DECODE_MAX_TOKENS and self._tiled and self._int4pack is not None

    def _dense(self, x: torch.Tensor) -> torch.Tensor:
        """The dense route, at int4.

        torch's int4 kernel up to 64 tokens; above them cuBLAS on the weight dequantized for
        the call (torch's kernel slows down with the tokens); the 16-bit dequantized weight
        where torch's kernel does not take the layer.
        """
        if self._int4pack is None:
            return nn.functional.linear(x, self._dense16, self.bias)
        if self._dequantizes(x.numel() // self.in_features):
            if self._dequantizer is None:
                from explorer.gpu.cuda.int4_dequant import Int4Dequantizer

                self._dequantizer = Int4Dequantizer(self._tiles, self.dtype)
            return nn.functional.linear(x, self._dequantizer(), self.bias)
        return self._torch_int4(x)

    def _torch_int4(self, x: torch.Tensor) -> torch.Tensor:
        """The product by torch's int4 weight-only kernel (the same codes, bf16 scales)."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        y = torch.ops.aten._weight_int4pack_mm(
            x2.contiguous(), self._int4pack, self.group_size, self._int4scales
        )
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def _decode(self, x2: torch.Tensor) -> torch.Tensor:
        """The decode route: the 2:4 + int4 kernel on ``x2`` (at most 64 rows)."""
        from explorer.gpu.cuda.decode_int4 import Int4DecodeCall

        t = x2.shape[0]
        call = self._calls.get(t)
        if call is None:
            call = self._calls[t] = Int4DecodeCall(
                self._tiles, self.bias, t, self.dtype, overlap=self.overlapped_launch
            )
        return call(x2)
