"""Hostile manifests: a checkpoint's claims are checked, never obeyed.

Each test edits a real checkpoint the way an attacker (or a broken tool) would and expects one
:class:`CheckpointError` line, with the model it was loaded into left bit for bit unchanged.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

import explorer
from explorer import cli
from explorer.checkpoint import (
    MANIFEST_NAME,
    CheckpointError,
    check_file,
    export_pretrained,
    load_sparse,
    read_checkpoint,
    save_sparse,
    verify_checkpoint,
    verify_pretrained,
)
from explorer.checkpoint.manifest import METADATA_KEY

transformers = pytest.importorskip("transformers")

Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
O_PROJ = "model.layers.0.self_attn.o_proj.weight"


def _prune(model):
    explorer.prune(model, "magnitude", "2:4", filter_fn=lambda m, n: n != "lm_head", progress=False)
    return model


@pytest.fixture
def llama_file(tmp_path, tiny_llama):
    """A pruned tiny LLaMA (tied embeddings) saved as a checkpoint."""
    path = tmp_path / "llama.safetensors"
    save_sparse(_prune(tiny_llama), path, progress=False)
    return tiny_llama, path


def _read(path):
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, json.loads(f.metadata()[METADATA_KEY])


def _write(path, tensors, manifest):
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    save_file(tensors, str(path), metadata={METADATA_KEY: text, "format": "pt"})


def _fresh_llama(tie=True):
    """The tiny_llama fixture's architecture (conftest), with other random weights."""
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
    )
    torch.manual_seed(1)
    return transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()


def _fails_untouched(path, match, model):
    """load_sparse into ``model`` fails and leaves it bit-identical; verify fails the same way."""
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=match):
        load_sparse(path, model, progress=False)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed although loading failed"
    with pytest.raises(CheckpointError, match=match):
        verify_checkpoint(path)


# --- 1. aliases and tied tensors ------------------------------------------------------------


def test_alias_between_untied_layers_is_refused(llama_file):
    """One added line made o_proj load q_proj's values; `check` said "checksums ok"."""
    _, path = llama_file
    tensors, manifest = _read(path)
    manifest["aliases"][O_PROJ] = Q_PROJ
    _write(path, tensors, manifest)
    match = f"'{O_PROJ}' an alias of '{Q_PROJ}', but the file stores '{O_PROJ}' itself"
    _fails_untouched(path, match, _fresh_llama())
    with pytest.raises(CheckpointError, match=match):
        load_sparse(path, progress=False)


def test_alias_with_rewritten_checksums_is_refused_by_the_model_graph(llama_file):
    """o_proj's tensors removed and its entry rewritten to q_proj's: the model does not tie them."""
    _, path = llama_file
    tensors, manifest = _read(path)
    for suffix in ("::values", "::positions"):
        del tensors[O_PROJ + suffix], manifest["tensors"][O_PROJ + suffix]
    fqn = O_PROJ.removesuffix(".weight")
    q = manifest["layers"][Q_PROJ.removesuffix(".weight")]
    manifest["layers"][fqn].update(
        stored="dense", reason="shared", sha256=q["sha256"], shape=q["shape"], dtype=q["dtype"]
    )
    manifest["skipped"][fqn] = "shared"
    manifest["aliases"][O_PROJ] = Q_PROJ
    _write(path, tensors, manifest)
    match = (
        f"makes '{O_PROJ}' the same tensor as '{Q_PROJ}', but LlamaForCausalLM does not tie them"
    )
    _fails_untouched(path, match, _fresh_llama())
    with pytest.raises(CheckpointError, match=match):
        load_sparse(path, progress=False)


def test_model_ties_two_tensors_the_file_stores_differently(tmp_path):
    """Saved untied, loaded into a tied model: lm_head silently overwrote embed_tokens."""
    untied = _prune(_fresh_llama(tie=False))
    path = tmp_path / "untied.safetensors"
    save_sparse(untied, path, progress=False)
    model = _fresh_llama(tie=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"ties '.*' and '.*' .* stores them with different"):
        load_sparse(path, model, progress=False)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed although loading failed"


def test_valid_tied_checkpoint_rebuilds_exactly(llama_file, token_ids):
    """The meta-device checks leave a valid checkpoint's rebuilt model what it was."""
    model, path = llama_file
    fresh = load_sparse(path, progress=False)
    assert fresh.lm_head.weight is fresh.model.embed_tokens.weight
    for (name, a), (_, b) in zip(
        model.state_dict().items(), fresh.state_dict().items(), strict=True
    ):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    for (name, a), (_, b) in zip(model.named_buffers(), fresh.named_buffers(), strict=True):
        assert torch.equal(a, b), name  # non-persistent buffers (rotary inv_freq) built for real
    assert torch.equal(model(token_ids).logits, fresh(token_ids).logits)


# --- 2. nothing is allocated for what the file only claims ------------------------------------


@pytest.fixture
def no_real_linear(monkeypatch):
    """Fail the test at once if any nn.Linear gets real (non-meta) memory."""
    original = nn.Linear.__init__

    def guarded(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not self.weight.is_meta:
            raise AssertionError(f"a real {tuple(self.weight.shape)} Linear was allocated")

    monkeypatch.setattr(nn.Linear, "__init__", guarded)


def test_7b_config_in_a_small_file_is_refused_on_meta(llama_file, no_real_linear):
    """`"hf_config": {}` builds a default 7B LLaMA: refused before one real weight exists."""
    _, path = llama_file
    tensors, manifest = _read(path)
    manifest["model"]["hf_config"] = {}
    _write(path, tensors, manifest)
    with pytest.raises(
        CheckpointError, match=r"6,738,415,616 parameters and would need 2\d\.\d GiB"
    ):
        load_sparse(path, progress=False)


def test_config_with_a_million_layers_is_stopped_by_the_build_budget(llama_file, no_real_linear):
    _, path = llama_file
    tensors, manifest = _read(path)
    manifest["model"]["hf_config"]["num_hidden_layers"] = 1_000_000
    _write(path, tensors, manifest)
    with pytest.raises(CheckpointError, match=r"takes more than .* torch calls to construct"):
        load_sparse(path, progress=False)


def test_model_that_is_a_string_is_a_checkpoint_error(llama_file, tmp_path, capsys):
    """`"model": "string"` was an AttributeError traceback in `export`."""
    _, path = llama_file
    tensors, manifest = _read(path)
    manifest["model"] = "string"
    _write(path, tensors, manifest)
    with pytest.raises(CheckpointError, match="field model is 'string', expected an object"):
        load_sparse(path, progress=False)
    code = cli.main(["export", str(path), "--pretrained", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "field model is 'string'" in err


# --- 3. one line, never a traceback ---------------------------------------------------------


def test_deeply_nested_manifest(llama_file):
    _, path = llama_file
    tensors, manifest = _read(path)
    text = json.dumps({**manifest, "provenance": {"x": "@"}})
    _write(path, tensors, text.replace('"@"', "[" * 100_000 + "]" * 100_000))
    _fails_untouched(
        path, r"nests arrays and objects 1000\d\d deep, expected at most 32", _fresh_llama()
    )


def test_5000_digit_number_in_the_manifest(llama_file):
    _, path = llama_file
    tensors, manifest = _read(path)
    text = json.dumps({**manifest, "provenance": {"x": "@"}})
    _write(path, tensors, text.replace('"@"', "9" * 5000))
    _fails_untouched(path, "holds a number of 5,000 characters", _fresh_llama())


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m["tensors"][Q_PROJ + "::values"].update(offset=0), "unknown field 'offset'"),
        (lambda m: m["layers"].update(x={}), r"field layers\['x'\] lacks 'param'"),
        (
            lambda m: m["layers"]["model.layers.0.mlp.up_proj"].update(shape=[10**20, 4]),
            r"field layers\['model.layers.0.mlp.up_proj'\].shape is \[100000000000000000000, 4\]",
        ),
        (lambda m: m["layers"]["lm_head"].update(stored="3:4"), "expected '2:4' or 'dense'"),
        (lambda m: m["tensors"][Q_PROJ + "::values"].update(sha256="x" * 64), "64 lowercase hex"),
        (lambda m: m.update(provenance=[1]), "field provenance is \\[1\\], expected an object"),
        (lambda m: m["aliases"].update({"lm_head.weight": 5}), r"aliases\['lm_head.weight'\]"),
    ],
    ids=["unknown-field", "empty-layer", "huge-dim", "stored", "sha", "provenance", "alias-int"],
)
def test_malformed_fields_name_the_field(llama_file, edit, match):
    _, path = llama_file
    tensors, manifest = _read(path)
    edit(manifest)
    _write(path, tensors, manifest)
    _fails_untouched(path, match, _fresh_llama())


def test_repeated_key_and_nan_are_refused(llama_file):
    _, path = llama_file
    tensors, manifest = _read(path)
    text = json.dumps(manifest)
    _write(path, tensors, text[:-1] + ', "aliases": {}}')
    _fails_untouched(path, "repeats the key 'aliases'", _fresh_llama())
    _write(path, tensors, json.dumps({**manifest, "provenance": {"x": float("nan")}}))
    _fails_untouched(path, "holds NaN, expected a finite number", _fresh_llama())


# --- 4. strict checks and Hugging Face folders ----------------------------------------------


@pytest.fixture
def hf_folder(tmp_path, tiny_llama):
    return export_pretrained(_prune(tiny_llama), tmp_path / "hf")


def test_folder_with_an_empty_layer_entry_is_a_checkpoint_error(hf_folder):
    """`{"layers": {"x": {}}}` was a KeyError traceback."""
    manifest = json.loads((hf_folder / MANIFEST_NAME).read_text())
    manifest["layers"]["x"] = {}
    (hf_folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"field layers\['x'\] lacks 'param'"):
        verify_pretrained(hf_folder)


def test_oversized_folder_manifest_is_refused_before_it_is_read(hf_folder, monkeypatch):
    from pathlib import Path

    from explorer.checkpoint.bounded_json import MAX_TEXT_CHARS

    with open(hf_folder / MANIFEST_NAME, "r+b") as handle:
        handle.truncate(MAX_TEXT_CHARS + 1)  # sparse: no 64 MiB written

    def never(*args, **kwargs):
        raise AssertionError("the oversized manifest was read")

    monkeypatch.setattr(Path, "read_text", never)
    monkeypatch.setattr(Path, "read_bytes", never)
    with pytest.raises(CheckpointError, match=f"is {MAX_TEXT_CHARS + 1:,} bytes, expected at most"):
        verify_pretrained(hf_folder)


def test_strict_fails_a_folder_with_no_24_layer(hf_folder):
    assert check_file(hf_folder, strict=True).sparse_layers
    manifest = json.loads((hf_folder / MANIFEST_NAME).read_text())
    (hf_folder / MANIFEST_NAME).write_text(json.dumps({**manifest, "layers": {}}))
    assert check_file(hf_folder).layers == ()  # without strict it verifies
    with pytest.raises(CheckpointError, match="fails the strict check: hf records no 2:4 layer"):
        check_file(hf_folder, strict=True)


def test_check_verb_strict_fails_a_folder_with_no_24_layer(hf_folder, capsys):
    assert cli.main(["check", str(hf_folder), "--strict"]) == 0
    manifest = json.loads((hf_folder / MANIFEST_NAME).read_text())
    (hf_folder / MANIFEST_NAME).write_text(json.dumps({**manifest, "layers": {}}))
    capsys.readouterr()
    assert cli.main(["check", str(hf_folder)]) == 0  # without --strict it verifies
    assert cli.main(["check", str(hf_folder), "--strict"]) == 1
    err = capsys.readouterr().err
    assert err == "sparsity-explorer: check --strict: hf records no 2:4 layer\n"


def test_strict_fails_a_checkpoint_with_no_24_layer(tmp_path):
    path = tmp_path / "dense.safetensors"
    save_sparse(nn.Sequential(nn.LayerNorm(8)), path, progress=False)
    with pytest.raises(CheckpointError, match=r"dense\.safetensors records no 2:4 layer"):
        check_file(path, strict=True)


def test_read_checkpoint_is_unchanged_for_a_valid_file(llama_file):
    model, path = llama_file
    manifest, state = read_checkpoint(path)
    assert manifest["aliases"] == {"lm_head.weight": "model.embed_tokens.weight"}
    assert torch.equal(state["lm_head.weight"], model.lm_head.weight)
