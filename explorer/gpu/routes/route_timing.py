"""Timing the routes of a sparse layer, and the decisions shared by every layer of a problem.

A layer offers the routes open to one problem (shape, dtype, epilogue, input layout, token
count) as ``{Route: call}``, each call taking no argument and running the route as its fast
path will; :meth:`RouteBook.decide` times them by both clocks once per process and keeps the
:class:`~explorer.gpu.routes.dispatch.Decision`. Layers of the same problem share it: the first one
to meet a problem times it, the others read it. The rule that picks a route from the times lives
in :mod:`explorer.gpu.routes.dispatch`; this module only measures and remembers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from functools import partial

import torch

from explorer.gpu.routes.dispatch import DECODE, DENSE, Decision, Route, nearest_route
from explorer.gpu.routes.timing import cold_graph_ms, eager_ms, graph_ms

__all__ = ["BOOK", "COLD_UP_TO", "RouteBook", "time_both_clocks"]

#: Token counts up to which the GPU clock times a route with its weight evicted from L2 first:
#: at decode sizes the weight's bytes are the time, and a model finds them in memory.
COLD_UP_TO = 64


def time_both_clocks(fn: Callable[[], object], cold: bool = False) -> tuple[float | None, float]:
    """``fn``'s time by both clocks a route is chosen by (milliseconds per call).

    GPU: CUDA-graph replay (median of 3 x 10 calls), what a model under CUDA graphs pays, host
    cost excluded; ``None`` where ``fn`` cannot be captured. With ``cold``, each call follows
    a read that evicts its operands from L2 (:func:`~explorer.gpu.routes.timing.cold_graph_ms`),
    as in a model, where the other layers' weights pass through L2 between two calls of one.
    Wall: back-to-back eager calls (median of 3 x 10), what eager mode and ``torch.compile``'s
    default mode pay, the host's time to issue each call included wherever it is longer than
    the GPU's.

    Parameters
    ----------
    fn : callable
        The call to time, without arguments.
    cold : bool, default False
        Evict L2 before each call timed by the GPU clock.

    Returns
    -------
    (float or None, float)
        Milliseconds per call by the GPU clock and by the wall clock.
    """
    wall = eager_ms(fn, iters=10, reps=3, warmup=2)
    try:
        gpu = cold_graph_ms(fn, iters=10, reps=3) if cold else graph_ms(fn, iters=10, reps=3)
    except RuntimeError:  # not capturable here
        torch.cuda.synchronize()
        gpu = None
    return gpu, wall


class RouteBook:
    """Decisions measured so far, per problem and decision token count.

    A problem is any hashable key the layer builds; its last element says whether the dense
    weight is kept (the dense route is open), so :meth:`carry_without_dense` can move the
    decisions that never chose dense to the same problem without it.

    Examples
    --------
    >>> book = RouteBook()
    >>> sparse = Route("sparse", "cc")
    >>> book.record(("p", True), 16, Decision({DENSE: 1.0, sparse: 0.5}, {DENSE: 1.0}))
    >>> book.decided(("p", True), 16).route("gpu")
    Route(sparse cc default)
    >>> book.nearest(("p", True), 20, "gpu"), book.decided(("p", True), 20)
    (Route(sparse cc default), None)
    """

    def __init__(self) -> None:
        self._problems: dict[Hashable, dict[int, Decision]] = {}

    def decided(self, problem: Hashable, tokens: int) -> Decision | None:
        """The decision measured for ``problem`` at ``tokens``, or None.

        Parameters
        ----------
        problem : hashable
            The problem's key.
        tokens : int
            Rows of the input.

        Returns
        -------
        Decision or None
            The decision, or None.
        """
        return self._problems.get(problem, {}).get(tokens)

    def nearest(self, problem: Hashable, tokens: int, clock: str) -> Route | None:
        """The route by ``clock`` of the nearest token count measured for ``problem``.

        Parameters
        ----------
        problem : hashable
            The problem's key.
        tokens : int
            Rows of the input.
        clock : str
            ``"gpu"`` or ``"wall"``.

        Returns
        -------
        Route or None
            The route, or None when nothing is measured for ``problem``.
        """
        decided = self._problems.get(problem, {})
        return nearest_route(tokens, {k: d.route(clock) for k, d in decided.items()})

    def record(self, problem: Hashable, tokens: int, decision: Decision) -> None:
        """Keep ``decision`` for ``problem`` at ``tokens``.

        Parameters
        ----------
        problem : hashable
            The problem's key.
        tokens : int
            Rows of the input.
        decision : Decision
            The decision to keep.
        """
        self._problems.setdefault(problem, {})[tokens] = decision

    def decide(
        self,
        problem: Hashable,
        tokens: int,
        calls: Mapping[Route, Callable[[], object]],
        timer: Callable[[Callable[[], object]], tuple[float | None, float]] | None = None,
    ) -> Decision | None:
        """Time ``calls`` by both clocks, keep and return the decision (None if no call).

        Parameters
        ----------
        problem : hashable
            The problem's key.
        tokens : int
            Rows of the input.
        calls : mapping of Route to callable
            The call of each route, without arguments.
        timer : callable, optional
            ``timer(call)`` -> ``(gpu ms or None, wall ms)``; by default
            :func:`time_both_clocks`, with L2 evicted before each GPU-clock call up to
            :data:`COLD_UP_TO` tokens.

        Returns
        -------
        Decision or None
            The decision, or None when ``calls`` is empty.

        Examples
        --------
        >>> book = RouteBook()
        >>> fake = {DENSE: (1.0, 1.0), Route("decode"): (0.5, 2.0)}
        >>> calls = {r: (lambda r=r: r) for r in fake}
        >>> found = book.decide("p", 1, calls, timer=lambda call: fake[call()])
        >>> found.route("gpu"), found.route("wall")
        (Route(decode), Route(dense))
        """
        if not calls:
            return None
        if timer is None:
            timer = partial(time_both_clocks, cold=tokens <= COLD_UP_TO)
        timed = {route: timer(call) for route, call in calls.items()}
        found = Decision(
            {r: g for r, (g, _) in timed.items() if g is not None},
            {r: w for r, (_, w) in timed.items()},
        )
        self.record(problem, tokens, found)
        return found

    def carry_without_dense(self, matches: Callable[[tuple], bool]) -> None:
        """Copy sparse decisions of problems without the dense weight to those that kept it.

        For every problem ``matches`` accepts whose dense weight was kept, and where none is
        measured yet: copy the decisions where both clocks chose a sparse-weight route to the same
        problem without the dense weight (its dense times left out).

        Parameters
        ----------
        matches : callable
            ``matches(problem)``: True for the problems to copy from.
        """
        for problem, decided in list(self._problems.items()):
            if not (isinstance(problem, tuple) and problem[-1] and matches(problem)):
                continue
            mine = self._problems.setdefault((*problem[:-1], False), {})
            for n, found in decided.items():
                if all(found.route(c).sparse_weight for c in ("gpu", "wall")):
                    mine.setdefault(
                        n,
                        Decision(
                            {r: t for r, t in found.gpu.items() if r != DENSE},
                            {r: t for r, t in found.wall.items() if r != DENSE},
                        ),
                    )

    def carry_without_decode(self, matches: Callable[[tuple], bool]) -> None:
        """Copy decisions of problems that kept the decode weight to the same problems without it.

        A problem's key names, second to last, whether the decode kernel's weight is kept. For
        every problem ``matches`` accepts that kept it, copy each decision, the decode kernel's
        times left out, to the same problem without the decode weight, where none is measured
        yet. The other routes were timed on the same inputs in the same run, so the route each
        clock keeps among them stands, and the next call measures nothing.

        Parameters
        ----------
        matches : callable
            ``matches(problem)``: True for the problems to copy from.

        Examples
        --------
        >>> sparse = Route("sparse", "cc")
        >>> book = RouteBook()
        >>> times = {DENSE: 0.010, Route("decode"): 0.006, sparse: 0.008}
        >>> book.record(("layer", True, True), 16, Decision(times, dict(times)))
        >>> book.carry_without_decode(lambda problem: problem[0] == "layer")
        >>> book.decided(("layer", False, True), 16).route("gpu")
        Route(sparse cc default)
        """
        for problem, decided in list(self._problems.items()):
            if not (isinstance(problem, tuple) and len(problem) > 1 and problem[-2]):
                continue
            if not matches(problem):
                continue
            mine = self._problems.setdefault((*problem[:-2], False, problem[-1]), {})
            for n, found in decided.items():
                kept = found.without(DECODE.kind)
                if kept.gpu or kept.wall:
                    mine.setdefault(n, kept)

    def clear(self) -> None:
        """Forget every decision (the next call of each problem measures again)."""
        self._problems.clear()

    def __len__(self) -> int:
        return sum(len(d) for d in self._problems.values())

    def __repr__(self) -> str:
        return f"RouteBook({len(self._problems)} problems, {len(self)} decisions)"


#: The decisions of this process, shared by every sparse layer.
BOOK = RouteBook()
