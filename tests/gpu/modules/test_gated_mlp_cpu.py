"""How a gated MLP asks for overlapped launches, with stand-in parts (CPU, no GPU needed)."""

from __future__ import annotations

import torch
from torch import nn

from explorer.gpu.modules import gated_mlp
from explorer.gpu.modules.gated_mlp import SparseGatedMLP
from explorer.gpu.modules.int4_forward import Int4Forward


class _Part(nn.Module):
    """A product's shape and output layout, as the block reads them."""

    output = "rows"

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features


class _Int4Part(Int4Forward, _Part):
    """An int4 part: the route state's overlap switch, no weights."""

    def __init__(self, in_features: int, out_features: int) -> None:
        _Part.__init__(self, in_features, out_features)
        self._calls, self._fast = {}, {}


class _Call:
    def fits(self, gu) -> bool:
        return True

    def __call__(self, gu):
        return gu


class _CudaRows:
    """Stands in for a CUDA ``[rows, 2 * hidden]`` tensor: what ``_swiglu`` reads of it."""

    shape, dtype, is_cuda = (1, 16), torch.bfloat16, True


def _swiglu_overlap(block, monkeypatch) -> bool:
    asked = []
    monkeypatch.setattr(
        gated_mlp, "_silu_call", lambda gu, h, overlap: asked.append(overlap) or _Call()
    )
    block._swiglu(_CudaRows())
    return asked[0]


def test_int4_parts_launch_the_down_projection_and_the_swiglu_kernel_overlapped(monkeypatch):
    block = SparseGatedMLP(_Int4Part(4, 16), _Int4Part(8, 4))
    assert block.down.overlapped_launch and not block.gate_up.overlapped_launch
    assert _swiglu_overlap(block, monkeypatch)


def test_other_parts_launch_in_order(monkeypatch):
    block = SparseGatedMLP(_Part(4, 16), _Part(8, 4))
    assert not _swiglu_overlap(block, monkeypatch)
