"""FP8 quantization and the FP8 reference layer (CPU); on the GPU machine, the kernel against it."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from gpu_helpers import mask24, relerr
from torch import nn

from explorer.gpu.modules.fp8 import (
    FP8,
    FP8_MAX,
    Fp8ReferenceLinear,
    check_quantized_weight,
    fp8_reference,
    fp8_reference_model,
    quantize_activations,
    quantize_weight,
    row_scales,
)


def test_weight_scales_are_per_channel_amax_over_448():
    w = torch.tensor([[0.5, -4.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1e-3, 0.0, 0.0, 0.0]])
    q, s = quantize_weight(w)
    assert q.dtype == FP8 and s.dtype == torch.float32
    torch.testing.assert_close(s, torch.tensor([4.0 / 448, 1.0, 1e-3 / 448]))
    # the largest magnitude of each nonzero row lands on 448 exactly
    assert q.float()[0, 1] == -FP8_MAX and q.float()[2, 0] == FP8_MAX
    # an all-zero row: scale 1, values 0, nothing NaN
    assert q.float()[1].tolist() == [0.0] * 4 and s[1] == 1.0
    assert torch.isfinite(q.float()).all() and (s > 0).all()


def test_scales_never_zero_or_nan_even_for_tiny_rows():
    tiny = torch.tensor([[1e-44, 0.0], [0.0, 0.0]])  # a subnormal amax underflows when divided
    s = row_scales(tiny)
    assert (s > 0).all() and torch.isfinite(s).all()
    q, _ = quantize_activations(tiny)
    assert torch.isfinite(q.float()).all()


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_weights_are_refused_naming_the_layer(bad):
    w = torch.ones(4, 8)
    w[2, 5] = bad
    with pytest.raises(ValueError, match=r"layer 'mlp.up' holds 1 non-finite.*\[2, 5\].*Hint"):
        quantize_weight(w, name="layer 'mlp.up'")
    lin = nn.Linear(32, 32)
    with torch.no_grad():
        lin.weight[0, 0] = bad
    with pytest.raises(ValueError, match="layer '0'"):
        fp8_reference_model(nn.Sequential(lin), require_24=False)


def test_weight_must_be_2d():
    with pytest.raises(ValueError, match=r"must be 2-D.*\(4,\)"):
        quantize_weight(torch.ones(4))


def test_a_24_weight_stays_24_after_quantization():
    torch.manual_seed(0)
    w = mask24(torch.randn(64, 128) * torch.logspace(-2, 2, 128))  # 1e4 apart in each row
    q, _ = quantize_weight(w)
    nz = q.float() != 0
    assert torch.equal(nz, w != 0)  # zeros stay zeros, and no nonzero underflows to zero here
    assert ((nz.reshape(-1, 4)).sum(1) <= 2).all()
    # beyond e4m3's range within a row, tiny values may round to zero: never the other way
    w = mask24(torch.randn(64, 128) * torch.logspace(-8, 2, 128))
    q, _ = quantize_weight(w)
    assert not ((q.float() != 0) & (w == 0)).any()


def test_codes_and_scales_quantized_elsewhere_are_checked_and_kept():
    torch.manual_seed(0)
    q, s = quantize_weight(mask24(torch.randn(64, 128)))
    got_q, got_s = check_quantized_weight(q, s, (64, 128), "layer 'fc'")
    assert got_q is q and got_s is s  # contiguous already: the same tensors, not copies
    for codes, scale, match in (
        (q.float(), s, r"codes of layer 'fc' must be a torch.float8_e4m3fn tensor"),
        (q[:, :64], s, r"shape \(64, 128\), got \(\(64, 64\), torch.float8_e4m3fn\)"),
        (q, s[:, None], r"scales of layer 'fc' must be .* shape \(64,\), got \(\(64, 1\)"),
        (q, s.double(), r"torch.float32 tensor of shape \(64,\), got \(\(64,\), torch.float64"),
        (q, s.index_fill(0, torch.tensor([5]), math.nan), r"1 of 64 are not \(row 5: nan\)"),
        (q, -s, r"64 of 64 are not \(row 0: -.*Hint"),
        (q, s * 0, r"must be finite and positive; 64 of 64 are not \(row 0: 0\.0\)"),
    ):
        with pytest.raises(ValueError, match=match):
            check_quantized_weight(codes, scale, (64, 128), "layer 'fc'")


def test_activation_scales_are_per_token():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 64) * torch.tensor([1e-3, 1.0, 1e3])[None, :, None].repeat(1, 5, 1)[:, :5]
    q, s = quantize_activations(x)
    assert q.shape == x.shape and s.shape == x.shape[:-1]
    torch.testing.assert_close(s, x.abs().amax(-1) / FP8_MAX)
    # each token's dequantized row is within e4m3's half-ulp (2**-4 relative) of the input
    err = (q.float() * s[..., None] - x).abs()
    assert (err <= x.abs() * 2**-4 + s[..., None] * 2**-9).all()


def test_reference_matches_float64_of_the_quantized_values():
    torch.manual_seed(0)
    lin = nn.Linear(1024, 96).requires_grad_(False)
    x = torch.randn(7, 1024)
    w_q, w_s = quantize_weight(lin.weight)
    got = fp8_reference(x, w_q, w_s, lin.bias.detach())
    x_q, x_s = quantize_activations(x)
    exact = (x_q.double() @ w_q.double().t()) * w_s.double() * x_s.double()[:, None]
    exact = exact + lin.bias.double()
    # float32 accumulation over 1024 products: a few float32 ulps of the largest partial sums
    torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-6)
    # and close to the float64 layer: e4m3 rounds each operand to 2**-4 relative at most
    full = x.double() @ lin.weight.double().t() + lin.bias.double()
    assert relerr(got, full) < 4e-2


def test_reference_rounds_once_to_the_output_dtype():
    torch.manual_seed(0)
    lin = nn.Linear(64, 32).requires_grad_(False)
    x = torch.randn(4, 64)
    w_q, w_s = quantize_weight(lin.weight)
    y32 = fp8_reference(x, w_q, w_s, lin.bias.detach())
    ybf = fp8_reference(x, w_q, w_s, lin.bias.detach(), out_dtype=torch.bfloat16)
    assert ybf.dtype == torch.bfloat16
    assert torch.equal(ybf, y32.to(torch.bfloat16))
    assert fp8_reference(x.to(torch.bfloat16), w_q, w_s).dtype == torch.bfloat16


def test_reference_linear_keeps_shapes_and_zero_rows():
    torch.manual_seed(0)
    lin = nn.Linear(64, 32).requires_grad_(False)
    with torch.no_grad():
        lin.weight[3] = 0
    ref = Fp8ReferenceLinear(lin)
    x = torch.randn(2, 3, 64)
    x[0, 1] = 0  # an all-zero token
    y = ref(x)
    assert y.shape == (2, 3, 32) and torch.isfinite(y).all()
    torch.testing.assert_close(y[0, 1], lin.bias.detach())  # zero token: the bias alone
    torch.testing.assert_close(y[:, :, 3], lin.bias.detach()[3].expand(2, 3))
    assert relerr(y, lin(x)) < 4e-2
    with pytest.raises(ValueError, match="expected 64"):
        ref(torch.ones(2, 63))


def test_fp8_reference_model_swaps_what_sparsify_would():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 96), nn.Linear(96, 48))
    model.requires_grad_(False)
    for m in (model[0], model[2], model[3]):
        m.weight.copy_(mask24(m.weight))
    out, names = fp8_reference_model(model)
    assert names == ["0", "2"]  # "3" has 48 outputs: off the 8-bit alignment of 32
    assert isinstance(out[0], Fp8ReferenceLinear) and isinstance(model[0], nn.Linear)
    assert fp8_reference_model(model, filter_fn=lambda m, fqn: fqn != "0")[1] == ["2"]
    # the 2:4 zeros survive in the quantized weight
    assert torch.equal(out[0].qweight.float() != 0, model[0].weight != 0)
    x = torch.randn(5, 64)
    assert relerr(out(x), model(x)) < 4e-2


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(37, 256), (2, 9, 256)])
@pytest.mark.parametrize("act", [torch.float16, torch.bfloat16])
def test_fp8_kernel_matches_the_reference(shape, act):
    from explorer.gpu import SparseLinear

    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 e4m3 needs compute capability 8.9+")
    torch.manual_seed(0)
    lin = nn.Linear(256, 512)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    # beyond e4m3's range unless scaled per token; rounded to the layer's dtype first, so the
    # reference quantizes the same values the kernel sees (bfloat16 rounding moves about one
    # value in 16 across an fp8 rounding boundary)
    x = (torch.randn(*shape) * 20).to(act)
    lin = lin.to(act)
    ref = Fp8ReferenceLinear(copy.deepcopy(lin).float())(x.float())
    sl = SparseLinear.from_linear(lin.to("cuda"), dtype=FP8)
    got = sl(x.to("cuda")).float().cpu()
    # the kernel rounds its raw sum to bfloat16 before the scales, and its output to ``act``
    assert relerr(got, ref) < 1e-2


def test_a_fused_pass_that_fails_falls_back_for_good_with_the_same_values(monkeypatch):
    from explorer.gpu.modules import fp8

    monkeypatch.setattr(fp8, "_FUSED", {})

    def broken(x):
        raise RuntimeError("no working Triton here")

    run = fp8._checked(broken)
    x = torch.randn(4, 16) * 30
    with pytest.warns(RuntimeWarning, match=r"could not be compiled .*no working Triton.*Hint"):
        q, s = run(x)
    ref_q, ref_s = quantize_activations(x)  # a CPU tensor: the plain steps
    assert torch.equal(q.float(), ref_q.float()) and torch.equal(s, ref_s)
    assert fp8._FUSED["fn"] is None  # never tried again in this process


def assert_same_quantization(q, s, ref_q, ref_s):
    """The fused pass against the plain steps: the same scales (to float32 rounding), and fp8
    values that differ, where at all, by one fp8 step in at most one value in a thousand.

    Triton's float32 division is correct to 2 ulp, not correctly rounded, so a quotient that
    lands on a rounding boundary of the fp8 grid may round to the neighbouring value.
    """
    torch.testing.assert_close(s, ref_s, rtol=3e-7, atol=0)
    a, b = q.float(), ref_q.float()
    step = torch.maximum(b.abs(), a.abs()) / 8 + 2.0**-9  # e4m3: 3 mantissa bits; subnormals
    assert bool(((a - b).abs() <= step).all()), "a value moved by more than one fp8 step"
    moved = (q.view(torch.uint8) != ref_q.view(torch.uint8)).float().mean().item()
    assert moved <= 1e-3, f"{moved:.2e} of the values differ from the plain steps'"


def test_the_quantization_check_catches_a_value_two_steps_away():
    q = torch.tensor([[64.0, 8.0]]).to(FP8)
    s = torch.ones(1)
    assert_same_quantization(q, s, q, s)
    with pytest.raises(AssertionError, match="more than one fp8 step"):
        assert_same_quantization(torch.tensor([[80.0, 8.0]]).to(FP8), s, q, s)


def test_inside_a_capture_a_kernel_that_would_compile_gives_the_plain_steps_and_stays(monkeypatch):
    from explorer.gpu.modules import fp8

    def would_recompile(x):
        raise RuntimeError("Detected recompile when torch.compile stance is 'fail_on_recompile'")

    run = fp8._checked(would_recompile)
    monkeypatch.setattr(fp8, "_FUSED", {"fn": run})
    x = torch.randn(4, 16) * 30
    q, s = run(x, True)
    ref_q, ref_s = quantize_activations(x)
    assert torch.equal(q.float(), ref_q.float()) and torch.equal(s, ref_s)
    assert fp8._FUSED["fn"] is run  # used again after the capture


@pytest.fixture
def fused_pass_only(monkeypatch):
    """The fused ``torch.compile`` pass, with the CUDA kernel that goes before it switched off."""
    from explorer.gpu.modules import fp8

    monkeypatch.setitem(fp8._KERNEL, "ok", False)


@pytest.mark.gpu
@pytest.mark.usefixtures("fused_pass_only")
@pytest.mark.parametrize("shape", [(4096, 4096), (1, 14336), (7, 1000), (3, 5, 384), "transposed"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_fused_pass_on_the_gpu_gives_the_plain_steps_values(shape, dtype):
    from explorer.gpu.modules import fp8

    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 e4m3 needs compute capability 8.9+")
    torch.manual_seed(0)
    if shape == "transposed":
        x = (torch.randn(512, 64, device="cuda") * 50).to(dtype).t()  # not contiguous
    else:
        x = (torch.randn(*shape, device="cuda") * 50).to(dtype)
        x[..., 0, :] = 0  # an all-zero row: scale 1
    q, s = quantize_activations(x)
    assert fp8._FUSED.get("fn") is not None, "the fused pass fell back on this machine"
    ref_q, ref_s = fp8._quantize_rows(x)
    assert q.dtype == FP8 and q.shape == x.shape and s.shape == x.shape[:-1]
    assert_same_quantization(q, s, ref_q, ref_s)


def captured_quantization(y):
    """``quantize_activations(y)`` captured in a CUDA graph, replayed once: its outputs."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        q, s = quantize_activations(y)
    graph.replay()
    torch.cuda.synchronize()
    return q, s


@pytest.mark.gpu
@pytest.mark.usefixtures("fused_pass_only")
def test_a_capture_of_an_input_seen_before_runs_the_fused_pass_with_the_same_values(monkeypatch):
    from explorer.gpu.modules import fp8

    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 e4m3 needs compute capability 8.9+")
    x = (torch.randn(256, 512, device="cuda") * 40).to(torch.bfloat16)
    quantize_activations(x)  # outside a capture: compiles and marks the signature warm
    calls = []
    fused = fp8._FUSED["fn"]
    monkeypatch.setitem(fp8._FUSED, "fn", lambda t, cap: calls.append(cap) or fused(t, cap))
    y = (torch.randn(300, 512, device="cuda") * 40).to(torch.bfloat16)  # other rows, same kind
    q, s = captured_quantization(y)
    assert calls == [True]
    ref_q, ref_s = fp8._quantize_rows(y)
    assert_same_quantization(q, s, ref_q, ref_s)


@pytest.mark.gpu
@pytest.mark.usefixtures("fused_pass_only")
def test_a_capture_of_a_new_kind_of_input_takes_the_plain_steps(monkeypatch):
    from explorer.gpu.modules import fp8

    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 e4m3 needs compute capability 8.9+")
    monkeypatch.setattr(fp8, "_WARM", set())
    calls = []
    monkeypatch.setitem(fp8._FUSED, "fn", lambda t, cap: calls.append(cap))
    y = (torch.randn(3, 5, 384, device="cuda") * 40).to(torch.float16)
    q, s = captured_quantization(y)
    assert calls == []
    ref_q, ref_s = fp8._quantize_rows(y)
    assert_same_quantization(q, s, ref_q, ref_s)
