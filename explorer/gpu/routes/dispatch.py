"""Which path a sparse layer takes at a token count: pure decisions, no GPU needed.

A layer of :mod:`explorer.gpu` can run its product several ways: the dense weight through
cuBLAS, or the 2:4 weight through cuSPARSELt with the output written row-major (``Y``) or
transposed (``Y^T``), the latter either handed on as a transposed view (free only when the
next step is another sparse layer or a fused kernel) or copied to row-major by the tiled
transpose kernel, or, for 1 to 64 tokens, the explorer's own decode kernel on the weight in its
documented compressed layout (:mod:`explorer.gpu.cuda.decode`). Each way is a :class:`Route`. A layer times the routes it may take once per
problem (shape, dtype, padded token count, input layout) and keeps the fastest with
:func:`pick_route`, which keeps a layer dense unless sparse is measurably faster. Token
counts never measured (inside a CUDA-graph capture, where nothing can be timed) take the
decision of the nearest measured count (:func:`nearest_route`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "COMPILED_HOST_BOUND_UP_TO",
    "DECODE",
    "DENSE",
    "MODES",
    "SPARSE_MARGIN",
    "VERDICTS_BY_MODE",
    "Decision",
    "Route",
    "check_mode",
    "clock_for",
    "clocks_for",
    "dense_needed",
    "nearest_route",
    "pick_route",
    "shown_clock",
]

#: How a model may be run, as ``sparsify(mode=...)`` names it: ``"auto"`` decides per call
#: (CUDA-graph capture: GPU time; otherwise: wall time), the others fix one clock.
MODES = ("auto", "eager", "compile", "graphs")

#: Sparse must take at most this share of the dense time to be chosen (a 2% margin, so that
#: timing noise never turns a tie into a slowdown).
SPARSE_MARGIN = 0.98


@dataclass(frozen=True)
class Route:
    """One way to compute ``y = x @ W^T (+ b)``.

    Attributes
    ----------
    kind : {"dense", "sparse", "decode"}
        cuBLAS on the dense weight, cuSPARSELt, or the explorer's decode kernel (1 to 64
        tokens).
    layout : str
        cuSPARSELt operand layouts (``"cc"``, ``"cr"``, ``"rc"``, ``"rr"``; see
        :mod:`explorer.gpu.library.cusparselt`); empty for dense and decode.
    alg : int
        cuSPARSELt config id, -1 for the library default.
    transpose : bool
        The ``Y^T`` output is copied to row-major by
        :func:`explorer.gpu.cuda.kernels.transpose_rows`.

    Examples
    --------
    >>> Route("sparse", "cr", 20, transpose=True)
    Route(sparse cr alg 20 + transpose)
    >>> DENSE.row_major, DECODE.row_major, DECODE.sparse_weight
    (True, True, True)
    """

    kind: str
    layout: str = ""
    alg: int = -1
    transpose: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("dense", "sparse", "decode"):
            raise ValueError(f"route kind {self.kind!r} unknown; expected dense, sparse or decode")
        if self.kind == "sparse" and self.layout not in ("cc", "cr", "rc", "rr"):
            raise ValueError(f"layout {self.layout!r} unknown; expected cc, cr, rc or rr")
        if self.transpose and self.layout[1:] != "r":
            raise ValueError("only a Y^T output (layout ending in 'r') can be transposed")

    @property
    def row_major(self) -> bool:
        """True if the output comes back as a row-major ``Y`` (not a transposed view)."""
        return self.kind in ("dense", "decode") or self.layout[1] == "c" or self.transpose

    @property
    def sparse_weight(self) -> bool:
        """True if the route reads the 2:4 weight (cuSPARSELt or the decode kernel)."""
        return self.kind != "dense"

    @property
    def label(self) -> str:
        """The route in a few words, as reports show it (``"sparse cr alg 20 + transpose"``)."""
        if self.kind in ("dense", "decode"):
            return self.kind
        alg = "default" if self.alg < 0 else f"alg {self.alg}"
        return f"sparse {self.layout} {alg}{' + transpose' if self.transpose else ''}"

    def __repr__(self) -> str:
        return f"Route({self.label})"


DENSE = Route("dense")
DECODE = Route("decode")


def pick_route(times: Mapping[Route, float], margin: float = SPARSE_MARGIN) -> Route:
    """The route to keep from measured times (milliseconds; ``None`` or NaN: failed).

    Dense is kept unless the fastest route on the 2:4 weight (cuSPARSELt or decode) takes at
    most ``margin`` of its time; without a dense time the fastest route wins.

    Parameters
    ----------
    times : mapping of Route to float
        Each route's measured time in milliseconds (``None`` or NaN where it failed).
    margin : float, default SPARSE_MARGIN
        The largest fraction of dense's time a route on the 2:4 weight may take and be kept.

    Returns
    -------
    Route
        The route to keep.

    Raises
    ------
    ValueError
        No route has a usable time.

    Examples
    --------
    >>> pick_route({DENSE: 1.0, Route("sparse", "cc"): 0.99})
    Route(dense)
    >>> pick_route({DENSE: 1.0, Route("sparse", "cc"): 0.7})
    Route(sparse cc default)
    >>> pick_route({DENSE: 1.0, Route("sparse", "cc"): 2.0, DECODE: 0.66})
    Route(decode)
    """
    ok = {r: t for r, t in times.items() if t is not None and math.isfinite(t) and t > 0}
    if not ok:
        raise ValueError(f"no route has a usable time in {dict(times)!r}")
    sparse = {r: t for r, t in ok.items() if r.sparse_weight}
    dense = ok.get(DENSE)
    if not sparse:
        return DENSE
    best = min(sparse, key=sparse.get)
    if dense is not None and sparse[best] > margin * dense:
        return DENSE
    return best


def nearest_route(tokens: int, decided: Mapping[int, Route]) -> Route | None:
    """The decision of the measured token count nearest to ``tokens`` (on a log scale).

    Parameters
    ----------
    tokens : int
        The token count to decide for.
    decided : mapping of int to Route
        The decisions of the measured token counts.

    Returns
    -------
    Route or None
        The nearest count's route; None when nothing is decided.

    Examples
    --------
    >>> decided = {16: DENSE, 4096: Route("sparse", "cc")}
    >>> nearest_route(32, decided), nearest_route(2048, decided)
    (Route(dense), Route(sparse cc default))
    >>> nearest_route(8, {}) is None
    True
    """
    if not decided:
        return None
    return decided[min(decided, key=lambda n: (abs(math.log2(n) - math.log2(tokens)), -n))]


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES`, else a ``ValueError`` that names them.

    Parameters
    ----------
    mode : str
        The mode to check.

    Returns
    -------
    str
        ``mode``.

    Examples
    --------
    >>> check_mode("eager")
    'eager'
    >>> check_mode("fast")
    Traceback (most recent call last):
    ...
    ValueError: mode 'fast' unknown; expected one of ('auto', 'eager', 'compile', 'graphs'). ...
    """
    if mode not in MODES:
        raise ValueError(
            f"mode {mode!r} unknown; expected one of {MODES}. Hint: 'eager' for notebooks and "
            "torch.compile's default mode, 'graphs' for mode='reduce-overhead' or your own CUDA "
            "graphs, 'auto' to decide at each call."
        )
    return mode


def clock_for(mode: str) -> str:
    """The time a route is chosen by in ``mode``: ``"gpu"`` (graph replay) or ``"wall"``.

    Eager calls and ``torch.compile``'s default mode pay the host's time to issue each call
    (back-to-back calls measure it); under CUDA graphs only the GPU's time counts.

    Parameters
    ----------
    mode : str
        One of :data:`MODES`.

    Returns
    -------
    str
        ``"gpu"`` for ``"graphs"``, else ``"wall"``.

    Examples
    --------
    >>> clock_for("graphs"), clock_for("eager"), clock_for("compile")
    ('gpu', 'wall', 'wall')
    """
    return "gpu" if check_mode(mode) == "graphs" else "wall"


def clocks_for(mode: str) -> tuple[str, ...]:
    """The clocks a model set to ``mode`` runs by: both for ``"auto"``, else :func:`clock_for`'s.

    Parameters
    ----------
    mode : str
        One of :data:`MODES`.

    Returns
    -------
    tuple of str

    Examples
    --------
    >>> clocks_for("auto"), clocks_for("eager"), clocks_for("graphs")
    (('gpu', 'wall'), ('wall',), ('gpu',))
    """
    return ("gpu", "wall") if mode == "auto" else (clock_for(mode),)


def shown_clock(mode: str) -> str:
    """The clock whose decisions a report shows for ``mode``: wall time for ``"auto"``.

    ``"auto"`` decides by both clocks (the GPU one inside a CUDA-graph capture); outside a
    capture, where a model is first run, it takes the wall clock's routes.

    Parameters
    ----------
    mode : str
        One of :data:`MODES`.

    Returns
    -------
    str
        ``"gpu"`` or ``"wall"``.

    Examples
    --------
    >>> shown_clock("auto"), shown_clock("graphs")
    ('wall', 'gpu')
    """
    return "wall" if mode == "auto" else clock_for(mode)


#: The verdicts a layer's dense weight serves in each mode: its clocks' routes, and for the modes
#: a model may be compiled in by default (``"auto"``, ``"compile"``) the compiled model's traced
#: matmul (:meth:`Decision.compiled_dense`).
VERDICTS_BY_MODE = {
    "auto": ("gpu", "wall", "compile"),
    "eager": ("wall",),
    "compile": ("wall", "compile"),
    "graphs": ("gpu",),
}


def dense_needed(mode: str, verdicts) -> bool:
    """Whether a layer run in ``mode`` needs its dense weight kept.

    ``verdicts`` holds, per measured token count, ``{"gpu": bool, "wall": bool, "compile":
    bool}``: whether the GPU clock, the wall clock and a model compiled in the default mode run
    that count dense; the weight is needed where any verdict of the mode says dense. A model
    sparsified for ``"auto"`` may be compiled in the default mode, which runs decode sizes as
    traced dense matmuls (:meth:`Decision.compiled_dense`): without the dense weight it would
    pay the sparse op's host time, so the weight stays even where every clock chose sparse.

    Parameters
    ----------
    mode : str
        One of :data:`MODES`.
    verdicts : iterable of dict
        One ``{verdict: chose dense}`` per measured token count.

    Returns
    -------
    bool
        True to keep the dense weight.

    Examples
    --------
    >>> decode_sizes = [{"gpu": False, "wall": False, "compile": True}]
    >>> dense_needed("auto", decode_sizes), dense_needed("compile", decode_sizes)
    (True, True)
    >>> dense_needed("eager", decode_sizes), dense_needed("graphs", decode_sizes)
    (False, False)
    """
    wanted = VERDICTS_BY_MODE[check_mode(mode)]
    return any(v.get(name, False) for v in verdicts for name in wanted)


#: Token counts up to which a model compiled in ``torch.compile``'s default mode is host-bound
#: (measured on an H100: the Qwen2-like model at 16 tokens took 2.7x its CUDA-graph time), so a
#: layer there runs as a traced dense matmul (:meth:`Decision.compiled_dense`).
COMPILED_HOST_BOUND_UP_TO = 64


@dataclass(frozen=True)
class Decision:
    """The routes measured for one problem, by both clocks, and the route each one picks.

    Attributes
    ----------
    gpu : dict
        ``{Route: ms}`` of CUDA-graph replays: the GPU's time alone.
    wall : dict
        ``{Route: ms}`` of back-to-back eager calls: the host's time to issue each call
        included where it is the longer.

    Examples
    --------
    >>> sparse = Route("sparse", "cc")
    >>> d = Decision({DENSE: 1.0, sparse: 0.7}, {DENSE: 1.0, sparse: 1.3})
    >>> d.route("gpu"), d.route("wall")
    (Route(sparse cc default), Route(dense))
    >>> d
    Decision(gpu: sparse cc default 0.700 ms, wall: dense 1.000 ms)
    """

    gpu: dict
    wall: dict

    def times(self, clock: str) -> dict:
        """``{Route: ms}`` by ``clock`` (``"gpu"`` or ``"wall"``); the other if that is empty.

        Parameters
        ----------
        clock : str
            ``"gpu"`` or ``"wall"``.

        Returns
        -------
        dict
            ``{Route: ms}``.
        """
        first, other = (self.gpu, self.wall) if clock == "gpu" else (self.wall, self.gpu)
        return first or other

    def without(self, kind: str) -> Decision:
        """The same times by both clocks, less those of the routes of ``kind``.

        Parameters
        ----------
        kind : {"dense", "sparse", "decode"}
            The kind whose times are left out (``"decode"`` where the decode weight is freed).
        """
        gpu, wall = ({r: t for r, t in c.items() if r.kind != kind} for c in (self.gpu, self.wall))
        return Decision(gpu, wall)

    def route(self, clock: str) -> Route:
        """The route :func:`pick_route` keeps by ``clock``.

        By the wall clock, a route on the 2:4 weight that is slower than dense on the GPU is
        never a candidate (:meth:`gpu_slower`): its gain would be host time alone, which a
        model's other calls hide, and one layer's wall time swings by 10% on a busy host.

        Parameters
        ----------
        clock : str
            ``"gpu"`` or ``"wall"``.

        Returns
        -------
        Route
            The route kept.

        Examples
        --------
        >>> sparse = Route("sparse", "cc")
        >>> d = Decision({DENSE: 0.006, sparse: 0.012}, {DENSE: 0.0247, sparse: 0.0239})
        >>> d.route("wall")  # 3% faster by the wall clock, twice as slow on the GPU
        Route(dense)
        >>> Decision({DENSE: 0.006, sparse: 0.012}, {DENSE: 0.030, sparse: 0.020}).route("wall")
        Route(dense)
        >>> Decision({DENSE: 0.012, sparse: 0.006}, {DENSE: 0.030, sparse: 0.020}).route("wall")
        Route(sparse cc default)
        """
        times = self.times(clock)
        if clock == "wall" and self.wall:
            times = {r: t for r, t in times.items() if not self.gpu_slower(r)}
        return pick_route(times)

    def gpu_slower(self, route: Route) -> bool:
        """Whether ``route`` reads the 2:4 weight and took longer than dense on the GPU.

        False where either GPU time is missing: a route that could not be captured is judged by the
        wall clock alone.

        Parameters
        ----------
        route : Route
            The route to compare with dense.

        Returns
        -------
        bool
            True where the route reads the 2:4 weight and its GPU time exceeds dense's.

        Examples
        --------
        >>> sparse = Route("sparse", "cc")
        >>> Decision({DENSE: 0.006, sparse: 0.012}, {}).gpu_slower(sparse)
        True
        >>> Decision({DENSE: 0.006}, {}).gpu_slower(sparse), Decision({}, {}).gpu_slower(DENSE)
        (False, False)
        """
        gpu_dense, gpu = self.gpu.get(DENSE), self.gpu.get(route)
        return route.sparse_weight and None not in (gpu_dense, gpu) and gpu > gpu_dense

    def compiled_dense(self, op_ms: float, tokens: int | None = None) -> bool:
        """Whether a compiled model should run this problem as a traced dense matmul.

        The model is compiled in ``torch.compile``'s default mode and runs ``tokens`` rows; the
        alternative is a call to the sparse op.

        The compiled model launches its own matmul for about the host time it spends anyway;
        the sparse op costs ``op_ms`` of host time on top. At decode sizes (``tokens`` up to
        :data:`COMPILED_HOST_BOUND_UP_TO`) the model is host-bound, so that is never won back:
        dense. Where the dense matmul's GPU time is under four times ``op_ms``, a sparse route
        must beat dense by more than ``op_ms``; longer matmuls hide the host: GPU times decide.

        Parameters
        ----------
        op_ms : float
            The sparse op's host time per call, in milliseconds.
        tokens : int, optional
            Rows of the input; at decode sizes the answer is True.

        Returns
        -------
        bool
            True for a traced dense matmul, False for the sparse op.

        Examples
        --------
        >>> sparse = Route("sparse", "cc")
        >>> short = Decision({DENSE: 0.040, sparse: 0.028}, {})
        >>> short.compiled_dense(0.030), short.compiled_dense(0.005)
        (True, False)
        >>> short.compiled_dense(0.005, tokens=16)  # a decode size
        True
        >>> Decision({DENSE: 0.290, sparse: 0.230}, {}).compiled_dense(0.030, 4096)  # prefill
        False
        """
        if tokens is not None and tokens <= COMPILED_HOST_BOUND_UP_TO:
            return True
        times = self.times("gpu")
        dense = times.get(DENSE)
        sparse = [ms for r, ms in times.items() if r.sparse_weight]
        if dense is None or not sparse:
            return dense is not None
        extra = op_ms if dense < 4 * op_ms else 0.0
        return min(sparse) + extra >= dense

    def __repr__(self) -> str:
        parts = []
        for clock in ("gpu", "wall"):
            if getattr(self, clock):
                r = self.route(clock)
                parts.append(f"{clock}: {r.label} {self.times(clock)[r]:.3f} ms")
        return f"Decision({', '.join(parts) or 'nothing measured'})"
