"""FP8 dense (``torch._scaled_mm``): the product itself on the CPU where torch has it, and on the
GPU machine the FP8 2:4 layer's dense route and ``sparsify(dtype="float8_e4m3fn")`` routing."""

from __future__ import annotations

import copy

import pytest
import torch
from gpu_helpers import mask24, relerr
from torch import nn

from explorer.gpu.modules.fp8 import FP8, Fp8ReferenceLinear, fp8_reference, quantize_weight
from explorer.gpu.modules.fp8_dense import Fp8DenseLinear, scaled_linear


def _cpu_scaled_mm_or_skip() -> None:
    w_q, w_s = quantize_weight(torch.eye(16))
    try:
        scaled_linear(torch.ones(2, 16), w_q, w_s)
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"this torch has no CPU torch._scaled_mm ({str(exc)[:80]})")


def test_scaled_linear_equals_the_fp8_reference_on_the_cpu():
    _cpu_scaled_mm_or_skip()
    torch.manual_seed(0)
    w = mask24(torch.randn(64, 128))
    w_q, w_s = quantize_weight(w)
    bias = torch.randn(64)
    x = torch.randn(3, 5, 128) * 20  # beyond e4m3's range unless scaled per token
    got = scaled_linear(x, w_q, w_s, bias.to(torch.bfloat16), out_dtype=torch.float32)
    ref = fp8_reference(x, w_q, w_s, bias.to(torch.bfloat16).float(), out_dtype=torch.float32)
    assert got.shape == (3, 5, 64)
    # the same fp8 products and scales; only the float32 summation order differs
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-4)


def test_fp8_dense_linear_keeps_the_input_dtype_and_tracks_the_float_layer():
    _cpu_scaled_mm_or_skip()
    torch.manual_seed(1)
    lin = nn.Linear(128, 64)
    layer = Fp8DenseLinear(lin)
    x = torch.randn(7, 128)
    y = layer(x)
    assert y.dtype == torch.float32 and y.shape == (7, 64)
    assert relerr(y.detach(), lin(x).detach()) < 5e-2
    assert "fp8 e4m3 dense" in repr(layer)


def test_fp8_dense_linear_refuses_sizes_off_the_16_rule_naming_them():
    with pytest.raises(ValueError, match=r"sizes 24 x 40; FP8 dense needs .*multiples of 16.*Hint"):
        Fp8DenseLinear(nn.Linear(40, 24))


def _fp8_gpu_or_skip() -> None:
    if not torch.cuda.is_available():
        pytest.skip("GPU test: no CUDA GPU")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 e4m3 needs compute capability 8.9+")


def _pruned_linear(k: int, m: int, bias: bool, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    lin = nn.Linear(k, m, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    return lin.to(torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 128, 512), (48, 512), "transposed"])
def test_an_fp8_layer_times_fp8_dense_and_both_routes_give_the_reference(bias, shape):
    from explorer.gpu import SparseLinear
    from explorer.gpu.routes.dispatch import DENSE

    _fp8_gpu_or_skip()
    lin = _pruned_linear(512, 1024, bias)
    ref_layer = Fp8ReferenceLinear(copy.deepcopy(lin).float())
    if shape == "transposed":
        x = (torch.randn(512, 96) * 20).to(torch.bfloat16).t()  # not contiguous
    else:
        x = (torch.randn(*shape) * 20).to(torch.bfloat16)
    ref = ref_layer(x.float())
    both = SparseLinear.from_linear(lin.cuda(), dtype=FP8, keep_dense=True)
    sparse_only = SparseLinear.from_linear(lin.cuda(), dtype=FP8)
    xc = x.cuda()
    chosen = both(xc)
    (decision,) = both.measured().values()
    times = decision.times("gpu")
    assert DENSE in times and any(r.kind == "sparse" for r in times), times
    tokens = xc.numel() // 512
    both.keep_dense_at(tokens)  # eager calls now take the FP8 dense route
    dense = both(xc)
    sparse = sparse_only(xc)
    for y in (chosen, dense, sparse):
        assert y.dtype == torch.bfloat16 and y.shape == (*x.shape[:-1], 1024)
        # fp8 products summed in float32 either way; the 2:4 kernel rounds its raw sum to
        # bfloat16 before the scales, FP8 dense applies them in its float32 epilogue
        assert relerr(y.float().cpu(), ref) < 1e-2
    assert relerr(dense.float(), sparse.float()) < 1e-2


@pytest.mark.gpu
def test_the_fp8_dense_route_compiles_and_replays_in_a_cuda_graph():
    from explorer.gpu import SparseLinear

    _fp8_gpu_or_skip()
    lin = _pruned_linear(512, 1024, True, seed=3)
    ref_layer = Fp8ReferenceLinear(copy.deepcopy(lin).float())
    layer = SparseLinear.from_linear(lin.cuda(), dtype=FP8, keep_dense=True)
    x = (torch.randn(16, 512) * 20).to(torch.bfloat16).cuda()
    ref = ref_layer(x.float().cpu())
    layer.keep_dense_at(16)
    eager = layer(x)  # measured, then the FP8 dense route (eager verdict)
    compiled = torch.compile(layer)(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = layer(x)
    graph.replay()
    torch.cuda.synchronize()
    for y in (eager, compiled, captured):
        assert relerr(y.float().cpu(), ref) < 1e-2


@pytest.mark.gpu
def test_sparsify_in_fp8_keeps_every_layer_fp8_and_says_what_dense_means():
    from explorer.gpu import SparseLinear, sparsify
    from explorer.gpu.modules.fp8 import fp8_reference_model

    _fp8_gpu_or_skip()
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024))
    with torch.no_grad():
        for i in (0, 2):
            model[i].weight.copy_(mask24(model[i].weight))
    model = model.to(torch.bfloat16)
    ref_model, _ = fp8_reference_model(copy.deepcopy(model).float())
    model = model.cuda()
    report = sparsify(model, dtype="float8_e4m3fn", tokens=[256, 16], tune=False)
    # FP8 2:4 or FP8 dense per token count, never back to the bf16 nn.Linear
    assert all(isinstance(model[i], SparseLinear) for i in (0, 2)), report
    assert any("FP8 dense" in note for note in report.notes), report.notes
    # a compiled model traces FP8 dense (its quantization fused by the compiler) at any count
    assert all(model[i].dense_kept and model[i].traces_dense(256) for i in (0, 2))
    for t in (256, 16):
        x = torch.randn(t, 1024).to(torch.bfloat16)
        with torch.no_grad():
            got = model(x.cuda()).float().cpu()
            ref = ref_model(x.float())
        assert relerr(got, ref) < 2e-2
