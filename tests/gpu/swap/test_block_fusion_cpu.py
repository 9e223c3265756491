"""sparsify's parts that need no GPU: eligibility, block dtypes, putting modules in place (CPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from explorer.gpu.swap.block_fusion import SwapUnit, part_name, set_module
from explorer.gpu.swap.eligibility import block_dtype, eligibility, layer_dtype
from explorer.gpu.swap.whole_model import example_list


def _cuda_linear(out_features, in_features, dtype=torch.float16):
    # a layer that says it is on a GPU; its 2:4 weight is read on the CPU
    zeros = torch.zeros(out_features, in_features, dtype=dtype)
    weight = SimpleNamespace(device=SimpleNamespace(type="cuda"), detach=lambda: zeros, dtype=dtype)
    return SimpleNamespace(weight=weight, in_features=in_features, out_features=out_features)


@pytest.fixture
def an_h100(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100")


def test_eligibility_names_the_device_the_dtype_and_the_shape(an_h100):
    assert "cuSPARSELt needs the model on a CUDA GPU" in eligibility(nn.Linear(64, 64), torch.half)
    assert eligibility(_cuda_linear(64, 64), torch.float16) is None
    assert "has no sparse kernel" in eligibility(_cuda_linear(64, 64), torch.float32)
    why = eligibility(_cuda_linear(64, 40), torch.float16)
    assert "in_features=40" in why and "multiples of 16" in why


def test_a_weight_that_is_not_2to4_is_named_with_the_fix(an_h100):
    layer = _cuda_linear(64, 64)
    ones = torch.ones(64, 64, dtype=torch.float16)
    layer.weight.detach = lambda: ones
    assert "prune it first, or pass prune=True" in eligibility(layer, torch.float16)


def test_layer_and_block_dtypes(an_h100):
    assert layer_dtype(nn.Linear(4, 4), None) is torch.float16  # float32 runs in float16
    assert layer_dtype(nn.Linear(4, 4).bfloat16(), None) is torch.bfloat16
    assert layer_dtype(nn.Linear(4, 4).bfloat16(), torch.float16) is torch.float16
    q, k, v = (_cuda_linear(64, 64, torch.bfloat16) for _ in range(3))
    assert block_dtype([q, k, v], None) is torch.bfloat16
    k.weight.dtype = torch.float16
    assert block_dtype([q, k, v], None) is None  # two dtypes: layer by layer instead
    assert block_dtype([q, k, v], torch.float16) is torch.float16  # one asked for
    assert block_dtype([q, _cuda_linear(64, 40), v], torch.float16) is None  # one cannot run


def test_set_module_and_part_name_reach_nested_places():
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    block = nn.Sequential(nn.Linear(2, 2))
    set_module(model, "0.1", block)
    assert model[0][1] is block
    assert part_name(model, block, 7) == "0.1"
    assert part_name(model, nn.Linear(2, 2), 7) == "7"
    unit = SwapUnit("0.1", block, {"0.1": nn.ReLU()}, {})
    assert unit.undo is None and unit.new is block


def test_example_inputs_become_a_list():
    ids = {"input_ids": torch.zeros(1, 4, dtype=torch.long)}
    assert example_list(None) == []
    assert example_list(ids) == [ids]
    assert example_list([ids, ids]) == [ids, ids]
    assert example_list((torch.zeros(2),))[0][0].shape == (2,)  # a tuple is one input's arguments
