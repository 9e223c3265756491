"""The method picker asks the pruning method registry, never a list of its own."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

import explorer.pruning
from explorer.pruning import METHODS as REGISTRY
from explorer.widgets import method_picker
from explorer.widgets.method_picker import (
    MethodConfig,
    MethodPicker,
    available_methods,
    min_calibration,
)


def test_the_methods_offered_are_the_registrys():
    assert available_methods() == tuple(REGISTRY) == MethodPicker().methods
    assert "weightnorm" in available_methods()
    for name, info in REGISTRY.items():
        assert min_calibration(name) == int(info.needs_calibration)


def test_a_registry_entry_decides_what_the_picker_offers_and_needs(monkeypatch):
    extra = dataclasses.replace(REGISTRY["wanda"], name="extra")
    free = dataclasses.replace(REGISTRY["sparsegpt"], needs_calibration=False)
    registry = MappingProxyType({**REGISTRY, "extra": extra, "sparsegpt": free})
    monkeypatch.setattr(explorer.pruning, "METHODS", registry)
    assert "extra" in MethodPicker().methods and available_methods()[-1] == "extra"
    assert min_calibration("extra") == 1 and min_calibration("sparsegpt") == 0
    assert MethodConfig("sparsegpt", calibration=0).calibration == 0
    with pytest.raises(ValueError, match="'extra' needs calibration data"):
        MethodConfig("extra", calibration=0)


def test_an_unknown_module_attribute_is_still_an_error():
    with pytest.raises(AttributeError, match="no attribute 'NOT_THERE'"):
        _ = method_picker.NOT_THERE
