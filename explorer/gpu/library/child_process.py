"""The explorer's algorithm-search children: their output read with deadlines.

cuSPARSELt's search tries every config of a problem in a child process (a config can crash
the process, or hang on the GPU), and the parent reads what the child reports line by line.
:func:`child_lines` hands those lines over through a reader thread, so a child that hangs can
never block the caller: it is ended once silent too long, and the caller skips the config it
was in.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["CHILD_SILENCE_S", "CHILD_START_S", "SEARCH_BUDGET_S", "child_lines"]

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
