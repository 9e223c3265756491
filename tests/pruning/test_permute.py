"""Channel permutation: the search, the free producers, and exact function preservation."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from explorer.checks import check_pattern
from explorer.pruning import (
    PruningCancelled,
    permute_channels,
    prune,
    undo_permutation,
)
from explorer.pruning.permutation_search import kept_score, search_permutation
from explorer.pruning.permute_producers import find_producers


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- search
def test_kept_score_by_hand():
    s = torch.tensor([[4.0, 3.0, 1.0, 0.0, 2.0, 2.0, 1.0, 1.0]])
    assert kept_score(s, 2, 4) == 7.0 + 4.0
    assert kept_score(s, 1, 4) == 4.0 + 2.0


def test_search_finds_the_optimum_of_a_hand_case():
    # Identity keeps 5+5 and 1+1 = 12; splitting the 5s over both groups keeps 20.
    s = torch.tensor([[5.0, 5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0]])
    order, before, after, _ = search_permutation(s, 2, 4, seconds=10.0)
    assert before == 12.0 and after == 20.0
    assert kept_score(s, 2, 4, order) == 20.0
    assert sorted(order.tolist()) == list(range(8))


@pytest.mark.parametrize(("n", "m"), [(2, 4), (1, 4), (4, 8)])
def test_search_never_loses_and_reports_truthfully(n, m):
    g = torch.Generator().manual_seed(n * 10 + m)
    s = torch.rand(24, 64, generator=g) ** 3
    order, before, after, rounds = search_permutation(s, n, m, seconds=10.0)
    assert after >= before
    assert after > before  # random heavy-tailed scores always leave room
    assert kept_score(s, n, m, order) == pytest.approx(after)
    assert rounds >= 1


def test_search_rejects_width_not_multiple_of_m():
    with pytest.raises(ValueError, match="multiple of M=4"):
        search_permutation(torch.rand(2, 6), 2, 4, seconds=1.0)


# ----------------------------------------------------------------------------- models
def test_sequential_mlp_same_outputs_and_gain(make_mlp):
    net = make_mlp((16, 64, 32, 8))
    x = torch.randn(10, 16)
    before = net(x).detach()
    result = permute_channels(net, "2:4", progress=False)
    assert set(result.permuted) == {"2", "4"}
    assert (
        result.skipped == {"0": result.skipped["0"]} and "no free producer" in result.skipped["0"]
    )
    assert result.mean_gain > 0 and result.min_gain >= 0
    torch.testing.assert_close(net(x), before, rtol=1e-5, atol=1e-6)
    assert "PermutationResult(pattern='2:4', permuted=2, skipped=1" in repr(result)
    assert "mean gain" in result._repr_html_()


def test_round_limit_is_reproducible(make_mlp):
    first, second = make_mlp((16, 64, 8)), make_mlp((16, 64, 8))
    a = permute_channels(first, "2:4", seconds=600, max_rounds=2, progress=False)
    b = permute_channels(second, "2:4", seconds=600, max_rounds=2, progress=False)
    assert a.permuted["2"].kept_after == b.permuted["2"].kept_after
    assert all(torch.equal(x, y) for x, y in zip(a.orders["2"][1], b.orders["2"][1], strict=True))


def test_inplace_false_leaves_the_model(make_mlp):
    net = make_mlp((16, 64, 8))
    saved = _state(net)
    result = permute_channels(net, "2:4", inplace=False, progress=False)
    assert _same(saved, _state(net)) and result.model is not net
    assert not _same(saved, _state(result.model))


def test_undo_is_exact(make_mlp):
    net = make_mlp((16, 64, 8))
    saved = _state(net)
    result = permute_channels(net, "2:4", progress=False)
    assert not _same(saved, _state(net))
    undo_permutation(net, result)
    assert _same(saved, _state(net))


def test_calibration_scores_by_activations(make_mlp, make_inputs):
    net = make_mlp((16, 64, 8))
    x = make_inputs(128, 16)
    result = permute_channels(net, "2:4", calibration=[x], progress=False)
    assert result.scored_by == "|W| * ||X||"
    assert result.to_dict()["permuted"]["2"]["producers"] == ["0"]


def _llama(heads: int = 4, kv: int = 2):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def test_llama_gqa_same_logits_and_layers():
    model = _llama(heads=4, kv=2)
    ids = {"input_ids": torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))}
    before = model(**ids).logits.detach()
    result = permute_channels(model, "2:4", calibration=[ids], progress=False)
    names = set(result.permuted)
    assert names == {
        f"model.layers.{i}.{p}" for i in (0, 1) for p in ("self_attn.o_proj", "mlp.down_proj")
    }
    assert result.permuted["model.layers.0.self_attn.o_proj"].producers == (
        "model.layers.0.self_attn.v_proj",
    )
    assert "no free producer" in result.skipped["model.layers.0.self_attn.q_proj"]
    assert "lm_head" in result.skipped
    torch.testing.assert_close(model(**ids).logits, before, rtol=1e-4, atol=1e-5)
    # GQA: query heads 0 and 1 share value head 0, so their columns share one order.
    o_proj = model.model.layers[0].self_attn.o_proj
    group, orders = result.orders["model.layers.0.self_attn.o_proj"]
    assert group.segments[0][1] == [0, 8] and group.segments[0][2] == [0]
    assert o_proj.in_features == 32 and len(orders) == 2


def test_bert_same_outputs():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    ids = {"input_ids": torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))}
    before = model(**ids).last_hidden_state.detach()
    result = permute_channels(
        model, "2:4", filter_fn=lambda m, n: n.startswith("encoder."), progress=False
    )
    kinds = {p.kind for p in result.permuted.values()}
    assert kinds == {"BERT-style MLP", "attention heads (BERT)"}
    assert len(result.permuted) == 4
    torch.testing.assert_close(model(**ids).last_hidden_state, before, rtol=1e-4, atol=1e-5)


def test_tied_producer_is_skipped(make_mlp):
    net = make_mlp((16, 32, 8))
    other = nn.Linear(16, 32)
    other.weight = net[0].weight
    holder = nn.ModuleDict({"net": net, "other": other})
    saved = _state(holder)
    result = permute_channels(holder, "2:4", progress=False)
    assert "tied" in result.skipped["net.2"] and not result.permuted
    assert _same(saved, _state(holder))


class _Misnamed(nn.Module):
    """Named like a gated MLP but mixes channels between gate and down: not free to reorder."""

    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(8, 16)
        self.up_proj = nn.Linear(8, 16)
        self.down_proj = nn.Linear(16, 8)

    def forward(self, x):
        return self.down_proj(self.gate_proj(x).cumsum(-1) * self.up_proj(x))


def test_changed_outputs_are_caught_and_undone():
    torch.manual_seed(0)
    net = _Misnamed()
    saved = _state(net)
    with pytest.raises(ValueError, match="changed the model's outputs"):
        permute_channels(net, "2:4", calibration=[torch.randn(32, 8)], progress=False)
    assert _same(saved, _state(net))


def test_bad_input(make_mlp):
    net = make_mlp((16, 32, 8))
    with pytest.raises(ValueError, match="only N:M"):
        permute_channels(net, "unstructured:0.5", progress=False)
    with pytest.raises(ValueError, match="positive number, got 0"):
        permute_channels(net, "2:4", seconds=0, progress=False)
    with pytest.raises(ValueError, match="max_rounds must be a positive int"):
        permute_channels(net, "2:4", max_rounds=0, progress=False)
    with pytest.raises(TypeError, match=r"nn\.Module"):
        permute_channels("net", "2:4", progress=False)


def test_cancel_undoes(make_mlp):
    net = make_mlp((16, 32, 8))
    saved = _state(net)
    stop = threading.Event()
    stop.set()
    with pytest.raises(PruningCancelled):
        permute_channels(net, "2:4", progress=False, cancel=stop)
    assert _same(saved, _state(net))


def test_find_producers_on_plain_sequential():
    net = nn.Sequential(
        nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 4), nn.GELU(), nn.Linear(4, 4)
    )
    groups, _ = find_producers(net)
    assert list(groups) == ["4"]  # the LayerNorm mixes channels: layer 2 is not free


# ----------------------------------------------------------------------------- prune(permute=True)
@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
def test_prune_with_permute(method, make_mlp, make_inputs):
    net = make_mlp((16, 64, 32))
    x = make_inputs(256, 16)
    cal = [x] if method != "magnitude" else None
    result = prune(net, method, "2:4", calibration=cal, permute=True, progress=False)
    assert result.permutation is not None and "2" in result.permutation.permuted
    assert result.permute_seconds > 0
    for name, mask in result.masks.items():
        assert check_pattern(mask, "2:4").valid, name
    assert "permuted=1" in repr(result)


def test_prune_permute_failure_restores_exactly(make_mlp, make_inputs, monkeypatch):
    import explorer.pruning.methods as methods

    net = make_mlp((16, 64, 32))
    saved = _state(net)

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(methods, "sparsegpt_prune", boom)
    with pytest.raises(RuntimeError, match="boom"):
        prune(
            net, "sparsegpt", "2:4", calibration=[make_inputs(64, 16)], permute=True, progress=False
        )
    assert _same(saved, _state(net))


def test_prune_permute_rejects_unstructured(make_mlp):
    with pytest.raises(ValueError, match="permute=True"):
        prune(make_mlp((16, 32)), "magnitude", "unstructured:0.5", permute=True, progress=False)


# ----------------------------------------------------------------------------- the view
def test_permutation_view_from_result(make_mlp):
    from explorer.widgets.mask_view import PermutationView

    net = make_mlp((16, 64, 8))
    original = net[2].weight.detach().clone()
    result = permute_channels(net, "2:4", progress=False)
    view = PermutationView.from_result(net, result, "2")
    layer = result.permuted["2"]
    assert view.kept_before == pytest.approx(layer.kept_before, rel=1e-5)
    assert view.kept_after == pytest.approx(layer.kept_after, rel=1e-5)
    assert view.gain > 0 and "gain +" in repr(view)
    # the left panel is the mask of the original weights, in their original order
    from explorer.patterns import Pattern
    from explorer.pruning.magnitude import magnitude_mask

    assert torch.equal(view.panels[0].mask, magnitude_mask(original, Pattern.parse("2:4")))
    with pytest.raises(ValueError, match="was not reordered"):
        PermutationView.from_result(net, result, "0")
    with pytest.raises(ValueError, match="permutation of the 4"):
        PermutationView(torch.ones(2, 4), torch.tensor([0, 0, 1, 2]))


def test_prune_zero_permutation_budget_is_an_error(make_mlp):
    net = make_mlp((16, 64, 32))
    saved = _state(net)
    with pytest.raises(ValueError, match="time budget"):
        prune(net, "magnitude", "2:4", permute=True, permute_seconds=0, progress=False)
    assert _same(saved, _state(net))
