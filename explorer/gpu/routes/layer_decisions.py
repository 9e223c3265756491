"""What one sparse layer was decided, token count by token count, and what that means per mode.

A :class:`~explorer.gpu.SparseLinear` measures its routes (:mod:`explorer.gpu.routes.
route_timing`) and hands each :class:`~explorer.gpu.routes.dispatch.Decision` to its
:class:`LayerDecisions`, which keeps them and answers the questions the layer, ``sparsify`` and
the report ask: which token counts a compiled model traces as a dense matmul, whether the dense
weight is still needed, where the whole-model eager check kept the layer dense. Pure Python:
nothing here needs a GPU, so the rules are tested on any machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from explorer.gpu.routes.dispatch import (
    DECODE,
    DENSE,
    Decision,
    Route,
    check_mode,
    dense_needed,
    shown_clock,
)

__all__ = [
    "OP_BITS_AT",
    "SMALL_ROWS_UP_TO",
    "LayerDecisions",
    "eager_verdict",
    "small_row_bits",
]

#: Row counts up to this are their own decision count (``cusparselt.EXACT_TOKENS_UP_TO`` is at
#: least this), so :attr:`LayerDecisions.traced_small` can name them one bit each.
SMALL_ROWS_UP_TO = 64

#: Where the op's bits start in :func:`small_row_bits` (bit ``OP_BITS_AT + r`` for ``r`` rows).
OP_BITS_AT = SMALL_ROWS_UP_TO + 1


def small_row_bits(traced_small: int, plain_dense: bool, fp8_dense: bool) -> int:
    """A compiled call's route at every small row count, as one int (one guard to read).

    Bit ``r`` (``1 <= r <= SMALL_ROWS_UP_TO``) is set where ``r`` rows trace as the plain dense
    product ``F.linear`` (a traced count, no activation to apply, a 16-bit dense weight); bit
    ``OP_BITS_AT + r`` where they run the opaque op (a count not traced dense). Neither bit: the
    general path decides (a traced count with an activation, or an FP8 dense weight).

    Parameters
    ----------
    traced_small : int
        :attr:`LayerDecisions.traced_small`: bit ``r`` for a count traced dense.
    plain_dense : bool
        Whether a traced count is the bare product (the layer applies no activation).
    fp8_dense : bool
        Whether the dense weight is FP8 (a compiled model traces FP8 dense at every count).

    Returns
    -------
    int
        The bits.

    Examples
    --------
    >>> bits = small_row_bits(0b10, plain_dense=True, fp8_dense=False)  # 1 row traced dense
    >>> bits >> 1 & 1, bits >> OP_BITS_AT + 1 & 1, bits >> OP_BITS_AT + 16 & 1
    (1, 0, 1)
    >>> small_row_bits(0b10, plain_dense=True, fp8_dense=True)
    0
    """
    if fp8_dense:
        return 0
    every = (1 << OP_BITS_AT) - 2  # bits 1 .. SMALL_ROWS_UP_TO
    plain = traced_small if plain_dense else 0
    return plain | (every & ~traced_small) << OP_BITS_AT


def eager_verdict(verdicts: Mapping[int, bool], tokens: int, decode_up_to: int = 64) -> bool:
    """Whether a layer runs dense in eager mode at ``tokens``, from the whole-model checks.

    The checks' ``{tokens: dense?}`` decide: the count's own verdict, else (at decode sizes, up to
    ``decode_up_to``) the verdict of the nearest checked decode size on a log scale, the smaller on
    a tie; else False (the layer's own routes).

    Parameters
    ----------
    verdicts : mapping of int to bool
        The whole-model checks' ``{tokens: dense?}``.
    tokens : int
        The token count to decide for.
    decode_up_to : int, default 64
        The largest decode size.

    Returns
    -------
    bool
        True where the layer runs dense.

    Examples
    --------
    >>> eager_verdict({16: True, 4096: False}, 1), eager_verdict({16: True}, 128)
    (True, False)
    >>> eager_verdict({2: False, 32: True}, 8), eager_verdict({}, 1)
    (False, False)
    """
    verdict = verdicts.get(tokens)
    if verdict is not None:
        return verdict
    if tokens > decode_up_to:
        return False
    small = [k for k in verdicts if k <= decode_up_to]
    if not small:
        return False
    nearest = min(small, key=lambda k: (abs(math.log(k / tokens)), k))
    return verdicts[nearest]


class LayerDecisions:
    """One layer's decisions by token count, read for the execution mode it runs in.

    Parameters
    ----------
    mode : {"auto", "eager", "compile", "graphs"}, default "auto"
        The layer's execution mode (see :func:`explorer.sparsify`).
    decode_up_to : int, default 64
        The largest decode size (an eager verdict there also holds for its neighbours).
    on_traced : callable, optional
        Called with :attr:`traced_small` whenever the traced counts are recounted (the layer
        keeps its compiled verdict beside its other attributes). Not copied or pickled.

    Examples
    --------
    >>> sparse = Route("sparse", "cc")
    >>> book = LayerDecisions()
    >>> book.remember(16, Decision({DENSE: 0.010, sparse: 0.006}, {}), op_ms=0.02, dense=True)
    >>> book.remember(4096, Decision({DENSE: 0.40, sparse: 0.30}, {}), op_ms=0.02, dense=True)
    >>> book.traces_dense(16), book.traces_dense(4096), book.needs_dense()
    (True, False, True)
    >>> book.set_mode("graphs")
    >>> book.traces_dense(16), book.needs_dense()
    (False, False)
    >>> book
    LayerDecisions(mode=graphs, 2 token counts: 16 sparse cc default, 4096 sparse cc default)
    """

    #: No count traced (also what a pickle of an older version reads).
    traced_small = 0
    traced_large: tuple[int, ...] = ()

    def __init__(self, mode: str = "auto", decode_up_to: int = 64, on_traced=None) -> None:
        self.on_traced = on_traced
        self.mode = check_mode(mode)
        self.decode_up_to = decode_up_to
        self._found: dict[int, Decision] = {}
        # decision tokens -> {verdict: True if it runs dense} ("gpu", "wall", "compile")
        self._dense_at: dict[int, dict[str, bool]] = {}
        # token counts a compiled model traces as a dense matmul (a tuple: one cheap guard)
        self._traced: tuple[int, ...] = ()
        #: The traced counts up to :data:`SMALL_ROWS_UP_TO` as bits (bit ``t`` for ``t`` rows):
        #: one int, so a compiled decode step reads its verdict with a single guard.
        self.traced_small = 0
        #: The traced decision counts above :data:`SMALL_ROWS_UP_TO` (a tuple of a few ints):
        #: a compiled prefill reads its verdict with a guard or two, as a decode step does.
        self.traced_large: tuple[int, ...] = ()
        self._dense_open = True
        # decision tokens -> True where a whole-model eager check kept the layer dense
        self._eager: dict[int, bool] = {}

    def set_mode(self, mode: str) -> None:
        """Read the decisions for ``mode`` from now on.

        Parameters
        ----------
        mode : {"auto", "eager", "compile", "graphs"}
            The execution mode.
        """
        self.mode = check_mode(mode)
        self._update_traced()

    def remember(
        self, tokens: int, found: Decision, op_ms: float, dense: bool, program: bool = False
    ) -> None:
        """Keep ``found``, the decision for ``tokens`` (decision tokens).

        Parameters
        ----------
        tokens : int
            The decision's token count (see ``cusparselt.decision_tokens``).
        found : Decision
            Both clocks' times of the routes.
        op_ms : float
            The compiled op's host time per call, in milliseconds: what a default-mode compiled
            model pays for a sparse route and not for a traced matmul.
        dense : bool
            Whether a compiled model can trace the dense route (the dense weight is kept).
        program : bool, default False
            Whether the wall clock's route is one the compiled operator runs from C++
            (:mod:`explorer.gpu.cuda.native`), timed through it: its wall time is what a
            compiled call pays, so a default-mode compiled model calls it wherever the wall
            clock chose it, decode sizes included, unless the whole-model eager check kept the
            count dense (eager calls run the same operator: a model not faster with it eagerly
            traces the count dense).
        """
        self._found[tokens] = found
        program = program and found.route("wall") != DENSE
        self._dense_at[tokens] = {
            "gpu": found.route("gpu") == DENSE,
            "wall": found.route("wall") == DENSE,
            "compile": not program and found.compiled_dense(op_ms, tokens),
        }
        self._dense_open = bool(dense)
        self._update_traced()

    def close_dense(self) -> None:
        """The dense weight is gone: a compiled model traces no dense matmul from now on."""
        self._dense_open = False
        self._set_traced(())

    def forget_decode(self) -> None:
        """The decode kernel's weight is gone: drop its times, and the decisions that chose it.

        A decision in which no clock chose the decode kernel keeps its verdicts and the other
        routes' times. One that chose it is forgotten here, and comes back at the layer's next
        call from the route book, which kept the other routes' times (see
        ``RouteBook.carry_without_decode``).
        """
        kept = {}
        for n, found in self._found.items():
            if found.route("gpu") != DECODE and found.route("wall") != DECODE:
                kept[n] = found.without(DECODE.kind)
        self._found = kept

    def forget(self) -> None:
        """Forget every decision (the layer moved: times of another device do not hold)."""
        self._found, self._dense_at = {}, {}
        self._set_traced(())

    def _update_traced(self) -> None:
        """Recount the token counts a compiled model traces as a dense matmul.

        By GPU time for ``"graphs"``, else by :meth:`Decision.compiled_dense` (the default
        compile mode, which pays the op's host time), and where the whole-model eager check kept
        a count dense: a model whose sparse routes lose to its host time eagerly loses more in
        the default compile mode, where each sparse call is an op with more host time than
        the eager call (measured on an H100: a BERT-base-like model at 4096 tokens ran 0.89x
        eagerly and 0.78x compiled with sparse routes).
        """
        if not self._dense_open:
            self._set_traced(())
            return
        if self.mode == "graphs":
            self._set_traced(tuple(sorted(k for k, f in self._dense_at.items() if f["gpu"])))
            return
        eager_kept = {k for k, dense in self._eager.items() if dense}
        self._set_traced(
            tuple(sorted(k for k, f in self._dense_at.items() if f["compile"] or k in eager_kept))
        )

    def _set_traced(self, counts: tuple[int, ...]) -> None:
        """Keep the traced counts (small ones as :attr:`traced_small`'s bits, others as a tuple)."""
        self._traced = counts
        self.traced_small = sum(1 << k for k in counts if 0 < k <= SMALL_ROWS_UP_TO)
        self.traced_large = tuple(k for k in counts if k > SMALL_ROWS_UP_TO)
        if self.on_traced is not None:
            self.on_traced(self.traced_small)

    def __getstate__(self) -> dict:
        """What a copy or a pickle keeps: the decisions, not the owner's callback."""
        state = self.__dict__.copy()
        state["on_traced"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        """A copy, or a pickle of an older version (no callback), has none until given one."""
        self.__dict__.update({"on_traced": None, **state})

    def traces_dense(self, tokens: int) -> bool:
        """Whether a compiled model runs decision count ``tokens`` as a traced dense matmul.

        Parameters
        ----------
        tokens : int
            The decision's token count.

        Returns
        -------
        bool
            True for a traced matmul, False for the sparse op.
        """
        return bool(self._traced) and tokens in self._traced

    def needs_dense(self) -> bool:
        """Whether a verdict of this mode runs the dense weight (see ``dispatch.dense_needed``).

        Returns
        -------
        bool
            False where freeing the dense weight loses nothing.
        """
        if self.mode in ("auto", "eager", "compile") and any(self._eager.values()):
            return True  # the whole-model check keeps a count dense: it runs on the dense weight
        return dense_needed(self.mode, self._dense_at.values())

    def keep_dense_at(self, tokens: int, keep: bool = True) -> None:
        """Record the whole-model eager check's verdict at decision count ``tokens``.

        Parameters
        ----------
        tokens : int
            The decision's token count.
        keep : bool, default True
            True: dense in eager mode there; False: the measured routes.
        """
        self._eager[int(tokens)] = bool(keep)
        self._update_traced()

    def eager_dense(self, tokens: int) -> bool:
        """Whether the whole-model checks keep decision count ``tokens`` dense in eager mode.

        Parameters
        ----------
        tokens : int
            The decision's token count.

        Returns
        -------
        bool
            The verdict of :func:`eager_verdict`; False where no check ran.
        """
        return bool(self._eager) and eager_verdict(self._eager, tokens, self.decode_up_to)

    def routes(self, clock: str | None = None) -> dict[int, tuple[Route, dict]]:
        """``{tokens: (route, {route: ms})}`` by ``clock`` (by default the mode's; wall for auto).

        Parameters
        ----------
        clock : {"gpu", "wall"}, optional
            GPU time (CUDA-graph replay) or wall time of back-to-back eager calls.

        Returns
        -------
        dict
            The route kept and the times of every route, per decision count.
        """
        clock = clock or shown_clock(self.mode)
        return {n: (d.route(clock), d.times(clock)) for n, d in self._found.items()}

    def measured(self) -> dict[int, Decision]:
        """``{tokens: Decision}``: both clocks' times of every route measured so far.

        Returns
        -------
        dict
            A copy of the decisions kept.
        """
        return dict(self._found)

    def __repr__(self) -> str:
        routes = self.routes()
        parts = [f"{n} {r.label}" for n, (r, _) in sorted(routes.items())]
        return f"LayerDecisions(mode={self.mode}, {len(routes)} token counts" + (
            f": {', '.join(parts)})" if parts else ")"
        )
