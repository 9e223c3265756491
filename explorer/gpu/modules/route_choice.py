"""How a ``SparseLinear`` chooses its route for each problem: what is timed, and what is kept.

:class:`RouteChoice` is the part of :class:`~explorer.gpu.modules.sparse_linear.SparseLinear`
that decides, once per problem (shape, dtype, token count, input layout, fused activation),
which route a call takes: it builds ``{Route: call}`` for every route open to the problem
(cuBLAS on the dense weight, the decode kernel at 1 to 64 tokens, each cuSPARSELt layout with the
library's default and the tuned algorithm), hands them to the shared book of timings
(:data:`explorer.gpu.routes.route_timing.BOOK`, which times both clocks once per process), and
keeps the verdict in the layer's :class:`~explorer.gpu.routes.layer_decisions.LayerDecisions`.
The layer's forward paths, plans and weights stay in ``sparse_linear``; this class only reads
them through the layer's own methods and attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from explorer.gpu.cuda import decode as D
from explorer.gpu.cuda import native, native_table, ops
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library import tuning
from explorer.gpu.modules.sparse_calls import apply_activation
from explorer.gpu.routes.dispatch import DECODE, DENSE, Decision, Route
from explorer.gpu.routes.layer_decisions import small_row_bits
from explorer.gpu.routes.route_timing import BOOK

__all__ = ["RouteChoice", "wall_among"]


def wall_among(found: Decision, keep: Callable[[Route], bool]) -> Decision:
    """``found`` with its wall-clock times cut to dense and the 2:4 routes ``keep`` accepts.

    Where that would leave the wall clock no route on the 2:4 weight to take, ``found`` is
    returned as it is: the cut only ever chooses among sparse routes, and never turns a sparse
    verdict dense for want of one. The GPU clock's times are left whole (a CUDA graph replays
    any route at no host cost).

    Parameters
    ----------
    found : Decision
        The routes measured for one problem.
    keep : callable
        ``keep(route) -> bool`` for each route of ``found.wall`` other than dense.

    Returns
    -------
    Decision

    Examples
    --------
    >>> cc, cr = Route("sparse", "cc"), Route("sparse", "cr")
    >>> d = Decision({DENSE: 0.03, cc: 0.021, cr: 0.02}, {DENSE: 0.04, cc: 0.031, cr: 0.03})
    >>> d.route("wall"), wall_among(d, lambda r: r == cc).route("wall")
    (Route(sparse cr default), Route(sparse cc default))
    >>> wall_among(d, lambda r: r == cc).route("gpu")
    Route(sparse cr default)
    >>> wall_among(d, lambda r: False) is d
    True
    """
    wall = {r: ms for r, ms in found.wall.items() if r == DENSE or keep(r)}
    if len(wall) == len(found.wall):
        return found
    cut = Decision(found.gpu, wall)
    if found.route("wall").sparse_weight and not cut.route("wall").sparse_weight:
        return found
    return cut


class RouteChoice:
    """Route choice of :class:`~explorer.gpu.modules.sparse_linear.SparseLinear` (a base class).

    It holds no state of its own but the flag :attr:`block_part`: the routes chosen live in the
    layer's ``_routes`` and :attr:`decisions_made`, the times in the shared book. A
    ``SparseLinear`` is the only class built on it.
    """

    #: Whether the layer is a part of a fused block that runs as one program of the compiled
    #: operator where each part's call is one it makes (``SparseGatedMLP``): then, by the wall
    #: clock, only such routes are open to it (see :meth:`_as_block_part`).
    block_part = False

    def _follow_decisions(self) -> None:
        """Count :attr:`small_row_routes` now and whenever the decisions recount their counts.

        The compiled verdict at 1 to 64 rows as one int (``small_row_bits``), which a compiled
        decode step reads with one guard.
        """
        self.decisions_made.on_traced = self._traced_changed
        self._traced_changed(self.decisions_made.traced_small)

    def _traced_changed(self, traced_small: int) -> None:
        plain = self.activation == "none"
        self.small_row_routes = small_row_bits(traced_small, plain, self._fp8_dense)

    def _problem(self, dev: int, fused_act: bool, alpha: bool, first: str) -> tuple:
        return (
            self.out_features,
            self.in_features,
            self.dtype,
            fused_act,
            alpha,
            self._bias_in_kernel,
            dev,
            first,
            self.alg,
            self.layout,
            self.output,
            self.decode_kept,
            self.dense_kept,  # last: drop_dense moves decisions to the key without it
        )

    def _route(
        self, n: int, t: int, dev: int, fused_act: bool, alpha: bool, first: str, clock: str
    ) -> Route:
        """The route for ``t`` tokens (``n`` padded) whose input arrives in layout ``first``."""
        if self._force is not None:
            return self._force
        decided_at = t if t <= C.EXACT_TOKENS_UP_TO else n  # cusparselt.decision_tokens
        if clock == "wall" and self.decisions_made.eager_dense(decided_at):
            return DENSE
        key = (decided_at, first, fused_act, clock)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._choose(n, t, dev, fused_act, alpha, first, clock)
        return route

    def keep_dense_at(self, tokens: int, keep: bool = True) -> None:
        """Run dense in eager mode at ``tokens`` tokens, whatever the layer's timing chose there.

        ``keep=False`` takes the measured routes again.

        Set by ``sparsify``'s whole-model check (:mod:`explorer.gpu.swap.eager_check`), which found
        the sparse routes no faster for the whole model at that count. A verdict at a decode
        size (64 tokens or fewer) also holds for the untested decode sizes nearest to it: a
        host-bound model at 16 tokens is host-bound at 1. A model compiled in the default mode
        traces that count dense too (its sparse calls cost at least the eager calls' host time),
        and the compiled operator's programs for the wall clock go; CUDA graphs keep their own
        decisions. ``sparsify`` keeps every dense weight until the
        check has run; a layer without its dense weight has nothing to fall back to.

        Parameters
        ----------
        tokens : int
            The token count.
        keep : bool, default True
            Keep dense there; False takes the measured routes again.
        """
        if self._dense is None:
            return
        self.decisions_made.keep_dense_at(C.decision_tokens(int(tokens), self.dtype), keep)
        self._routes = {k: r for k, r in self._routes.items() if k[3] != "wall"}
        self._forget_fast_paths()  # the compiled operator's programs too: eager calls run them

    def _choose(
        self, n: int, t: int, dev: int, fused_act: bool, alpha: bool, first: str, clock: str
    ) -> Route:
        """Measure the routes open to this problem once (per process) by both clocks.

        The one fastest by ``clock`` is kept.

        Decisions are kept per :func:`~explorer.gpu.library.cusparselt.decision_tokens`: small token
        counts each on their own (their padding is part of the cost), larger ones per plan.
        A fixed ``layout`` or an 8-bit type leaves one cuSPARSELt route, timed against the decode
        kernel (1 to 64 tokens) and, for fp8, against FP8 dense. Inside a CUDA-graph capture
        nothing can be timed: the decision of the nearest measured token count is used, or the
        sparse row-major route if none was measured.
        """
        decoding = self.decode_kept and n <= D.MAX_TOKENS
        if self.layout != "auto" or self.dtype.itemsize == 1 or self.backend != "cusparselt":
            lay = "cc" if self.dtype.itemsize == 1 else self.layout
            lay = first + "c" if lay == "auto" else lay
            fixed = Route("sparse", lay, self.alg, lay[1] == "r" and self.output == "rows")
            if not decoding and not self._fp8_dense:
                return fixed
            return self._decide(n, t, dev, fused_act, alpha, first, clock, fixed)
        return self._decide(n, t, dev, fused_act, alpha, first, clock, None)

    def _decide(
        self,
        n: int,
        t: int,
        dev: int,
        fused_act: bool,
        alpha: bool,
        first: str,
        clock: str,
        fixed: Route | None,
    ) -> Route:
        """The route by ``clock`` of this problem's decision, measured now if it is new.

        ``fixed``: the one cuSPARSELt route of an 8-bit or fixed-layout layer, timed as a
        whole forward against the decode kernel; None: every open route, timed as its call.
        """
        key = C.decision_tokens(t, self.dtype)
        problem = self._problem(dev, fused_act, alpha, first)
        found = BOOK.decided(problem, key)
        if found is None:
            fallback = fixed or Route("sparse", first + "c", self.alg)
            if torch.cuda.is_current_stream_capturing():
                near = BOOK.nearest(problem, key, clock)
                if near is not None and near.kind == "decode" and n > D.MAX_TOKENS:
                    near = None  # the decode kernel takes at most 64 tokens
                return near or fallback
            if fixed is None:
                found = BOOK.decide(problem, key, self._route_calls(n, t, dev, fused_act, first))
            else:
                found = self._decide_whole_forwards(problem, key, t, dev, first, fixed)
            if found is None:
                return fallback
        found = self._as_block_part(found, key)
        self._remember_decision(key, found)
        return found.route(clock)

    def _as_block_part(self, found: Decision, key: int) -> Decision:
        """``found`` as a fused block's part sees it: by the wall clock, routes C++ can make.

        A block whose parts' calls are all made by the compiled operator runs as one program
        (the gate/up product, the SwiGLU launch and the down product from C++); where one part
        takes a route the operator does not make (a transposed output, a padded count), every
        eager call of the block goes through Python. On an H200 that was about 95 us of host
        time for a 1024 -> 3584 block at 16 tokens against about 47 us as a program, where the
        transposed route it gave up was a few microseconds faster on the GPU. So a block's part
        chooses among dense and the routes the operator makes, by the wall clock, where it has
        one on the 2:4 weight; the GPU clock (CUDA graphs) still takes the fastest route.
        """
        if not self.block_part or not native.loaded():
            return found
        return wall_among(found, partial(self.operator_makes, tokens=key))

    def _remember_decision(self, key: int, found: Decision) -> None:
        """Keep ``found``; a compiled model's choices count the op's host time (``ops``).

        Where the compiled operator makes the wall clock's route from C++
        (:mod:`explorer.gpu.cuda.native`), that route was timed through it: its wall time is what
        a compiled call pays, so no Python op's host time is added.
        """
        op_ms = ops.call_overhead_us(measure=True) / 1e3
        dense = self._dense is not None and self.backend == "cusparselt"
        program = self.operator_makes(found.route("wall"), key)
        self.decisions_made.remember(key, found, op_ms, dense, program)

    def operator_makes(self, route: Route, tokens: int) -> bool:
        """Whether the compiled operator makes this layer's call of ``route`` at ``tokens`` rows.

        For a row-major input: the decode kernel without an activation after it, or a
        row-major cuSPARSELt product needing no padding, on 16-bit inputs the layer takes as
        they are (what ``sparse_calls.sparse_call`` binds and ``_remember`` hands on). The
        dense route is a program step too (``sparse_calls.linear_call``), for the blocks made
        of this layer's steps, but is not counted here: a compiled model traces it as the
        compiler's own matmul, and an eager call makes ``F.linear`` itself.

        Parameters
        ----------
        route : Route
            A route of this layer.
        tokens : int
            The decision's token count (rows of the input, at most 64 for a program).

        Returns
        -------
        bool
            False where the operator is not loaded.
        """
        if not native.loaded() or self.weight_scale is not None or self.dtype.itemsize != 2:
            return False
        if route == DECODE:
            return self.activation == "none"
        return (
            route.kind == "sparse"
            and route.layout == "cc"
            and not route.transpose
            and (self.activation == "none" or self._fuses)
            and tokens <= C.EXACT_TOKENS_UP_TO
            and C.padded_tokens(tokens, self.dtype) == tokens
        )

    def _decide_whole_forwards(
        self, problem: tuple, key: int, t: int, dev: int, first: str, fixed: Route
    ) -> Decision:
        """Time the one ``fixed`` route against the others open as whole forwards.

        For 8-bit types and fixed layouts, whose cuSPARSELt route is not chosen among others: the
        decode kernel (at most 64 tokens) and FP8 dense (an fp8 layer that kept its codes).
        """
        gen = torch.Generator(device=f"cuda:{dev}").manual_seed(0)
        act = self.dtype if self.dtype.itemsize == 2 else self.out_dtype
        x = torch.randn(t, self.in_features, device=f"cuda:{dev}", generator=gen).to(act)
        if first == "r":
            x = x.t().contiguous().t()

        def forced(route: Route):
            def call():
                self._force = route
                try:
                    return self._forward(x)
                finally:
                    self._force = None

            return call

        try:
            routes = [fixed]
            tuned = None
            if self._fp8_dense and fixed.alg < 0:
                m, n, k = self._mnk(C.padded_tokens(t, self.dtype))
                tuned = tuning.lookup(dev, m, n, k, self.dtype, self.out_dtype, "cc", nearest=True)
            if tuned is not None and tuned >= 0:
                routes.append(Route("sparse", fixed.layout, tuned, fixed.transpose))
            if self.decode_kept and t <= D.MAX_TOKENS:
                routes.append(DECODE)
            if self._fp8_dense:
                routes.append(DENSE)
            return BOOK.decide(problem, key, {route: forced(route) for route in routes})
        finally:
            self._forget_fast_paths()

    def _route_calls(
        self, n: int, t: int, dev: int, fused_act: bool, first: str
    ) -> dict[Route, Callable[[], torch.Tensor]]:
        """``{Route: call}`` of every route open to ``t`` tokens (``n`` padded).

        Each call runs on a fixed random input as the fast path will, padding included; searched
        algorithms that compute something else than the dense product are left out. A call the
        compiled operator can make (:mod:`explorer.gpu.cuda.native`) is made through it, as the
        layer's eager and compiled calls of the route will be.
        """
        alpha = self._alpha_vector
        gen = torch.Generator(device=f"cuda:{dev}").manual_seed(0)
        full = torch.randn(n, self.in_features, device=f"cuda:{dev}", generator=gen)
        full = full.to(self.dtype)
        probe = min(n, self._probe_x.shape[0]) if self._probe_x is not None else 0
        if probe:
            full[:probe] = self._probe_x[:probe]
        x = full[:t].contiguous()
        if first == "r":
            full = full.t().contiguous().t()
            x = x.t().contiguous().t()
        calls: dict[Route, Callable[[], torch.Tensor]] = {}
        made: dict[Route, Callable[[torch.Tensor], torch.Tensor]] = {}  # the calls remembered
        if self._dense is not None:
            dense = self._dense_call(fused_act)
            calls[DENSE] = partial(dense, x)
        if self.decode_kept and t <= D.MAX_TOKENS:
            calls[DECODE] = partial(self._decode_forward, x, fused_act)
            act = self._dec_values.dtype if self._dec_scale is None else self.out_dtype
            if x.dtype == act and self.activation == "none":
                made[DECODE] = self._decode_call(t, act)  # what _maybe_decode remembers
        for lay in (first + "c", first + "r"):
            algs = [self.alg]
            if self.alg < 0:
                epi = self.activation if fused_act else "none"
                found = tuning.lookup(
                    dev, *self._mnk(n), self.dtype, self.out_dtype, lay, epi, nearest=True
                )
                if found is not None and found >= 0:
                    algs.append(found)
            for alg in algs:
                try:
                    plan = self._plan_for(n, dev, fused_act, alpha, Route("sparse", lay, alg))
                    y = self._run(plan, full, n)
                except C.CusparseltRefused:
                    continue  # the library has no kernel for this config: not a route
                if alg >= 0 and probe and not self._probe_ok(y[:probe], fused_act):
                    continue  # a config that computes something else: never use it
                if lay[1] == "c" or self.output == "any":
                    run = made[Route("sparse", lay, alg)] = self._fast_sparse(plan, n, t, False)
                    calls[Route("sparse", lay, alg)] = partial(run, x)
                if lay[1] == "r":
                    run = made[Route("sparse", lay, alg, True)] = self._fast_sparse(
                        plan, n, t, True
                    )
                    calls[Route("sparse", lay, alg, True)] = partial(run, x)
        # a route whose call the compiled operator makes is timed through it: eager and
        # compiled calls of it cost the operator's host time, not the Python call's
        calls.update(native_table.operator_calls(x, made))
        return calls

    def decisions(self, clock: str | None = None) -> dict[int, tuple[Route, dict]]:
        """Measured routes of this layer so far: ``{tokens: (route, {route: ms})}``.

        Keyed by :func:`~explorer.gpu.library.cusparselt.decision_tokens` (small counts as they are,
        larger ones padded to their plan's count).

        Parameters
        ----------
        clock : {"gpu", "wall"}, optional
            Which times: GPU time (CUDA-graph replay) or wall time of back-to-back eager calls.
            By default the clock of the layer's mode (wall time for ``"auto"``).

        Layers of the same problem share one measurement (the first one to meet it times it).
        """
        return self.decisions_made.routes(clock)

    def measured(self) -> dict[int, Decision]:
        """``{tokens: Decision}``: both clocks' times of every route measured so far.

        Keyed as :meth:`decisions`.
        """
        return self.decisions_made.measured()

    def _probe_ok(self, y: torch.Tensor, fused_act: bool) -> bool:
        ref = self._probe_y[: y.shape[0]].float()
        if self._bias_in_kernel:
            ref = ref + self.bias.float()
        if fused_act:
            ref = apply_activation(ref, self.activation)
        err = (y.float() - ref).norm() / ref.norm().clamp_min(1e-30)
        return bool(torch.isfinite(err)) and float(err) < 2e-2
