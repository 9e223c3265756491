"""Scratch memory for cuSPARSELt plans, kept out of the memory pools of CUDA-graph captures.

A plan outlives the call that built it, so its workspace must not come from a pool that torch's
CUDA-graph trees own: :func:`plan_workspace` allocates it on a side stream of its own.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["plan_workspace"]

_WORKSPACE_STREAMS: dict[int, torch.cuda.Stream] = {}
_WORKSPACE_THREAD: list[ThreadPoolExecutor] = []
_WORKSPACE_LOCK = threading.Lock()


def plan_workspace(size: int, device: int) -> torch.Tensor | None:
    """A cuSPARSELt plan's scratch memory (None when it needs none), out of CUDA-graph pools.

    A plan outlives the call that built it. Built while torch warms up or records a CUDA graph
    (``torch.compile(mode="reduce-overhead")``), a workspace allocated by the calling thread
    would land in the graph's private pool, alive after the capture but no output of it, which
    torch's CUDA-graph trees refuse: during their warm-up every allocation of the thread goes
    to the pool, whatever the stream. So outside a capture the workspace is allocated by a
    thread of its own, which no pool claims. Inside a capture (a thread may not wait on another
    there), it is taken on a side stream, which ``torch.cuda.graph`` does not route to its pool.
    Only workspaces are ever allocated on that stream, and every plan runs on the stream of its
    caller, so a freed workspace is reused only as another plan's scratch.

    Parameters
    ----------
    size : int
        Bytes the plan asks for.
    device : int
        The CUDA device index.

    Returns
    -------
    torch.Tensor or None
        ``size`` bytes of ``uint8``, or None for a size of 0.
    """
    if size <= 0:
        return None
    if torch.cuda.is_current_stream_capturing():
        return _allocate_on_side_stream(size, device)
    with _WORKSPACE_LOCK:
        if not _WORKSPACE_THREAD:
            _WORKSPACE_THREAD.append(
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="explorer-workspace")
            )
        worker = _WORKSPACE_THREAD[0]
    return worker.submit(_allocate_on_side_stream, size, device).result()


def _allocate_on_side_stream(size: int, device: int) -> torch.Tensor:
    """``size`` bytes on ``device``, allocated while the workspace stream is current."""
    with _WORKSPACE_LOCK:
        stream = _WORKSPACE_STREAMS.get(device)
        if stream is None:
            stream = _WORKSPACE_STREAMS[device] = torch.cuda.Stream(device=device)
    with torch.cuda.stream(stream):
        return torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}")
