"""The explorer's algorithm-search children: their output read with deadlines.

cuSPARSELt's search tries every config of a problem in a child process (a config can crash
the process, or hang on the GPU), and the parent reads what the child reports line by line.
:func:`child_lines` hands those lines over through a reader thread, so a child that hangs can
never block the caller: it is ended once silent too long, and the caller skips the config it
was in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = [
    "CHILD_SILENCE_S",
    "CHILD_START_S",
    "MIN_SHARE_S",
    "SEARCH_BUDGET_S",
    "STOP_GRACE_S",
    "child_lines",
    "search_share",
    "search_stop",
]

#: Seconds a search child may take to start (import torch, set up CUDA) before its first line.
CHILD_START_S = 180.0
#: Seconds a search child may stay silent once started: one config's check and timing take
#: milliseconds, so a child this quiet is hung in a config and is ended (that config skipped).
CHILD_SILENCE_S = 20.0


#: Seconds one search problem (a shape, dtype, layout and token count) may take, child start
#: excluded: when spent, the search keeps the best config found so far. A search on a large
#: shape tries every config in a few seconds; crashing configs on small shapes, each costing a
#: child restart, could otherwise hold a model's ``sparsify`` for minutes.
SEARCH_BUDGET_S = 15.0

#: Seconds every problem of a bounded batch gets at least (a few configs, the likeliest).
MIN_SHARE_S = 1.0

#: Seconds past a problem's stop time before its parent ends the child: a child stops a problem
#: itself once its time is spent, after the config in hand (a plan, a check and a few timed
#: runs), and goes on to the next problem without a restart.
STOP_GRACE_S = 5.0


def search_share(left: float, work: list[int]) -> float:
    """Seconds the first of ``work`` (the products left, in multiply-adds) may search for.

    Its part of the time ``left`` in proportion to its work, at least :data:`MIN_SHARE_S`, and
    never so much that a later problem is left less than that: a 4096-token product, whose
    config matters most, gets more time than a 16-token one.

    Parameters
    ----------
    left : float
        Seconds left to the batch (``inf`` for no bound).
    work : list of int
        The multiply-adds of this problem and of every later one.

    Returns
    -------
    float
        The seconds.

    Examples
    --------
    >>> search_share(40.0, [3, 1]), search_share(40.0, [1, 3]), search_share(3.0, [4096, 16, 16])
    (30.0, 10.0, 1.0)
    >>> search_share(float("inf"), [1, 2])
    inf
    """
    if math.isinf(left):
        return left
    proportional = left * work[0] / max(sum(work), 1)
    return max(MIN_SHARE_S, min(proportional, left - MIN_SHARE_S * (len(work) - 1)))


def search_stop(
    now: float, batch_end: float | None, work: list[int], cap: float | None = None
) -> float:
    """When the first of ``work`` stops searching: ``now`` plus its share, capped.

    The parent and the child of a batch search each compute it, with their own clock (the
    parent's deadline adds :data:`STOP_GRACE_S`), so a child stops a problem by itself.

    Parameters
    ----------
    now : float
        The time the problem starts, on the clock ``batch_end`` is given in.
    batch_end : float or None
        When the whole batch ends; None for no bound beyond :data:`SEARCH_BUDGET_S` a problem.
    work : list of int
        The multiply-adds of this problem and of every later one.
    cap : float, optional
        Seconds one problem may take at most; default :data:`SEARCH_BUDGET_S`.

    Returns
    -------
    float
        The time, on the same clock.

    Examples
    --------
    >>> search_stop(100.0, 140.0, [3, 1]), search_stop(100.0, None, [3, 1])
    (115.0, 115.0)
    >>> search_stop(100.0, 110.0, [1, 3])
    102.5
    """
    left = math.inf if batch_end is None else batch_end - now
    return now + min(SEARCH_BUDGET_S if cap is None else cap, search_share(left, work))


def child_lines(
    proc,
    start_s: float = CHILD_START_S,
    silence_s: float = CHILD_SILENCE_S,
    deadline: Callable[[], float] | None = None,
):
    r"""The lines a child process writes, ending it if it stays silent too long.

    A reader thread hands the lines over, so a child hung inside a library call can never
    block the caller: after ``start_s`` seconds without a first line, or ``silence_s`` without
    a next one, the child is killed and the lines stop (its exit code says it did not finish).
    ``deadline()``, where given, is read before each wait: a :func:`time.monotonic` time past
    which the child is killed too (the caller can move it, e.g. per problem).

    Parameters
    ----------
    proc : subprocess.Popen
        The child, started with ``stdout=subprocess.PIPE`` in text mode.
    start_s : float, default CHILD_START_S
        Seconds to wait for the first line.
    silence_s : float, default CHILD_SILENCE_S
        Seconds to wait for each next line.
    deadline : callable, optional
        Returns a :func:`time.monotonic` time past which the child is killed.

    Yields
    ------
    str
        Each line, with its newline.

    Examples
    --------
    >>> import subprocess, sys
    >>> proc = subprocess.Popen(
    ...     [sys.executable, "-c", "import time; print('a', flush=True); time.sleep(30)"],
    ...     stdout=subprocess.PIPE, text=True)
    >>> list(child_lines(proc, 20.0, 0.5)), proc.wait() != 0
    (['a\n'], True)
    """
    import queue
    import threading

    lines: queue.Queue = queue.Queue()

    def read() -> None:
        with proc.stdout:  # closed by its only reader, once the child has closed its end
            for line in proc.stdout:
                lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True, name="search-child-reader").start()
    wait = start_s
    while True:
        if deadline is not None:
            left = deadline() - time.monotonic()
            if left <= 0:
                proc.kill()
                return
            wait = min(wait, left)
        try:
            line = lines.get(timeout=wait)
        except queue.Empty:
            proc.kill()
            return
        if line is None:
            return
        wait = silence_s
        yield line
