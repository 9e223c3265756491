"""Provenance: the machine's versions, cached once, and a fresh time on every call."""

from __future__ import annotations

import types

import pytest
import torch

from explorer.results.store.provenance import _cusparselt_version, machine, provenance


@pytest.mark.parametrize(("raw", "text"), [(800, "0.8.0"), (602, "0.6.2"), (1203, "1.2.3")])
def test_cusparselt_version_is_readable(raw, text):
    fake = types.SimpleNamespace(
        backends=types.SimpleNamespace(cusparselt=types.SimpleNamespace(version=lambda: raw))
    )
    assert _cusparselt_version(fake) == text


def test_cusparselt_version_missing():
    fake = types.SimpleNamespace(
        backends=types.SimpleNamespace(cusparselt=types.SimpleNamespace(version=lambda: None))
    )
    assert _cusparselt_version(fake) is None
    assert _cusparselt_version(types.SimpleNamespace(backends=None)) is None


def test_machine_is_cached_and_complete():
    info = machine()
    assert info is machine()
    assert info["torch"] == torch.__version__
    expected = {
        "gpu",
        "gpu_capability",
        "gpu_index",
        "gpu_uuid",
        "gpu_count",
        "driver",
        "cuda",
        "torch",
        "cusparselt",
        "explorer",
        "python",
        "platform",
        "cpu",
    }
    assert set(info) == expected
    if not torch.cuda.is_available():
        assert info["gpu"] == "cpu" and info["gpu_capability"] is None
        assert info["gpu_index"] is None and info["gpu_uuid"] is None


def test_provenance_adds_a_utc_time_without_touching_the_cache():
    p = provenance()
    assert p["time"].endswith("+00:00") and "time" not in machine()
