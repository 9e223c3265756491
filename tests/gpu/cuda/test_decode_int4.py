"""The 2:4 + int4 and 2:4 + int8 decode kernels against their reference on fresh random inputs (GPU).

The kernel's products of codes and activations are exact in its fp32 accumulation and the
scales are applied in fp32, so what separates it from a float64 product of the same operands
is fp32 summation and the one rounding of the output to the activations' dtype: relative
errors (``|y - ref| / |ref|``, ``ref`` in float64) stay under 4e-3 for bfloat16 (8-bit
mantissa; the rounding alone is about 1e-3) and under 1e-3 for float16 (11-bit mantissa). int8
codes times 16-bit activations are exact in fp32 too (7 + 11 significant bits), so the bounds
are the same; every code of either format is checked exactly through one-hot inputs.
"""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import coded_exact, coded_weight, relerr

pytestmark = pytest.mark.gpu
DEV = "cuda"
TOL = {torch.bfloat16: 4e-3, torch.float16: 1e-3}
DTYPES = [torch.bfloat16, torch.float16]
SHAPES_8B = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
FORMATS = ["int4", "int8"]


def _int4():
    from explorer.gpu.cuda import decode_int4

    return decode_int4


def _launch():
    from explorer.gpu.cuda import coded_launch

    return coded_launch


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 2, 7, 8, 9, 16, 17, 31, 32, 33, 64])
def test_matches_reference(dtype, tokens, fmt):
    D = _int4()
    p = coded_weight(4096, 4096, fmt=fmt)
    x = torch.randn(tokens, 4096, device=DEV).to(dtype)
    y = D.decode_int4_matmul(x, p)
    assert y.shape == (tokens, 4096) and y.dtype == dtype and y.is_contiguous()
    assert relerr(y, coded_exact(x, p)) < TOL[dtype]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("n", "k"), SHAPES_8B)
@pytest.mark.parametrize("dtype", DTYPES)
def test_llama_8b_layer_shapes(n, k, dtype, fmt):
    D = _int4()
    p = coded_weight(n, k, fmt=fmt)
    for t in (1, 4, 16, 33, 64):
        x = torch.randn(t, k, device=DEV).to(dtype)
        assert relerr(D.decode_int4_matmul(x, p), coded_exact(x, p)) < TOL[dtype], (n, k, t)


@pytest.mark.parametrize(
    ("n", "k", "group"),
    [
        (16, 128, 128),
        (17, 256, 128),
        (8, 384, 384),
        (40, 512, 256),
        (1000, 4224, 128),
        (1023, 4608, 1536),
    ],
)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_odd_shapes_group_sizes_and_bias(n, k, group, dtype, fmt):
    D = _int4()
    p = coded_weight(n, k, group, fmt)
    b = torch.randn(n, device=DEV).to(dtype)
    for t in (1, 5, 16):
        x = torch.randn(t, k, device=DEV).to(dtype)
        y = D.decode_int4_matmul(x, p, b)
        assert relerr(y, coded_exact(x, p, b)) < TOL[dtype], (n, k, t)
        cpu = D.decode_int4_reference(x.cpu(), p, b.cpu())
        assert relerr(y.cpu(), cpu.double()) < TOL[dtype]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_output_written(fmt):
    """Poisoned outputs would show as NaN: the kernel writes each element exactly once."""
    D = _int4()
    p = coded_weight(1000, 4224, fmt=fmt)
    x = torch.randn(33, 4224, device=DEV, dtype=torch.bfloat16)
    torch.cuda.empty_cache()
    junk = torch.full((33 * 1000 * 4,), float("nan"), device=DEV)  # poison the allocator's blocks
    del junk
    y = D.decode_int4_matmul(x, p)
    assert bool(torch.isfinite(y).all())


@pytest.mark.parametrize("fmt", FORMATS)
def test_noncontiguous_inputs_and_leading_dims(fmt):
    D = _int4()
    p = coded_weight(512, 1024, fmt=fmt)
    wide = torch.randn(6, 1024 + 64, device=DEV, dtype=torch.float16)
    rows = wide[:, 32 : 32 + 1024]  # a row stride of 1088 elements, used in place
    assert relerr(D.decode_int4_matmul(rows, p), coded_exact(rows, p)) < TOL[torch.float16]
    every_other = torch.randn(4, 3, 2048, device=DEV, dtype=torch.float16)[..., ::2]
    y = D.decode_int4_matmul(every_other, p)  # stride 2 in the last dim: copied first
    assert y.shape == (4, 3, 512)
    assert relerr(y, coded_exact(every_other, p)) < TOL[torch.float16]
    xt = torch.randn(1024, 6, device=DEV, dtype=torch.float16).t()  # a transposed view
    assert relerr(D.decode_int4_matmul(xt, p), coded_exact(xt, p)) < TOL[torch.float16]
    call = D.Int4DecodeCall(p, None, 6, torch.float16)
    assert relerr(call(rows), coded_exact(rows, p)) < TOL[torch.float16]
    assert relerr(call(xt), coded_exact(xt, p)) < TOL[torch.float16]


@pytest.mark.parametrize(
    ("method", "ahead"), [("spa", 2), ("spa", 4), ("sp", 1), ("sp", 2), ("ex", 1), ("ex", 2)]
)
@pytest.mark.parametrize("tokens", [3, 20, 50])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_launch_configuration(method, ahead, tokens, fmt):
    D = _int4()
    p = coded_weight(256, 4224, fmt=fmt)
    x = torch.randn(tokens, 4224, device=DEV, dtype=torch.bfloat16)
    ref = coded_exact(x, p)
    tiles = _launch().token_tiles(tokens)
    for warps in (1, 2, 4, 8, 16, 32):
        config = _launch().Int4LaunchConfig(method, warps, ahead, fmt)
        if warps > config.max_warps(tiles):
            continue
        y = D.decode_int4_matmul(x, p, config=config)
        assert relerr(y, ref) < TOL[torch.bfloat16], config


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_call_matches_the_function_and_has_bias(dtype, fmt):
    D = _int4()
    p = coded_weight(2048, 4096, fmt=fmt)
    b = torch.randn(2048, device=DEV).to(dtype)
    for t in (1, 16, 64):
        x = torch.randn(t, 4096, device=DEV).to(dtype)
        call = D.Int4DecodeCall(p, b, t, dtype)
        assert torch.equal(call(x), D.decode_int4_matmul(x, p, b))
        assert relerr(call(x), coded_exact(x, p, b)) < TOL[dtype]


@pytest.mark.parametrize("fmt", FORMATS)
def test_in_cuda_graph(fmt):
    D = _int4()
    p = coded_weight(2048, 2048, fmt=fmt)
    x = torch.randn(4, 2048, device=DEV, dtype=torch.bfloat16)
    call = D.Int4DecodeCall(p, None, 4, torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call(x)
        D.decode_int4_matmul(x, p)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y_call = call(x)
        y_fn = D.decode_int4_matmul(x, p)
    for _ in range(2):  # fresh inputs each replay
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert relerr(y_call, coded_exact(x, p)) < TOL[torch.bfloat16]
        assert torch.equal(y_call, y_fn)


def _every_code(fmt: str, rows: int = 256, k: int = 512):
    """A weight whose first 32 kept values a row run through every code of ``fmt``, scale 1."""
    from explorer.lowbit import Int4Weight, Int8Weight, pack_int4

    qmax = 7 if fmt == "int4" else 127
    kept = torch.arange(rows * k // 2).reshape(rows, k // 2) % (2 * qmax + 1) - qmax
    meta = torch.full((rows, k // 8), 0x4 | 0xE << 4, dtype=torch.uint8)  # slots (0, 1), (2, 3)
    scales = torch.ones(rows, k // 128)
    if fmt == "int4":
        return Int4Weight.from_parts(pack_int4(kept), meta, scales, (rows, k), 128)
    return Int8Weight.from_parts(kept.to(torch.int8), meta, scales, (rows, k), 128)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("method", "ahead"), [("sp", 1), ("spa", 2), ("ex", 1)])
def test_every_code_is_read_exactly(fmt, dtype, method, ahead):
    """One-hot rows pick single weights: each code must come out as itself, bit for bit."""
    D = _int4()
    w = _every_code(fmt)
    p = (D.pack_int4_weight if fmt == "int4" else D.pack_int8_weight)(w, DEV)
    dense = w.decompress().to(DEV)
    for start in (0, 64, 448):
        x = torch.eye(512, device=DEV, dtype=dtype)[start : start + 64]
        config = _launch().Int4LaunchConfig(method, 2, ahead, fmt)
        y = D.decode_int4_matmul(x, p, config=config)
        assert torch.equal(y, dense[:, start : start + 64].t().to(dtype)), (start, config)


class _Layer(torch.nn.Module):
    """A layer whose product is an Int4DecodeCall, with work around it for the compiler."""

    def __init__(self, call) -> None:
        super().__init__()
        self.call = call

    def forward(self, x):
        return torch.relu(self.call(x * 2.0)) + 1.0


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_under_torch_compile(mode, fmt):
    D = _int4()
    p = coded_weight(1024, 3072, fmt=fmt)
    x = torch.randn(16, 3072, device=DEV, dtype=torch.bfloat16)
    layer = _Layer(D.Int4DecodeCall(p, None, 16, torch.bfloat16))
    eager = layer(x)
    torch._dynamo.reset()
    try:
        fn = torch.compile(layer, mode=mode, dynamic=False, fullgraph=True)
        for _ in range(3):
            out = fn(x)
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
        x2 = torch.randn_like(x)
        out2 = fn(x2).clone()
        assert torch.equal(out2, layer(x2))
    finally:
        torch._dynamo.reset()


def test_refuses_bad_input():
    D = _int4()
    p = coded_weight(64, 256)
    with pytest.raises(ValueError, match="65 rows"):
        D.decode_int4_matmul(torch.randn(65, 256, device=DEV, dtype=torch.float16), p)
    with pytest.raises(ValueError, match="expected K = 256"):
        D.decode_int4_matmul(torch.randn(1, 128, device=DEV, dtype=torch.float16), p)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        D.decode_int4_matmul(torch.randn(1, 256, device=DEV), p)
    with pytest.raises(ValueError, match="bias must be"):
        b = torch.zeros(64, device=DEV)
        D.decode_int4_matmul(torch.randn(1, 256, device=DEV, dtype=torch.float16), p, b)
    with pytest.raises(ValueError, match="for int4 codes and the weight holds int8"):
        x = torch.randn(1, 256, device=DEV, dtype=torch.float16)
        D.decode_int4_matmul(
            x, coded_weight(64, 256, fmt="int8"), config=_launch().Int4LaunchConfig("sp", 2, 1)
        )
