"""The 2:4 decode kernel against its reference on fresh random inputs (GPU)."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import mask24, relerr

pytestmark = pytest.mark.gpu
DEV = "cuda"
TOL = 2e-3  # relative error allowed for 16-bit inputs with float32 accumulation


def _decode():
    from explorer.gpu.cuda import decode

    return decode


def _weight(n, k, dtype):
    return mask24(torch.randn(n, k, device=DEV)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [1, 2, 7, 8, 9, 16, 17, 31, 32, 33, 64])
@pytest.mark.parametrize("int8", [False, True])
def test_decode_matches_reference(dtype, tokens, int8):
    D = _decode()
    w = _weight(4096, 4096, dtype)
    x = torch.randn(tokens, 4096, device=DEV).to(dtype)
    p = D.pack(w, int8=int8)
    ref = x.double() @ p.decompress().double().t()
    y = D.decode_matmul(x, p)
    assert y.shape == (tokens, 4096) and y.dtype == dtype and y.is_contiguous()
    assert relerr(y, ref) < TOL


@pytest.mark.parametrize(
    ("n", "k"),
    [(16, 16), (17, 32), (1000, 4096 + 16), (1023, 4096 + 48), (8, 64), (4096, 14336)],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_odd_shapes_and_bias(n, k, dtype):
    D = _decode()
    w = _weight(n, k, dtype)
    b = torch.randn(n, device=DEV).to(dtype)
    for t in (1, 5, 16):
        x = torch.randn(t, k, device=DEV).to(dtype)
        y = D.decode_matmul(x, D.pack(w), b)
        ref = x.double() @ w.double().t() + b.double()
        assert relerr(y, ref) < TOL, (n, k, t)
        cpu = D.decode_matmul_reference(x.cpu(), D.pack(w.cpu()), b.cpu())
        assert relerr(y.cpu(), cpu.double()) < TOL


@pytest.mark.parametrize(
    ("n", "k"),
    [(17, 32), (1000, 4096 + 96), (1023, 4096 + 112), (64, 4096 + 16), (8, 128), (4096, 14336)],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int8_decode_odd_shapes_and_bias(n, k, dtype):
    """int8 values: the wide kernel (K % 32 == 0, up to 16 tokens) with every tail, else the
    64-column one."""
    D = _decode()
    p = D.pack(_weight(n, k, dtype), int8=True)
    b = torch.randn(n, device=DEV).to(dtype)
    # a few outputs: the output's own rounding (bf16: up to 2^-8 relative) sets the bound
    tol = 4e-3 if dtype == torch.bfloat16 else TOL
    for t in (1, 9, 16, 17):
        x = torch.randn(t, k, device=DEV).to(dtype)
        ref = x.double() @ p.decompress().double().t() + b.double()
        assert relerr(D.decode_matmul(x, p, b), ref) < tol, (n, k, t)
        call = D.DecodeCall(p, b, t, dtype)
        assert relerr(call(x), ref) < tol, (n, k, t)


def test_decode_every_output_written():
    """Poisoned outputs would show as NaN: the kernel writes each element exactly once."""
    D = _decode()
    w = _weight(1000, 4096 + 48, torch.bfloat16)
    x = torch.randn(33, 4096 + 48, device=DEV, dtype=torch.bfloat16)
    torch.cuda.empty_cache()
    junk = torch.full((33 * 1000 * 4,), float("nan"), device=DEV)  # poison the allocator's blocks
    del junk
    y = D.decode_matmul(x, D.pack(w))
    assert bool(torch.isfinite(y).all())


def test_decode_noncontiguous_and_leading_dims():
    D = _decode()
    w = _weight(512, 1024, torch.float16)
    p = D.pack(w)
    wide = torch.randn(4, 3, 1024 * 2, device=DEV, dtype=torch.float16)
    x = wide[..., ::2]  # stride 2 in the last dim: copied first
    y = D.decode_matmul(x, p)
    assert y.shape == (4, 3, 512)
    assert relerr(y, x.double() @ w.double().t()) < TOL
    xt = torch.randn(1024, 6, device=DEV, dtype=torch.float16).t()  # a transposed view
    assert relerr(D.decode_matmul(xt, p), xt.double() @ w.double().t()) < TOL


@pytest.mark.parametrize("warps", [1, 2, 4, 8, 16, 32])
def test_decode_any_warp_count(warps):
    D = _decode()
    w = _weight(256, 4096 + 16, torch.bfloat16)
    x = torch.randn(3, 4096 + 16, device=DEV, dtype=torch.bfloat16)
    y = D.decode_matmul(x, D.pack(w), warps=warps)
    assert relerr(y, x.double() @ w.double().t()) < TOL


def test_decode_in_cuda_graph():
    D = _decode()
    w = _weight(2048, 2048, torch.bfloat16)
    p = D.pack(w)
    x = torch.randn(4, 2048, device=DEV, dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        D.decode_matmul(x, p)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = D.decode_matmul(x, p)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert relerr(y, x.double() @ w.double().t()) < TOL


def test_decode_refuses_bad_input():
    D = _decode()
    p = D.pack(_weight(64, 64, torch.float16))
    with pytest.raises(ValueError, match="65 rows"):
        D.decode_matmul(torch.randn(65, 64, device=DEV, dtype=torch.float16), p)
    with pytest.raises(TypeError, match="must match"):
        D.decode_matmul(torch.randn(1, 64, device=DEV, dtype=torch.bfloat16), p)
    with pytest.raises(ValueError, match="expected K = 64"):
        D.decode_matmul(torch.randn(1, 32, device=DEV, dtype=torch.float16), p)


def _linear(k, n, dtype, bias=True):
    from torch import nn

    lin = nn.Linear(k, n, bias=bias, device=DEV, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight.float()).to(dtype))
    return lin


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sparse_linear_measures_and_runs_the_decode_route(dtype):
    from explorer.gpu import SparseLinear
    from explorer.gpu.routes.dispatch import DECODE

    lin = _linear(4096, 4096, dtype)
    sl = SparseLinear.from_linear(lin, keep_dense=True, decode=True)
    assert sl.decode_kept
    for t in (1, 16, 100):
        x = torch.randn(t, 4096, device=DEV, dtype=dtype)
        assert relerr(sl(x), lin(x)) < TOL
    decided = sl.decisions()
    assert all(DECODE in times for n, (_, times) in decided.items() if n <= 64)
    assert not any(DECODE in times for n, (_, times) in decided.items() if n > 64)
    sl._force = DECODE  # the decode path itself, whatever the measurement chose
    x = torch.randn(2, 3, 4096, device=DEV, dtype=dtype)
    assert relerr(sl(x), lin(x)) < TOL


def test_sparse_linear_int8_decode_is_weight_only():
    from explorer.gpu import SparseLinear
    from explorer.gpu.cuda.decode import decode_matmul_reference
    from explorer.gpu.routes.dispatch import DECODE

    lin = _linear(2048, 1024, torch.bfloat16)
    sl = SparseLinear.from_linear(lin, dtype=torch.int8, decode=True)
    x = torch.randn(4, 2048, device=DEV, dtype=torch.bfloat16)
    y = sl(x)  # measured: decode or the cuSPARSELt int8 route, both close to dense
    assert relerr(y, lin(x)) < 3e-2
    sl._force = DECODE
    ref = decode_matmul_reference(x, sl.decode_weight(), lin.bias.detach())
    assert relerr(sl(x), ref) < TOL


def test_sparse_linear_decode_compiled_with_cuda_graphs():
    from explorer.gpu import SparseLinear
    from explorer.gpu.routes.dispatch import DECODE

    lin = _linear(1024, 3072, torch.bfloat16)
    sl = SparseLinear.from_linear(lin, decode=True)
    sl._force = DECODE
    x = torch.randn(16, 1024, device=DEV, dtype=torch.bfloat16)
    eager = sl(x)
    torch._dynamo.reset()
    fn = torch.compile(sl, mode="reduce-overhead", dynamic=False)
    for _ in range(3):
        out = fn(x)
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    torch._dynamo.reset()


def test_drop_decode_frees_and_measures_nothing_again(monkeypatch):
    from explorer.gpu import SparseLinear
    from explorer.gpu.routes.route_timing import BOOK

    sl = SparseLinear.from_linear(_linear(512, 512, torch.float16), decode=True)
    x = torch.randn(8, 512, device=DEV, dtype=torch.float16)
    before = sl(x)
    sl.drop_decode()
    assert not sl.decode_kept

    def measured_again(*args, **kwargs):
        raise AssertionError("the routes other than the decode kernel's were timed already")

    monkeypatch.setattr(BOOK, "decide", measured_again)
    assert relerr(sl(x), before) < TOL
    assert all(r.kind != "decode" for r, _ in sl.decisions().values())
