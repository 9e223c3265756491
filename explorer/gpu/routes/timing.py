"""Timing helpers: CUDA-event medians, CUDA-graph replay and host cost per call."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

__all__ = [
    "call_s",
    "cold_graph_ms",
    "eager_ms",
    "graph_ms",
    "host_us",
    "interleaved_ms",
    "interleaved_runs",
    "paired_ratio",
    "round_order",
    "rounds_within",
]

SLOW_S = 0.005  # calls slower than this on the host are timed with fewer repetitions


def call_s(fn: Callable[[], object]) -> float:
    """Wall time of one synchronized call (seconds), after one warm-up call.

    Parameters
    ----------
    fn : callable
        The call, without arguments.

    Returns
    -------
    float
        Seconds.
    """
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def eager_ms(fn: Callable[[], object], iters: int = 20, reps: int = 7, warmup: int = 5) -> float:
    """Median over ``reps`` of the CUDA-event time of ``iters`` back-to-back calls, per call.

    Back-to-back calls include whatever host time the device waits for, so a host-bound path
    shows its real per-call cost.

    Parameters
    ----------
    fn : callable
        The call, without arguments.
    iters : int, default 20
        Back-to-back calls per repetition.
    reps : int, default 7
        Timed repetitions.
    warmup : int, default 5
        Untimed calls first.

    Returns
    -------
    float
        Milliseconds per call.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / iters)
    return statistics.median(times)


def graph_ms(fn: Callable[[], object], iters: int = 20, reps: int = 7) -> float:
    """Median per-call time of ``iters`` calls captured in one CUDA graph and replayed.

    Parameters
    ----------
    fn : callable
        The call, without arguments; it must be capturable.
    iters : int, default 20
        Calls captured in the graph.
    reps : int, default 7
        Timed replays.

    Returns
    -------
    float
        Milliseconds per call.
    """
    g = _captured(fn, iters)
    times = [_replay_ms(g) / iters for _ in range(reps)]
    del g
    return statistics.median(times)


def cold_graph_ms(
    fn: Callable[[], object], iters: int = 10, reps: int = 5, evict_bytes: int | None = None
) -> float:
    """Median per-call CUDA-graph time of ``fn`` when its operands are not in L2 when it starts.

    A model reads each layer's weight once per step and reads far more than the L2 holds
    between two reads of it, so a small product in a model finds its weight in memory, not in
    L2. Timing one call over and over keeps a weight of up to the L2's size there instead, and
    favours whichever route gains least from reading fewer bytes (cuBLAS reading the dense
    weight, against a 2:4 kernel reading 9/16 of it). Here every call follows a read of
    ``evict_bytes`` of another buffer; the graph of those reads alone is replayed beside it and
    its time taken off (per replay, median of the differences).

    Parameters
    ----------
    fn : callable
        The call, without arguments; it must be capturable.
    iters : int, default 10
        Calls captured in the graph.
    reps : int, default 5
        Timed replays of each graph.
    evict_bytes : int, optional
        Bytes read before each call; by default twice the current device's L2.

    Returns
    -------
    float
        Milliseconds per call, at least 1e-4 (the difference of two medians can come out lower).
    """
    device = torch.cuda.current_device()
    if evict_bytes is None:
        evict_bytes = 2 * torch.cuda.get_device_properties(device).L2_cache_size
    scrub = torch.zeros(max(1, evict_bytes // 4), dtype=torch.float32, device=device)

    def evict() -> None:
        torch.amax(scrub)

    def both() -> None:
        evict()
        fn()

    graphs = [_captured(both, iters), _captured(evict, iters)]
    diffs = []
    for _ in range(reps):
        with_fn, alone = (_replay_ms(g) for g in graphs)
        diffs.append((with_fn - alone) / iters)
    del graphs
    return max(statistics.median(diffs), 1e-4)


def _replay_ms(g: torch.cuda.CUDAGraph) -> float:
    """Milliseconds of one replay of ``g``, between CUDA events on the current stream."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def _captured(fn: Callable[[], object], iters: int) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``iters`` calls of ``fn`` (after warm-up calls on a side stream)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(iters):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def host_us(fn: Callable[[], object], iters: int = 200) -> float:
    """Host time to issue one call (microseconds), with the GPU held busy so no call waits for it.

    The calls are issued in batches of :data:`HELD_BATCH`, each behind a GPU sleep longer than
    the batch: the GPU is busy throughout, so each call returns once its launches are queued,
    however long its kernels run. Without the sleep, a call whose GPU time is the longer (a
    block of three products at 16 tokens, on a fast host) fills the launch queue and the loop
    measures the GPU instead. A call that waits for the GPU itself (a synchronization) counts
    its wait.

    Parameters
    ----------
    fn : callable
        The call, without arguments.
    iters : int, default 200
        Calls timed.

    Returns
    -------
    float
        Microseconds per call.
    """
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    bound_s = time.perf_counter() - t0  # one call, host and GPU: more than its host time
    rate = _sleep_cycles_per_s()
    issued_s, done = 0.0, 0
    while done < iters:
        n = min(HELD_BATCH, iters - done)
        torch.cuda._sleep(int(rate * (2 * n * bound_s + 1e-3)))
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        issued_s += time.perf_counter() - t0
        torch.cuda.synchronize()
        done += n
    return issued_s / iters * 1e6


#: Calls issued behind one GPU sleep in :func:`host_us`: few enough launches that CUDA's queue
#: of pending work (about a thousand) does not fill.
HELD_BATCH = 32

_SLEEP_RATE: dict[int, float] = {}


def _sleep_cycles_per_s() -> float:
    """Cycles of ``torch.cuda._sleep`` per second on the current GPU (measured once)."""
    dev = torch.cuda.current_device()
    if dev not in _SLEEP_RATE:
        cycles = 20_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles // 10)  # warm
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _SLEEP_RATE[dev] = cycles / (start.elapsed_time(end) / 1e3)
    return _SLEEP_RATE[dev]


def round_order(names: list[str], round_index: int) -> list[str]:
    """The order the callables named ``names`` run in, in round ``round_index`` (from 0).

    Each round starts one name further on, so that over the rounds every callable takes every
    place in turn.

    Parameters
    ----------
    names : list of str
        The callables' names.
    round_index : int
        The round, from 0.

    Returns
    -------
    list of str
        ``names`` rotated by ``round_index``.

    Examples
    --------
    >>> [round_order(["dense", "sparse"], r) for r in range(3)]
    [['dense', 'sparse'], ['sparse', 'dense'], ['dense', 'sparse']]
    >>> round_order(["a", "b", "c"], 4)
    ['b', 'c', 'a']
    >>> round_order([], 3)
    []
    """
    if not names:
        return []
    start = round_index % len(names)
    return names[start:] + names[:start]


def interleaved_runs(
    fns: dict[str, Callable[[], object]],
    rounds: int = 7,
    iters: int = 5,
    warmup: int = 3,
    setup: dict[str, Callable[[], object]] | None = None,
    lead_in: int = 0,
) -> dict[str, list[float]]:
    """Per-call times of several callables measured side by side.

    In each of ``rounds`` rounds every callable runs ``iters`` back-to-back calls between CUDA
    events, in turn. A host whose speed drifts (other work on the machine, frequency changes) then
    weighs on every callable alike, which timing one after the other cannot promise; the ratio of
    two callables' times in the same round is the paired comparison (see :func:`paired_ratio`).
    Each round starts one callable further on (:func:`round_order`), so none is always the first
    after a synchronization: a host-bound model's time depends on its place in the round.
    ``setup[name]()``, where given, runs before that callable's warm-up and before each of its
    rounds, outside the timed calls (e.g. swapping modules into the model it calls).

    ``lead_in`` untimed calls run in each turn just before its first timed call, without a
    synchronization between them: the timed calls then run as the steps of a loop do, the first
    one's host time hidden behind the lead-in's GPU work. Without them the first timed call starts
    on an idle GPU and its whole host time is counted; for a compiled model that time includes
    Dynamo's search of its cache, which in a process holding several compiled variants of one
    model class first rejects the entries of the variant timed just before (the entry last used is
    checked first). A process that runs one compiled model pays none of that, so side-by-side
    timings of compiled variants give each turn a lead-in.

    Parameters
    ----------
    fns : dict of str to callable
        The calls, without arguments, by name.
    rounds : int, default 7
        Rounds timed.
    iters : int, default 5
        Back-to-back calls per callable and round.
    warmup : int, default 3
        Untimed calls of each callable first.
    setup : dict of str to callable, optional
        Run before a callable's warm-up and rounds, untimed.
    lead_in : int, default 0
        Untimed calls in each turn, right before the timed ones.

    Returns
    -------
    dict
        ``{name: [ms per call in each round]}``.

    Examples
    --------
    >>> import torch
    >>> x = torch.randn(256, 256, device="cuda")  # doctest: +GPU
    >>> runs = interleaved_runs({"mm": lambda: x @ x, "add": lambda: x + x}, rounds=3)
    >>> [len(runs[k]) for k in sorted(runs)]
    [3, 3]
    """
    setup = setup or {}
    for name, fn in fns.items():
        if name in setup:
            setup[name]()
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds):
        for name in round_order(list(fns), r):
            fn = fns[name]
            if name in setup:
                setup[name]()
            for _ in range(lead_in):
                fn()
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters):
                fn()
            b.record()
            b.synchronize()
            times[name].append(a.elapsed_time(b) / iters)
    return times


def rounds_within(
    budget_s: float, call_ms: float, calls_per_round: int, least: int, most: int
) -> int:
    """Rounds of a side-by-side timing that fit a time budget, within bounds.

    A host-bound call's time scatters by a few percent from round to round, so short calls get
    more rounds; a call of unknown time (not finite, or not positive) gets ``least``.

    Parameters
    ----------
    budget_s : float
        Seconds all the rounds may take.
    call_ms : float
        One call's time in milliseconds.
    calls_per_round : int
        Calls one round makes (timed, warm-up and lead-in, of every callable).
    least, most : int
        Bounds on the rounds.

    Returns
    -------
    int
        The number of rounds.

    Examples
    --------
    >>> rounds_within(1.5, 5.0, 8, 9, 45), rounds_within(1.5, 0.1, 8, 9, 45)
    (37, 45)
    >>> rounds_within(1.5, float("nan"), 8, 9, 45)
    9
    """
    if not math.isfinite(call_ms) or call_ms <= 0:
        return least
    fits = int(budget_s * 1e3 / (calls_per_round * call_ms))
    return max(least, min(most, fits))


def paired_ratio(base: list[float], other: list[float]) -> float:
    """The median over rounds of ``base / other``, each pair taken in the same round.

    Parameters
    ----------
    base, other : list of float
        Times per round, the same number of rounds.

    Returns
    -------
    float
        The median ratio.

    Examples
    --------
    >>> paired_ratio([10.0, 20.0, 10.0], [5.0, 20.0, 8.0])
    1.25
    """
    return statistics.median(b / o for b, o in zip(base, other, strict=True))


def interleaved_ms(
    fns: dict[str, Callable[[], object]], rounds: int = 7, iters: int = 5, warmup: int = 3
) -> dict[str, float]:
    """Medians of :func:`interleaved_runs`: each callable's per-call time (milliseconds).

    Parameters
    ----------
    fns : dict of str to callable
        The calls, without arguments, by name.
    rounds : int, default 7
        Rounds timed.
    iters : int, default 5
        Back-to-back calls per callable and round.
    warmup : int, default 3
        Untimed calls of each callable first.

    Returns
    -------
    dict of str to float
        ``{name: ms per call}``.

    Examples
    --------
    >>> import torch
    >>> x = torch.randn(256, 256, device="cuda")  # doctest: +GPU
    >>> sorted(interleaved_ms({"mm": lambda: x @ x, "add": lambda: x + x}))
    ['add', 'mm']
    """
    runs = interleaved_runs(fns, rounds, iters, warmup)
    return {name: statistics.median(ts) for name, ts in runs.items()}
