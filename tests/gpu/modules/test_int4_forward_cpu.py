"""Which row counts a default-mode compiled int4 layer runs on the 2:4 kernel (CPU, no GPU needed).

The routes' times are given, not measured: a :class:`RouteBook` of its own holds them, and the op's
host time is set, so each verdict follows from the rule alone.
"""

from __future__ import annotations

import pytest
import torch

from explorer.gpu.cuda import ops
from explorer.gpu.modules import int4_forward
from explorer.gpu.modules.int4_forward import Int4Forward
from explorer.gpu.routes.dispatch import DECODE, DENSE, Decision
from explorer.gpu.routes.route_timing import RouteBook

PROBLEM = ("int4", 4096, 4096, 128, torch.bfloat16, False, 0, True, True)


class _Layer(Int4Forward):
    """The route state of an ``Int4Linear`` without its weights (they need a GPU)."""

    in_features = out_features = 4096

    def __init__(self, mode: str = "auto", dequantizes: bool = False) -> None:
        self.mode = mode
        self.decode_refusal = None
        self._routes, self._fast = {}, {}
        self._compiled_decode = ()
        self._tiled, self._int4pack = True, (object() if dequantizes else None)

    def _problem(self) -> tuple:
        return PROBLEM


@pytest.fixture
def book(monkeypatch):
    """A fresh book of decisions, no capture under way, and an op costing 10 us of host time."""
    fresh = RouteBook()
    monkeypatch.setattr(int4_forward, "BOOK", fresh)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(ops, "call_overhead_us", lambda measure=False: 10.0)
    return fresh


def _decision(dense_ms: float, decode_ms: float) -> Decision:
    times = {DENSE: dense_ms, DECODE: decode_ms}
    return Decision(times, dict(times))


def test_a_count_where_the_kernel_beats_torchs_int4_by_more_than_the_op_runs_the_op(book):
    book.record(PROBLEM, 16, _decision(0.070, 0.025))  # 14336 x 4096 at 16 tokens, H100
    book.record(PROBLEM, 1, _decision(0.0070, 0.0058))  # 4096 x 4096 at 1 token: 1.2 us gained
    layer = _Layer()
    assert layer.route(16, "wall") == DECODE and layer.route(1, "wall") == DECODE
    assert layer.compiled_decode() == (16,)
    assert not layer.traces_dense(16)  # the op, on the 2:4 kernel
    assert layer.traces_dense(1)  # the gain is less than the op's host time: torch's int4, traced
    assert layer.traces_dense(8)  # never measured: traced, as int4 dense runs it


def test_a_later_decision_takes_a_count_back(book):
    layer = _Layer()
    book.record(PROBLEM, 16, _decision(0.070, 0.025))
    layer.route(16, "gpu")
    assert layer.compiled_decode() == (16,)
    book.record(PROBLEM, 16, _decision(0.0225, 0.0200))  # 2.5 us gained, 10 us of op
    layer.set_mode("auto")  # forgets the routes: the next call reads the book again
    layer.route(16, "gpu")
    assert layer.compiled_decode() == ()
    assert layer.traces_dense(16)


def test_a_long_product_hides_the_ops_host_time(book):
    """At four times the op's host time or more, GPU times alone decide (``compiled_dense``)."""
    book.record(PROBLEM, 64, _decision(0.140, 0.139))
    layer = _Layer()
    layer.route(64, "wall")
    assert layer.compiled_decode() == (64,)


def test_nothing_is_decided_inside_a_capture(book, monkeypatch):
    book.record(PROBLEM, 16, _decision(0.070, 0.025))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    layer = _Layer()
    assert layer.route(16, "gpu") == DECODE
    assert layer.compiled_decode() == ()  # the op's host time is measured outside a capture


def test_graphs_mode_symbolic_sizes_and_dequantized_counts_take_the_op(book):
    assert not _Layer(mode="graphs").traces_dense(16)
    assert not _Layer().traces_dense(16.0)  # not an int: a size unknown while tracing
    assert not _Layer(dequantizes=True).traces_dense(65)
    assert _Layer().traces_dense(65)  # the 16-bit dequantized weight: traced F.linear
