"""Fixtures for the experiments: a private weight cache for the session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def experiment_cache(tmp_path_factory):
    """Trained MLP weights go to a per-session temporary cache, never the user's."""
    path = tmp_path_factory.mktemp("experiment-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARSITY_EXPLORER_CACHE", str(path))
        yield path
