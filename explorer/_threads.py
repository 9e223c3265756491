"""Run small, step-by-step CPU work on one thread."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["one_cpu_thread"]


@contextlib.contextmanager
def one_cpu_thread(device: torch.device | str = "cpu") -> Iterator[None]:
    """Limit torch to one CPU thread inside the block, then restore the previous count.

    Loops of small operations (a few thousand elements each: SparseGPT's column loop, training
    a tiny MLP) spend more time handing work between threads than computing; on a busy 2-core
    machine one thread was 3-30x faster, and results do not depend on the thread count. Work on
    another device is left alone.
    """
    threads = torch.get_num_threads()
    if torch.device(device).type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
