"""Shared test settings: deterministic seeds, a hypothesis profile sized for a 2-core CI, and
private Jupyter/IPython folders for the tests that start kernels or Voila."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Keep tests off the network: the explorer must never download weights or data.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def jupyter_dirs(tmp_path_factory) -> dict[str, str]:
    """Environment variables that keep Jupyter and IPython out of the home folder.

    A kernel or a Voila server otherwise creates ``~/.ipython`` (profile, history) and
    ``~/.local/share/jupyter`` (runtime files, the notebook secret and signatures), and writes
    into ``~/.jupyter``; with these set, all of that goes under the session's temporary folder.
    """
    root = tmp_path_factory.mktemp("jupyter-home")
    names = {
        "IPYTHONDIR": "ipython",
        "JUPYTER_CONFIG_DIR": "config",
        "JUPYTER_DATA_DIR": "data",
        "JUPYTER_RUNTIME_DIR": "runtime",
    }
    return {var: str(root / name) for var, name in names.items()}
