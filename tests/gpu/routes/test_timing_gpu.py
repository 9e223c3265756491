"""GPU timing helpers on a real GPU: what they run and what they return, never how fast."""

from __future__ import annotations

import math

import pytest
import torch

from explorer.gpu.routes.route_timing import time_both_clocks
from explorer.gpu.routes.timing import cold_graph_ms, graph_ms

pytestmark = pytest.mark.gpu


def _product():
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(8, 2048, device="cuda", dtype=torch.bfloat16)
    traced = []

    def call():
        traced.append(1)
        torch.matmul(x, w.t(), out=y)

    return x, w, y, call, traced


def test_cold_graph_ms_replays_the_call_and_returns_a_time():
    x, w, y, call, traced = _product()
    ms = cold_graph_ms(call, iters=4, reps=3)
    assert math.isfinite(ms) and ms >= 1e-4
    assert len(traced) == 3 + 4  # three warm-up calls, then one capture of four
    torch.testing.assert_close(y, x @ w.t())


def test_cold_graph_ms_takes_a_small_eviction_read():
    *_, call, _ = _product()
    assert cold_graph_ms(call, iters=2, reps=2, evict_bytes=1 << 20) >= 1e-4


def test_time_both_clocks_cold_gives_both_clocks():
    *_, call, _ = _product()
    gpu, wall = time_both_clocks(call, cold=True)
    assert gpu is not None and gpu > 0 and wall > 0
    assert graph_ms(call, iters=2, reps=2) > 0


def test_host_us_issues_every_call_in_held_batches_and_leaves_no_work_behind():
    from explorer.gpu.routes.timing import HELD_BATCH, host_us

    x, w, y, call, traced = _product()
    us = host_us(call, iters=HELD_BATCH + 3)  # one full batch and one short one
    assert math.isfinite(us) and us > 0
    assert len(traced) == 5 + 1 + HELD_BATCH + 3  # warm-up, the bound call, the timed calls
    assert torch.cuda.current_stream().query()  # every sleep and call finished before return
    torch.testing.assert_close(y, x @ w.t())
