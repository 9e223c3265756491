"""Which row counts a compiled int4 layer traces as torch's int4 kernel (CPU, no GPU needed).

The routes' times are given, not measured: a :class:`RouteBook` of its own holds them, so each
verdict follows from the rule alone.
"""

from __future__ import annotations

import pytest
import torch

from explorer.gpu.modules import int4_forward
from explorer.gpu.modules.int4_forward import DECODE_MAX_TOKENS, Int4Forward
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
        self._tiled, self._int4pack = True, (object() if dequantizes else None)

    def _problem(self) -> tuple:
        return PROBLEM


@pytest.fixture
def book(monkeypatch):
    """A fresh book of decisions."""
    fresh = RouteBook()
    monkeypatch.setattr(int4_forward, "BOOK", fresh)
    return fresh


@pytest.mark.parametrize("mode", ["auto", "eager", "compile"])
def test_default_compile_traces_torchs_int4_even_where_the_2_4_kernel_is_faster(book, mode):
    """A compiled decode step is host-bound: the op's host time would cost more than it saves."""
    times = {DENSE: 0.070, DECODE: 0.025}  # 14336 x 4096 at 16 tokens on an H100
    book.record(PROBLEM, 16, Decision(times, dict(times)))
    layer = _Layer(mode)
    assert layer.route(16, "wall") == DECODE and layer.route(16, "gpu") == DECODE  # eager: 2:4
    assert all(layer.traces_dense(n) for n in (1, 16, DECODE_MAX_TOKENS))


def test_graphs_mode_symbolic_sizes_and_dequantized_counts_take_the_op():
    assert not _Layer(mode="graphs").traces_dense(16)  # CUDA graphs: the GPU clock's route
    assert not _Layer().traces_dense(16.0)  # not an int: a size unknown while tracing
    assert not _Layer(dequantizes=True).traces_dense(DECODE_MAX_TOKENS + 1)  # one opaque kernel
    assert _Layer().traces_dense(DECODE_MAX_TOKENS + 1)  # the 16-bit dequantized weight: F.linear


def test_asking_for_overlapped_launches_sets_the_calls_up_again():
    layer = _Layer()
    layer._calls = {1: "a launch made in order"}
    layer._fast[("x", 0)] = "its remembered call"
    assert not layer.overlapped_launch  # in order unless asked
    layer.set_overlapped_launch(True)
    assert layer.overlapped_launch and layer._calls == {} and layer._fast == {}
    layer.set_overlapped_launch(False)
    assert not layer.overlapped_launch
