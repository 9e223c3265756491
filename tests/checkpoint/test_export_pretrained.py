"""export_pretrained: a Hugging Face folder that Transformers reloads, with a manifest beside it."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

import explorer
from explorer.checkpoint import (
    MANIFEST_NAME,
    CheckpointError,
    export_pretrained,
    verify_pretrained,
)


def test_llama_folder_reloads_with_same_outputs(tmp_path, tiny_llama, token_ids):
    transformers = pytest.importorskip("transformers")
    with pytest.warns(UserWarning, match="shared"):
        result = explorer.prune(tiny_llama, "magnitude", "2:4", progress=False)
    folder = export_pretrained(tiny_llama, tmp_path / "llama", result, provenance={"run": 1})
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert len(manifest["layers"]) == 15 and manifest["pruning"]["method"] == "magnitude"
    assert manifest["layers"]["lm_head"]["tied_to"] == "model.embed_tokens.weight"
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        folder,
        local_files_only=True,
        dtype=torch.bfloat16,
        attn_implementation=tiny_llama.config._attn_implementation,
    ).eval()
    for name, tensor in tiny_llama.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
    with torch.no_grad():
        assert torch.equal(tiny_llama(token_ids).logits, reloaded(token_ids).logits)
    report = verify_pretrained(folder)
    assert len(report.layers) == 15 and all(r.stored == "2:4" for r in report.layers)


def test_changed_weights_in_the_folder_are_found(tmp_path, tiny_llama):
    with pytest.warns(UserWarning, match="shared"):
        explorer.prune(tiny_llama, "magnitude", "2:4", progress=False)
    folder = export_pretrained(tiny_llama, tmp_path / "llama")
    (weights,) = folder.glob("*.safetensors")
    tensors = load_file(str(weights))
    tensors["model.layers.1.mlp.up_proj.weight"][0, :4] = 1.0
    save_file(tensors, str(weights), metadata={"format": "pt"})
    with pytest.raises(
        CheckpointError,
        match=r"'model\.layers\.1\.mlp\.up_proj' .* no longer 2:4; the weights changed",
    ):
        verify_pretrained(folder)
    (folder / MANIFEST_NAME).unlink()
    with pytest.raises(CheckpointError, match=r"has no sparsity_manifest\.json"):
        verify_pretrained(folder)


def test_non_hugging_face_model_gets_a_hint(tmp_path):
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(4, 4)
            self.inner.save_pretrained = lambda *a, **k: None

    with pytest.raises(
        TypeError, match=r"no save_pretrained.*pass the inner model, e\.g\. model\.inner"
    ):
        export_pretrained(Wrapper(), tmp_path / "x")
