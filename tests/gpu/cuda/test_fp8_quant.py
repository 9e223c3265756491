"""The per-token fp8 quantization kernel: which inputs it takes (CPU), and on the GPU machine its
output against the plain torch steps, bit for bit, eagerly, in a CUDA graph and in a compiled op."""

from __future__ import annotations

import pytest
import torch

from explorer.gpu.cuda.fp8_quant import kernel_takes

H100 = (9, 0)


@pytest.mark.parametrize(
    ("shape", "strides", "ptr", "capability", "takes"),
    [
        ((4096, 14336), (14336, 1), 0, H100, True),
        ((1, 4096), (7, 1), 0, H100, True),  # one row: its row stride does not matter
        ((5, 1000), (1000, 1), 0, (8, 9), True),  # Ada has the fp8 conversion
        ((5, 1000), (1000, 1), 8, H100, False),  # not 16-byte aligned
        ((5, 1000), (1004, 1), 0, H100, False),  # rows not 16-byte apart
        ((5, 12), (12, 1), 0, H100, False),  # 12 values: not a multiple of 8
        ((5, 64), (1, 5), 0, H100, False),  # a transposed view
        ((0, 64), (64, 1), 0, H100, False),  # nothing to do
        ((5, 64), (64, 1), 0, (8, 6), False),  # Ampere: no fp8 conversion
    ],
)
def test_the_kernel_takes_aligned_rows_of_a_multiple_of_8_on_sm89_and_newer(
    shape, strides, ptr, capability, takes
):
    assert kernel_takes(torch.bfloat16, shape, strides, ptr, capability) is takes


def test_the_kernel_takes_16_and_32_bit_floats_only():
    args = ((4, 64), (64, 1), 0, H100)
    assert [kernel_takes(d, *args) for d in (torch.float16, torch.float32)] == [True, True]
    assert not kernel_takes(torch.float64, *args)
    assert not kernel_takes(torch.int8, *args)
    assert not kernel_takes(torch.bfloat16, (2, 4, 64), (256, 64, 1), 0, H100)  # 2-D only


def _gpu_fp8_or_skip() -> None:
    if not torch.cuda.is_available():
        pytest.skip("GPU test: no CUDA GPU")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 e4m3 needs compute capability 8.9+")


def assert_same_bits(q, s, ref_q, ref_s) -> None:
    """The same scales and the same fp8 bytes; NaN where the reference has NaN (any sign)."""
    assert torch.equal(s, ref_s), (s - ref_s).abs().max()
    nan, ref_nan = q.float().isnan(), ref_q.float().isnan()
    assert torch.equal(nan, ref_nan)
    a, b = q.view(torch.uint8), ref_q.view(torch.uint8)
    assert torch.equal(a[~nan], b[~ref_nan]), int((a != b).sum())


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096), (1, 14336), (7, 1000), (300, 512)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_kernel_gives_the_plain_steps_bits(shape, dtype):
    from explorer.gpu.cuda.fp8_quant import quantize_rows_fp8
    from explorer.gpu.modules import fp8

    _gpu_fp8_or_skip()
    torch.manual_seed(0)
    x = (torch.randn(*shape, device="cuda") * 50).to(dtype)
    if shape[0] >= 4:
        x[0] = 0  # an all-zero row: scale 1
        x[1, ::3] = 1e4  # beyond e4m3's range before scaling
        x[2] = x[2] * 1e-3  # small values: subnormal fp8 codes
    got = quantize_rows_fp8(x)
    assert got is not None
    q, s = got
    assert q.dtype == fp8.FP8 and q.shape == x.shape and s.shape == x.shape[:1]
    assert_same_bits(q, s, *fp8._quantize_rows(x))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_nan_and_infinity_rows_come_out_as_torch_makes_them(dtype):
    from explorer.gpu.cuda.fp8_quant import quantize_rows_fp8
    from explorer.gpu.modules import fp8

    _gpu_fp8_or_skip()
    x = torch.randn(4, 64, device="cuda").to(dtype)
    x[0, 5] = float("nan")  # amax NaN: scale 1, the NaN stays NaN
    x[1, 7] = float("inf")  # amax inf: scale inf, finite values 0, inf / inf NaN
    x[2, :] = float("-inf")
    assert_same_bits(*quantize_rows_fp8(x), *fp8._quantize_rows(x))


@pytest.mark.gpu
def test_inputs_the_kernel_does_not_take_return_none_and_quantize_activations_still_works():
    from explorer.gpu.cuda.fp8_quant import quantize_rows_fp8
    from explorer.gpu.modules import fp8

    _gpu_fp8_or_skip()
    x = (torch.randn(6, 1004, device="cuda") * 30).to(torch.bfloat16)  # 1004: not a multiple of 8
    assert quantize_rows_fp8(x) is None
    assert quantize_rows_fp8(x.cpu()) is None
    q, s = fp8.quantize_activations(x)
    ref_q, ref_s = fp8._quantize_rows(x)
    torch.testing.assert_close(s, ref_s, rtol=3e-7, atol=0)
    # the fused pass may move a value on a rounding boundary by one fp8 step (3 mantissa bits)
    torch.testing.assert_close(q.float(), ref_q.float(), rtol=0.13, atol=2.0**-9)


@pytest.mark.gpu
def test_quantize_activations_takes_the_kernel_in_a_first_capture_and_any_leading_dims():
    from explorer.gpu.modules import fp8

    _gpu_fp8_or_skip()
    y = (torch.randn(3, 5, 384, device="cuda") * 40).to(torch.float16)  # never seen before
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        q, s = fp8.quantize_activations(y)
    y.mul_(0.5)  # new values in the same memory: the replay quantizes them
    graph.replay()
    torch.cuda.synchronize()
    assert fp8._KERNEL.get("ok") is True
    assert q.shape == y.shape and s.shape == y.shape[:-1]
    assert_same_bits(q, s, *fp8._quantize_rows(y))


@pytest.mark.gpu
def test_an_fp8_sparse_op_in_a_compiled_model_quantizes_with_the_kernel(monkeypatch):
    from torch import nn

    from explorer.gpu import SparseLinear
    from explorer.gpu.cuda import fp8_quant
    from explorer.masks import make_mask

    _gpu_fp8_or_skip()
    torch.manual_seed(2)
    lin = nn.Linear(512, 1024)
    with torch.no_grad():
        lin.weight.mul_(make_mask(lin.weight, "2:4"))
    layer = SparseLinear.from_linear(lin.to(torch.bfloat16).cuda(), dtype=torch.float8_e4m3fn)
    x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    eager = layer(x)
    seen = []
    kernel = fp8_quant.quantize_rows_fp8
    monkeypatch.setattr(fp8_quant, "quantize_rows_fp8", lambda t: seen.append(t.shape) or kernel(t))
    compiled = torch.compile(nn.Sequential(nn.Identity(), layer))(x)
    assert seen, "the op quantized its input some other way"
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
