"""GPU tests: skipped with a reason unless a CUDA GPU with sparse tensor cores, CuPy and
nvmath-python are all present (CI has none of them; the tests run on the GPU machine)."""

from __future__ import annotations

import importlib
from functools import lru_cache

import pytest
import torch


@lru_cache(maxsize=1)
def gpu_skip_reason() -> str | None:
    """Why GPU tests cannot run here, or None."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    cap = torch.cuda.get_device_capability()
    if cap < (8, 0):
        return f"GPU capability {cap[0]}.{cap[1]} has no sparse tensor cores (needs 8.0+)"
    for mod, pkg in (("cupy", "cupy-cuda12x/13x"), ("nvmath.bindings.cusparseLt", "nvmath-python")):
        try:
            importlib.import_module(mod)
        except Exception as exc:
            return f"{pkg} not importable ({type(exc).__name__}: {exc})"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if it.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = gpu_skip_reason()
    if reason:
        for it in gpu_items:
            it.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))
