"""How many CPU threads the core's array work may use: never more than the cores that are free.

torch runs element-wise work on as many threads as the machine has cores. Each operation ends
at a barrier where the threads wait for each other, so when another process holds one of the
cores, every operation waits for the scheduler to hand that core back. On a 2-core machine
with one other busy torch process, ``check_pattern`` on an 11008 x 4096 fp16 weight took
1.9-3.4 s on two threads against 0.28-0.37 s with the cap (docs/performance.md). The core's
CPU paths (checks, masks, pruning scores) therefore run inside :func:`fair_cpu_threads`, which
caps torch's threads at the cores no other task is using right now and restores the previous
count afterwards. Element-wise work, top-k and these reductions give the same bits on any
thread count; matrix products and factorisations (BLAS) do not: on this project's 2-core VM
``x.T @ x`` of an 8192 x 576 float32 matrix differs in its last bits between one and two
threads. Work whose result must not depend on other processes (SparseGPT's inverse Hessian,
whose last bits can flip a 2:4 choice) therefore runs inside :func:`steady_cpu_threads`, whose
thread count depends on this machine alone, never on its load.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path

import torch

__all__ = [
    "available_cores",
    "busy_elsewhere",
    "fair_cpu_threads",
    "fair_thread_count",
    "one_cpu_thread",
    "steady_cpu_threads",
]

# torch's grain size: element-wise operations on fewer elements run on the calling thread.
_GRAIN = 32768


@contextlib.contextmanager
def one_cpu_thread(device: torch.device | str = "cpu") -> Iterator[None]:
    """Limit torch to one CPU thread inside the block, then restore the previous count.

    Loops of small operations (a few thousand elements each: SparseGPT's column loop, training
    a tiny MLP) spend more time handing work between threads than computing; on a busy 2-core
    machine one thread was 3-30x faster, and results do not depend on the thread count. Work on
    another device is left alone.

    Parameters
    ----------
    device : torch.device or str, optional
        The device the work runs on; only ``"cpu"`` limits the threads.
    """
    with _capped(device, lambda: 1):
        yield


@contextlib.contextmanager
def fair_cpu_threads(
    device: torch.device | str = "cpu", elements: int | None = None
) -> Iterator[int]:
    """Cap torch's CPU threads at :func:`fair_thread_count` inside the block, then restore them.

    Parameters
    ----------
    device : torch.device or str
        Where the work runs; work on another device is left alone.
    elements : int, optional
        The size of the work. torch runs operations on fewer than 32768 elements on one thread
        anyway, so below that the machine's load is not even looked at.

    Yields
    ------
    int
        The thread count in force inside the block.

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with fair_cpu_threads() as threads:
    ...     1 <= threads <= before
    True
    >>> torch.get_num_threads() == before
    True
    """
    if elements is not None and elements < _GRAIN:
        yield torch.get_num_threads()
        return
    with _capped(device, fair_thread_count) as threads:
        yield threads


@contextlib.contextmanager
def steady_cpu_threads(device: torch.device | str = "cpu") -> Iterator[int]:
    """Cap torch's CPU threads at the cores this process may use, whatever else is running.

    For BLAS work (matrix products, factorisations) whose last bits depend on the thread count:
    inside this block the count is torch's setting capped by :func:`available_cores`, so the
    same call on the same machine gives the same bits however busy the machine is.
    :func:`fair_cpu_threads` would make them depend on the load of the moment.

    Parameters
    ----------
    device : torch.device or str
        Where the work runs; work on another device is left alone.

    Yields
    ------
    int
        The thread count in force inside the block.

    Examples
    --------
    >>> import torch
    >>> with steady_cpu_threads() as threads:
    ...     threads == min(torch.get_num_threads(), available_cores())
    True
    """
    with _capped(device, available_cores) as threads:
        yield threads


@contextlib.contextmanager
def _capped(device, count) -> Iterator[int]:
    threads = torch.get_num_threads()
    if torch.device(device).type != "cpu" or threads == 1:
        yield threads
        return
    wanted = max(1, min(threads, count()))
    if wanted == threads:
        yield threads
        return
    torch.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        torch.set_num_threads(threads)


def fair_thread_count() -> int:
    """The thread count torch uses, capped at the cores free of other runnable tasks (at least 1).

    Examples
    --------
    >>> 1 <= fair_thread_count() <= torch.get_num_threads()
    True
    """
    free = available_cores() - (busy_elsewhere() or 0)
    return max(1, min(torch.get_num_threads(), free))


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup CPU quota.

    Containers (Binder, CI runners) often limit CPU time with a quota while ``os.cpu_count()``
    still reports every core of the host.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def _cgroup_quota() -> float | None:
    """The cgroup's CPU quota in cores (v2 ``cpu.max`` or v1 ``cfs_quota_us``), None if unlimited."""
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if len(text) == 2 and text[0] != "max":
            return int(text[0]) / int(text[1])
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def busy_elsewhere() -> int | None:
    """How many tasks of other processes are runnable right now (Linux), None where unknown.

    ``/proc/loadavg`` counts every runnable thread on the machine at this instant, this
    process's included; this process's own runnable threads (the reader, and torch's workers
    still spinning after the previous operation) are counted first and subtracted. Of two such
    readings the smaller is kept, so that a task that was runnable for an instant does not
    count as busy. Elsewhere the one-minute load average stands in for it.
    """
    readings = []
    for _ in range(2):
        own = _own_runnable_threads()  # first: our workers only ever go to sleep meanwhile
        try:
            running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            try:
                return round(os.getloadavg()[0])
            except (AttributeError, OSError):
                return None
        readings.append(max(0, running - own))
    return min(readings)


def _own_runnable_threads() -> int:
    own = 0
    try:
        tasks = list(Path("/proc/self/task").iterdir())
    except OSError:
        return 1
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        # The state follows the command name, which is in parentheses and may hold spaces.
        if stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "R":
            own += 1
    return max(own, 1)
