"""The precision-dense baselines on a GPU: each layer dense at int4, int8 codes or FP8, checked.

Tolerances: the int4 and int8 dense layers hold 1e-2 of the float64 dequantized product
(``test_int4_linear``); one product of a model here against the bf16 model of the same 2:4 weights
adds the quantization error itself: int4 round-to-nearest with 128-column groups moves a random
layer's output by 8-12% (measured), int8 by under 1%, FP8 e4m3 (per channel and per token) by 3-5%.
"""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import mask24, relerr
from torch import nn

from explorer.gpu.swap.precision_dense import dense_at, dense_layer

pytestmark = pytest.mark.gpu
DEV = "cuda"
#: Output of the two-layer model against its bf16 self, by precision (see the docstring).
TOL = {"int4": 0.2, "int8-weights": 2e-2, "float8_e4m3fn": 0.1}


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024), nn.Linear(1024, 8)
    )
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.copy_(mask24(layer.weight))
    return model.to(DEV, torch.bfloat16).eval()


@pytest.mark.parametrize("precision", ["int4", "int8-weights", "float8_e4m3fn"])
def test_each_layer_runs_dense_at_the_precision_and_the_model_is_not_changed(precision):
    model = _model()
    before = [p.clone() for p in model.parameters()]
    x = torch.randn(16, 1024, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = model(x)
        out, summary = dense_at(model, precision, lambda m, fqn: fqn != "3")
        got = out(x)
    assert summary.converted == ["0", "2"] and summary.kept == []
    assert type(out[3]) is nn.Linear and type(out[0]) is not nn.Linear
    if precision != "float8_e4m3fn":  # no 2:4 route offered
        assert out[0].decode_refusal == "the decode route is off"
    assert got.shape == ref.shape and got.dtype == ref.dtype
    assert relerr(got, ref) < TOL[precision]
    assert all(type(m) is not nn.Linear for m in (out[0], out[2]))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_layer_the_precision_cannot_take_stays_as_it_was_with_the_reason():
    model = _model()
    with torch.no_grad():
        out, summary = dense_at(model, "int4")  # the last layer is not 2:4
    assert summary.converted == ["0", "2"]
    ((name, why),) = summary.kept
    assert name == "3" and "2:4" in why
    assert type(out[3]) is nn.Linear


def test_recorded_scales_keep_the_codes_of_a_joint_prune():
    torch.manual_seed(1)
    layer = nn.Linear(512, 256).to(DEV, torch.bfloat16)
    with torch.no_grad():
        layer.weight.copy_(mask24(layer.weight))
    # scales rounding to nearest would not choose (max / 5, not max / 7): codes up to +-5
    kept = layer.weight.float().abs().reshape(256, 8, 64).amax(-1) / 5
    with torch.no_grad():
        # weights on the grid of those scales (group 64): the dense layer must keep them exactly,
        # where its own scales (max / 7) would move most of them by up to a third of a step
        grid = (layer.weight.float().reshape(256, 8, 64) / kept[..., None]).round().clamp(-8, 7)
        layer.weight.copy_((grid * kept[..., None]).reshape(256, 512))
        new = dense_layer(layer, "int4", kept)
        x = torch.eye(512, device=DEV, dtype=torch.bfloat16)
        got = new(x).float().T - (layer.bias.float()[:, None] if layer.bias is not None else 0)
    assert relerr(got, layer.weight.float()) < 1e-2
