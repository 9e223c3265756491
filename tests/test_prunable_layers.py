import pytest
import torch
from torch import nn

from explorer import layers, make_mask
from explorer.prunable_layers import default_filter


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.blocks = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 16)])
        self.head = nn.Linear(16, 10, bias=False)
        self.norm = nn.LayerNorm(16)


def test_lists_prunable_layers_in_order():
    table = layers(Tiny())
    assert table.names == ["conv", "blocks.0", "blocks.1", "head"]
    conv, first = table["conv"], table["blocks.0"]
    assert conv.kind == "Conv2d" and not conv.accelerated
    assert conv.shape == (8, 3, 3, 3) and conv.matrix_shape == (8, 27)
    assert conv.valid_24 is None  # 27 inputs: no groups of 4
    assert first.accelerated and first.matrix_shape == (32, 16) and first.params == 32 * 16 + 32
    assert first.dtype == torch.float32 and first.valid_24 is False
    assert table["head"].params == 160
    assert table.params == sum(r.params for r in table)
    assert [r.name for r in table.filter(default_filter)] == ["blocks.0", "blocks.1", "head"]
    assert table[0].name == "conv" and len(table) == 4
    assert "4 layers" in repr(table) and "Linear 32x16" in repr(first)
    assert "<table" in table._repr_html_()
    assert table.to_records()[1]["dtype"] == "float32"


def test_validity_follows_pruning():
    model = Tiny()
    with torch.no_grad():
        w = model.blocks[0].weight
        w.mul_(make_mask(w))
    table = layers(model)
    assert table["blocks.0"].valid_24 is True
    assert table["blocks.0"].density == pytest.approx(0.5)


def test_unknown_layer_name_suggests_names():
    with pytest.raises(KeyError, match=r"blocks\.0"):
        layers(Tiny())["blocks.9"]


def test_meta_model_is_listed_without_values():
    with torch.device("meta"):
        model = nn.Linear(16, 16)
    info = layers(model)[0]
    assert info.valid_24 is None and info.density is None


def test_bad_models():
    with pytest.raises(ValueError, match="no prunable layers"):
        layers(nn.Sequential(nn.ReLU(), nn.LayerNorm(4)))
    with pytest.raises(TypeError, match="check_pattern"):
        layers(torch.ones(4, 4))


def test_each_row_carries_its_pattern_check():
    model = Tiny()
    with torch.no_grad():
        model.blocks[1].weight.mul_(make_mask(model.blocks[1].weight))
    table = layers(model)
    assert table["conv"].pattern is None  # 27 inputs: no groups of 4
    first, second = table["blocks.0"].pattern, table["blocks.1"].pattern
    assert first.pattern.name == "2:4" and not first.valid and first.groups == 32 * 16 // 4
    assert second.valid and table["blocks.1"].valid_24
    assert table.filter(lambda mod, fqn: fqn == "blocks.0")["blocks.0"].pattern is first
