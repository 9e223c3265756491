"""How a gated MLP asks for overlapped launches, with stand-in parts (CPU, no GPU needed)."""

from __future__ import annotations

import pytest
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


def _phi3_mlp(hidden_act: str = "silu") -> nn.Module:
    transformers = pytest.importorskip("transformers")
    from transformers.models.phi3.modeling_phi3 import Phi3MLP

    return Phi3MLP(
        transformers.Phi3Config(hidden_size=8, intermediate_size=16, hidden_act=hidden_act)
    )


def test_a_phi3_block_is_known_by_its_stacked_gate_up_and_down_projections():
    assert gated_mlp.gated_mlp_parts(_phi3_mlp()) == ("gate_up_proj", "down_proj")
    assert not gated_mlp.is_gated_mlp(_phi3_mlp())  # (the int4 swap's three-part blocks)


def test_a_llama_block_is_known_by_its_three_projections():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP

    block = LlamaMLP(
        transformers.LlamaConfig(hidden_size=8, intermediate_size=16, num_attention_heads=2)
    )
    assert gated_mlp.gated_mlp_parts(block) == ("gate_proj", "up_proj", "down_proj")


def test_a_stacked_block_of_another_activation_or_shape_is_not_known():
    assert gated_mlp.gated_mlp_parts(_phi3_mlp("gelu_new")) is None
    block = _phi3_mlp()
    block.gate_up_proj = nn.Linear(8, 24, bias=False)  # not twice the down projection's inputs
    assert gated_mlp.gated_mlp_parts(block) is None
    assert gated_mlp.gated_mlp_parts(nn.Sequential(nn.Linear(8, 32), nn.Linear(16, 8))) is None


def test_from_fused_names_both_shapes_when_they_do_not_form_a_block():
    with pytest.raises(ValueError, match=r"gate_up \(24, 8\) and down \(8, 16\)"):
        SparseGatedMLP.from_fused(nn.Linear(8, 24), nn.Linear(16, 8))
