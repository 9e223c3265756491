"""Fixtures shared by the results tests."""

from __future__ import annotations

import builtins

import pytest


@pytest.fixture
def without_plotly(monkeypatch):
    """Make ``import plotly`` (and its submodules) fail, as on a machine without it."""
    real = builtins.__import__

    def no_plotly(name, *args, **kwargs):
        if name.startswith("plotly"):
            raise ImportError("no plotly")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_plotly)
