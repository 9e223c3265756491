"""Block-by-block calibration on transformer-like models."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from explorer.checks import check_pattern
from explorer.pruning import prune
from explorer.pruning.calibration import reconstruction_error, record_inputs
from explorer.pruning.sequential import find_blocks


def test_find_blocks(tiny_transformer, make_mlp):
    linears = {n: m for n, m in tiny_transformer.named_modules() if isinstance(m, nn.Linear)}
    name, blocks = find_blocks(tiny_transformer, linears)
    assert name == "blocks" and blocks is tiny_transformer.blocks
    assert find_blocks(tiny_transformer, {"head": tiny_transformer.head}) is None
    assert find_blocks(make_mlp(), {"0": make_mlp()[0]}) is None


@pytest.mark.parametrize("method", ["wanda", "sparsegpt"])
def test_later_layers_see_pruned_inputs(method, tiny_transformer, token_batches):
    dense = copy.deepcopy(tiny_transformer)
    result = prune(tiny_transformer, method, "2:4", calibration=token_batches, progress=False)
    assert result.blocks == "blocks"
    assert set(result.layers) == {
        "blocks.0.fc1",
        "blocks.0.fc2",
        "blocks.1.fc1",
        "blocks.1.fc2",
        "head",
    }
    for name, mask in result.masks.items():
        assert check_pattern(mask, "2:4").valid, name
    # blocks.1.fc1 is the first Linear of block 1: during pruning it saw what the pruned block 0
    # produces, i.e. exactly its inputs in the final pruned model. Its recorded error must be the
    # error measured on those inputs, not on the dense model's.
    for name in ("blocks.1.fc1", "head"):
        mod = tiny_transformer.get_submodule(name)
        with torch.no_grad(), record_inputs({name: mod}) as stats:
            for batch in token_batches:
                tiny_transformer(**batch)
        expected = reconstruction_error(dense.get_submodule(name).weight, mod.weight, stats[name])
        assert result.errors[name] == pytest.approx(expected, rel=1e-4)


def test_sequential_differs_from_dense_inputs(tiny_transformer, token_batches):
    # The same layer pruned on dense inputs (whole-model hooks) would see other statistics.
    dense = copy.deepcopy(tiny_transformer)
    seq = prune(tiny_transformer, "sparsegpt", calibration=token_batches, progress=False)
    only = prune(
        dense,
        "sparsegpt",
        calibration=token_batches,
        progress=False,
        filter_fn=lambda mod, fqn: fqn == "blocks.1.fc1",
    )
    assert not torch.equal(tiny_transformer.blocks[1].fc1.weight, dense.blocks[1].fc1.weight)
    assert seq.blocks == only.blocks == "blocks"


def test_blocks_that_do_not_chain_fall_back(residual_outside):
    with pytest.warns(UserWarning, match="do not feed each other"):
        result = prune(
            residual_outside, "sparsegpt", calibration=[torch.randn(8, 16)], progress=False
        )
    assert result.blocks is None
    assert set(result.errors) == {"blocks.0.0", "blocks.1.0"}


def test_magnitude_errors_block_by_block(tiny_transformer, token_batches):
    result = prune(tiny_transformer, "magnitude", calibration=token_batches, progress=False)
    assert result.blocks == "blocks" and len(result.errors) == 5
    assert all(0 < e < 1.5 for e in result.errors.values())


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _perplexity(model, batches) -> float:
    losses = []
    with torch.no_grad():
        for batch in batches:
            losses.append(float(model(**batch, labels=batch["input_ids"]).loss))
    return float(torch.tensor(losses).mean().exp())


def test_hf_llama_sparsegpt_block_by_block():
    model = _tiny_llama()
    g = torch.Generator().manual_seed(3)
    calib = [
        {
            "input_ids": torch.randint(0, 64, (2, 16), generator=g),
            "attention_mask": torch.ones(2, 16, dtype=torch.long),
        }
        for _ in range(4)
    ]
    keep = lambda mod, fqn: fqn != "lm_head"  # noqa: E731
    mag = prune(
        copy.deepcopy(model), "magnitude", calibration=calib, filter_fn=keep, progress=False
    )
    result = prune(model, "sparsegpt", "2:4", calibration=calib, filter_fn=keep, progress=False)
    assert result.blocks == "model.layers"
    assert len(result.layers) == 14
    assert all(check_pattern(m, "2:4").valid for m in result.masks.values())
    assert result.mean_error < mag.mean_error
    assert torch.isfinite(torch.tensor(_perplexity(model, calib)))


def test_hf_llama_measurement_matches_final_model():
    # Magnitude prunes first, then measures block by block: every layer's error must equal the
    # error on its inputs in the final pruned model, which checks the captured keyword arguments
    # (position embeddings, attention mask) and the dropped key/value cache.
    model = _tiny_llama()
    dense = copy.deepcopy(model)
    g = torch.Generator().manual_seed(4)
    calib = [{"input_ids": torch.randint(0, 64, (2, 12), generator=g)} for _ in range(2)]
    result = prune(model, "magnitude", calibration=calib, progress=False)
    assert result.blocks == "model.layers" and "lm_head" in result.errors
    modules = {name: model.get_submodule(name) for name in result.layers}
    with torch.no_grad(), record_inputs(modules) as stats:
        for batch in calib:
            model(**batch)
    for name in result.layers:
        expected = reconstruction_error(
            dense.get_submodule(name).weight, modules[name].weight, stats[name]
        )
        assert result.errors[name] == pytest.approx(expected, rel=1e-3, abs=1e-6), name
