"""The int8 reference layer (CPU) and, on the GPU machine, the int8 kernel against it."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import mask24, relerr
from torch import nn

from explorer.gpu.modules.quant import Int8ReferenceLinear, int8_reference, quantize_per_channel


def test_reference_is_the_exact_integer_product():
    torch.manual_seed(0)
    lin = nn.Linear(2048, 64)  # wider than one exact float32 chunk
    x = torch.randn(5, 2048)
    got = Int8ReferenceLinear(lin)(x)
    qw, sw = quantize_per_channel(lin.weight)
    sx = x.abs().amax(1) / 127
    qx = torch.round(x / sx[:, None]).clamp(-127, 127)
    exact = (qx.double() @ qw.double().t()) * sw.double() * sx.double()[:, None]
    torch.testing.assert_close(got.double(), exact + lin.bias.double(), rtol=1e-6, atol=1e-6)
    assert relerr(got, lin(x)) < 2e-2  # and close to the float layer


def test_int8_reference_swaps_what_sparsify_would():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 96), nn.Linear(96, 48))
    with torch.no_grad():
        for m in (model[0], model[2], model[3]):
            m.weight.copy_(mask24(m.weight))
    out, names = int8_reference(model)
    assert names == ["0", "2"]  # "3" has 48 outputs: off the int8 alignment of 32
    assert isinstance(out[0], Int8ReferenceLinear) and isinstance(model[0], nn.Linear)
    out, names = int8_reference(model, filter_fn=lambda m, fqn: fqn != "0")
    assert names == ["2"]
    dense = nn.Sequential(nn.Linear(64, 64))
    assert int8_reference(dense)[1] == []
    assert int8_reference(dense, require_24=False)[1] == ["0"]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(37, 256), (2, 9, 256)])
def test_int8_kernel_matches_the_reference(shape):
    from explorer.gpu import SparseLinear

    lin = nn.Linear(256, 512)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    x = torch.randn(*shape)
    ref = Int8ReferenceLinear(lin)(x)
    sl = SparseLinear.from_linear(lin.to("cuda", torch.float16), dtype=torch.int8)
    got = sl(x.to("cuda", torch.float16)).float().cpu()
    # the kernel rounds its output and the token scale to 16 bits (measured 2.2-2.5e-3 on an H100)
    assert relerr(got, ref) < 5e-3
