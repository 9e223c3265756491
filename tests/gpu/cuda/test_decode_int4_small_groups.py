"""The low-bit decode kernels on groups of 64 and 32 columns (several scales a tile), on the GPU.

A joint prune-and-quantize keeps its accuracy at G = 32 or 64 (docs/accuracy.md), so those are
the group sizes people ship. Their tiles hold 2 or 4 scales per row and 128 columns, read by a
build of ``kernels/decode24_int4.cu`` of their own: the sparse feeds fold the partial sums after
every group (products exact, scales applied in fp32, the output rounded once), and the expansion
feed multiplies each kept value by its scale before its mma, rounded once to 16 bits (as the
dequantizing dense route does: a relative error of at most 2^-9 a weight in bfloat16, 2^-12 in
float16, below the output's own rounding). Bounds as in ``test_decode_int4.py``: relative errors
under 4e-3 (bfloat16) and 1e-3 (float16); every code and every group's scale is checked bit for
bit through one-hot inputs (power-of-two scales, exact in every feed).
"""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import coded_exact, coded_weight, relerr

pytestmark = pytest.mark.gpu
DEV = "cuda"
TOL = {torch.bfloat16: 4e-3, torch.float16: 1e-3}
DTYPES = [torch.bfloat16, torch.float16]
FORMATS = ["int4", "int8"]
GROUPS = [64, 32]


def _int4():
    from explorer.gpu.cuda import decode_int4

    return decode_int4


def _launch():
    from explorer.gpu.cuda import coded_launch

    return coded_launch


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 2, 8, 9, 16, 17, 33, 64])
def test_matches_reference(dtype, tokens, fmt, group):
    D = _int4()
    p = coded_weight(4096, 4096, group, fmt)
    x = torch.randn(tokens, 4096, device=DEV).to(dtype)
    y = D.decode_int4_matmul(x, p)
    assert y.shape == (tokens, 4096) and y.dtype == dtype
    assert relerr(y, coded_exact(x, p)) < TOL[dtype]


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize(("n", "k"), [(16, 128), (17, 256), (1000, 4224), (14336, 4096)])
@pytest.mark.parametrize("fmt", FORMATS)
def test_odd_and_large_shapes_with_bias(n, k, fmt, group):
    D = _int4()
    p = coded_weight(n, k, group, fmt)
    b = torch.randn(n, device=DEV).to(torch.bfloat16)
    for t in (1, 5, 16, 40):
        x = torch.randn(t, k, device=DEV).to(torch.bfloat16)
        y = D.decode_int4_matmul(x, p, b)
        assert relerr(y, coded_exact(x, p, b)) < TOL[torch.bfloat16], (n, k, t)


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize(
    ("method", "ahead"), [("spa", 2), ("spa", 4), ("sp", 1), ("sp", 2), ("ex", 1), ("ex", 2)]
)
@pytest.mark.parametrize("tokens", [3, 20, 50])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_launch_configuration(method, ahead, tokens, fmt, group):
    D = _int4()
    p = coded_weight(256, 4224, group, fmt)
    x = torch.randn(tokens, 4224, device=DEV, dtype=torch.bfloat16)
    ref = coded_exact(x, p)
    tiles = _launch().token_tiles(tokens)
    for warps in (1, 2, 4, 8, 16, 32):
        config = _launch().Int4LaunchConfig(method, warps, ahead, fmt, group)
        if warps > config.max_warps(tiles):
            continue
        y = D.decode_int4_matmul(x, p, config=config)
        assert relerr(y, ref) < TOL[torch.bfloat16], config


def _every_code(fmt: str, group: int, rows: int = 256, k: int = 512):
    """Kept values running through every code of ``fmt``; each group's scale a power of two.

    The scales differ from one group to the next (1, 1/2, 1/4, 1/8, ...), so a scale applied to
    the wrong columns changes the output.
    """
    from explorer.lowbit import Int4Weight, Int8Weight, pack_int4

    qmax = 7 if fmt == "int4" else 127
    kept = torch.arange(rows * k // 2).reshape(rows, k // 2) % (2 * qmax + 1) - qmax
    meta = torch.full((rows, k // 8), 0x4 | 0xE << 4, dtype=torch.uint8)  # slots (0, 1), (2, 3)
    groups = torch.arange(k // group)
    scales = (2.0 ** -((groups + torch.arange(rows)[:, None]) % 4)).float()
    if fmt == "int4":
        return Int4Weight.from_parts(pack_int4(kept), meta, scales, (rows, k), group)
    return Int8Weight.from_parts(kept.to(torch.int8), meta, scales, (rows, k), group)


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("method", "ahead"), [("sp", 1), ("spa", 2), ("ex", 1)])
def test_every_code_and_group_scale_is_read_exactly(fmt, dtype, method, ahead, group):
    """One-hot rows pick single weights: each must come out as code times its group's scale."""
    D = _int4()
    w = _every_code(fmt, group)
    p = (D.pack_int4_weight if fmt == "int4" else D.pack_int8_weight)(w, DEV)
    dense = w.decompress().to(DEV)
    for start in (0, 64, 448):
        x = torch.eye(512, device=DEV, dtype=dtype)[start : start + 64]
        config = _launch().Int4LaunchConfig(method, 2, ahead, fmt, group)
        y = D.decode_int4_matmul(x, p, config=config)
        assert torch.equal(y, dense[:, start : start + 64].t().to(dtype)), (start, config)


@pytest.mark.parametrize("group", GROUPS)
def test_in_cuda_graph_and_beside_the_default_build(group):
    """Both builds of the file in one process, each call on its own weight, inside a graph."""
    D = _int4()
    small, wide = coded_weight(2048, 2048, group), coded_weight(2048, 2048, 128)
    x = torch.randn(16, 2048, device=DEV, dtype=torch.bfloat16)
    calls = [D.Int4DecodeCall(p, None, 16, torch.bfloat16) for p in (small, wide)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for call in calls:
            call(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ys = [call(x) for call in calls]
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        for y, p in zip(ys, (small, wide), strict=True):
            assert relerr(y, coded_exact(x, p)) < TOL[torch.bfloat16]


def test_a_launch_for_another_group_size_is_refused():
    D = _int4()
    p = coded_weight(64, 256, 64)
    x = torch.randn(2, 256, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="groups of 128 columns and the weight has groups of 64"):
        D.decode_int4_matmul(x, p, config=_launch().Int4LaunchConfig("sp", 2, 1))
    with pytest.raises(ValueError, match="groups of 32 columns and the weight has groups of 64"):
        D.Int4DecodeCall(
            p, None, 2, torch.bfloat16, _launch().Int4LaunchConfig("sp", 2, 1, group_size=32)
        )
