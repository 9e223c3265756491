"""An fp8 SparseLinear on codes and scales quantized elsewhere (``from_linear(fp8_weight=...)``).

What :func:`explorer.load_sparse` builds from an FP8 checkpoint: the layer must hold the given
codes and scales bit for bit (quantizing the rebuilt weight again gives other scales) and compute
the FP8 reference product on them. Run on the GPU machine (compute capability 8.9+).
"""

from __future__ import annotations

import math

import pytest
import torch
from gpu_helpers import mask24, relerr
from torch import nn

from explorer.gpu.modules.fp8 import FP8, fp8_reference, quantize_weight

pytestmark = pytest.mark.gpu


def _fp8_gpu_or_skip() -> None:
    if not torch.cuda.is_available():
        pytest.skip("GPU test: no CUDA GPU")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 e4m3 needs compute capability 8.9+")


def _stored_and_rebuilt(k: int, m: int, bias: bool, seed: int = 0):
    """Codes and scales as a checkpoint stores them, and the bf16 layer loading rebuilds.

    The codes are the float32 weight's, quantized on the CPU; the layer's weight is
    ``codes * scale`` rounded to bfloat16, as ``load_sparse`` leaves it before the swap.
    """
    torch.manual_seed(seed)
    lin = nn.Linear(k, m, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    codes, scales = quantize_weight(lin.weight)
    with torch.no_grad():
        lin.weight.copy_(codes.float() * scales[:, None])
    return codes, scales, lin.to(torch.bfloat16)


@pytest.mark.parametrize("bias", [True, False])
def test_the_given_codes_and_scales_are_kept_and_give_the_reference(bias):
    from explorer.gpu import SparseLinear

    _fp8_gpu_or_skip()
    codes, scales, lin = _stored_and_rebuilt(512, 1024, bias)
    x = (torch.randn(48, 512) * 20).to(torch.bfloat16)
    b = lin.bias.detach().float() if bias else None
    ref = fp8_reference(x.float(), codes, scales, b, out_dtype=torch.float32)
    lin = lin.cuda()
    # quantizing the rebuilt weight again would not give the stored scales back
    assert not torch.equal(quantize_weight(lin.weight)[1].cpu(), scales)
    both = SparseLinear.from_linear(lin, dtype=FP8, keep_dense=True, fp8_weight=(codes, scales))
    sparse_only = SparseLinear.from_linear(lin, dtype=FP8, fp8_weight=(codes, scales))
    for layer in (both, sparse_only):
        assert layer.dtype == FP8
        assert torch.equal(layer.weight_scale.cpu(), scales)
        if bias:
            assert torch.equal(layer.bias.cpu(), lin.bias.detach().cpu().to(layer.bias.dtype))
        else:
            assert layer.bias is None
    # the codes it compressed and runs FP8 dense on: the given ones, bit for bit
    assert torch.equal(both.dense_weight().view(torch.uint8).cpu(), codes.view(torch.uint8))
    xc = x.cuda()
    for layer in (both, sparse_only):
        y = layer(xc)
        assert y.dtype == torch.bfloat16 and y.shape == (48, 1024)
        # the tolerance of the other fp8 GPU tests: the 2:4 kernel rounds its raw sum to
        # bfloat16 before the scales
        assert relerr(y.float().cpu(), ref) < 1e-2
    tokens = 48
    both.keep_dense_at(tokens)  # FP8 dense on the same codes
    assert relerr(both(xc).float().cpu(), ref) < 1e-2


def test_given_codes_are_checked_before_use():
    from explorer.gpu import SparseLinear

    _fp8_gpu_or_skip()
    codes, scales, lin = _stored_and_rebuilt(256, 256, True, seed=1)
    lin = lin.cuda()
    with pytest.raises(ValueError, match=r"fp8_weight was given for a torch.bfloat16 layer"):
        SparseLinear.from_linear(lin, fp8_weight=(codes, scales))
    with pytest.raises(ValueError, match=r"scales of .* shape \(256,\), got \(\(256, 1\)"):
        SparseLinear.from_linear(lin, dtype=FP8, fp8_weight=(codes, scales[:, None]))
    bad = scales.index_fill(0, torch.tensor([3]), math.nan)
    with pytest.raises(ValueError, match=r"finite and positive; 1 of 256 are not \(row 3: nan\)"):
        SparseLinear.from_linear(lin, dtype=FP8, fp8_weight=(codes, bad))
    dense_codes, dense_scales = quantize_weight(torch.randn(256, 256))  # not 2:4
    with pytest.raises(ValueError, match=r"fp8 codes given for .* are not 2:4"):
        SparseLinear.from_linear(lin, dtype=FP8, fp8_weight=(dense_codes, dense_scales))
