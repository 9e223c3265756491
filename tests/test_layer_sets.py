"""One resolver of named layer sets, shared by the dashboard and a sweep grid."""

from __future__ import annotations

import pytest
from torch import nn

from explorer.layer_sets import LAYER_SETS, resolve_layer_set
from explorer.sweeps.grid import SweepConfig
from explorer.sweeps.loading import layer_filter

NAMES = ["bert.layer.0.attention.query", "bert.layer.0.intermediate.dense", "mlp.fc1", "head"]


def test_named_sets():
    assert resolve_layer_set("every", NAMES) == tuple(NAMES)
    assert resolve_layer_set("all", NAMES, prunable=["head", "mlp.fc1"]) == ("mlp.fc1", "head")
    assert resolve_layer_set("fast", NAMES, fast={"head"}) == ("head",)
    assert resolve_layer_set("mlp", NAMES) == tuple(NAMES[1:3])
    assert resolve_layer_set("mlp", ["Block.FFN.w1"]) == ("Block.FFN.w1",)  # any case
    assert set(LAYER_SETS) == {"all", "every", "fast", "mlp"}


def test_globs_on_fully_qualified_names():
    assert resolve_layer_set("bert.*.query | head", NAMES) == (NAMES[0], "head")
    assert resolve_layer_set("*.dense", NAMES) == (NAMES[1],)


@pytest.mark.parametrize("bad", ["fats", "nothing.*", " "])
def test_a_set_that_holds_nothing_is_a_one_line_error(bad):
    with pytest.raises(ValueError) as info:
        resolve_layer_set(bad, NAMES)
    message = str(info.value)
    assert "\n" not in message and repr(bad.strip()) in message
    assert "all, every, fast, mlp" in message and "encoder.*.intermediate*" in message


def test_fast_needs_the_verdicts():
    with pytest.raises(ValueError, match="needs the doctor's verdicts"):
        resolve_layer_set("fast", NAMES)


def test_the_grid_filter_resolves_the_same_sets():
    model = nn.Sequential()
    model.add_module("mlp", nn.Sequential(nn.Linear(4096, 4096), nn.Linear(4, 4)))
    model.add_module("head", nn.Linear(4, 4))
    names = ["mlp.0", "mlp.1", "head"]

    def picked(layer_set):
        f = layer_filter(layer_set, model=model, tokens=4096)
        return [n for n in names if f(model.get_submodule(n), n)]

    assert picked("mlp") == ["mlp.0", "mlp.1"]
    assert picked("fast") == ["mlp.0"]  # the doctor: only the large layer pays off once 2:4
    assert picked("h*") == ["head"]
    with pytest.raises(ValueError, match="'fats' holds no layer"):
        layer_filter("fats", model=model)


def test_the_grid_names_fast_cells_by_token_count():
    cfg = SweepConfig.make("digits-mlp", layer_sets="all,fast", tokens="128,1024")
    prune = [c.config for c in cfg.cells() if c.kind == "prune"]
    assert [(c["layers"], c.get("tokens")) for c in prune] == [
        ("all", None),
        ("fast", 128),
        ("fast", 1024),
    ]
