"""``sparsify(model, dtype="float8_e4m3fn")`` where no GPU is needed (CPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from gpu_helpers import mask24
from torch import nn

from explorer.gpu import sparsify


@pytest.mark.parametrize("name", ["float8_e4m3fn", "fp8", torch.float8_e4m3fn])
def test_fp8_is_accepted_and_a_cpu_model_stays_dense_with_reasons(name):
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))
    with torch.no_grad():
        for i in (0, 2):
            model[i].weight.copy_(mask24(model[i].weight))
    rep = sparsify(model, dtype=name)
    assert rep.dtype == "float8_e4m3fn"
    assert rep.swapped == [] and [fqn for fqn, _ in rep.skipped] == ["0", "2"]
    assert all("CUDA" in rep.reason(fqn) for fqn in ("0", "2"))
    assert type(model[0]) is nn.Linear and type(model[2]) is nn.Linear


def test_other_float8_formats_are_still_refused():
    with pytest.raises(ValueError, match=r"'float8_e5m2'; expected one of .*'float8_e4m3fn'"):
        sparsify(nn.Sequential(nn.Linear(64, 64)), dtype="float8_e5m2")


def test_fp8_below_capability_8_9_names_the_device_and_the_fix(monkeypatch):
    from explorer.gpu.swap.eligibility import eligibility

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    cuda_linear = SimpleNamespace(
        weight=SimpleNamespace(device=SimpleNamespace(type="cuda")),
        in_features=64,
        out_features=64,
    )
    why = eligibility(cuda_linear, torch.float8_e4m3fn)
    assert why == (
        "float8_e4m3fn needs compute capability 8.9+ (Ada from cuSPARSELt 0.8, Hopper); "
        "NVIDIA A100 is 8.0 "
        "(use dtype='int8' or 'bfloat16' here, or an 8.9+ GPU)"
    )
