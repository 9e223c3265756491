"""The CUDA kernels against their CPU references on fresh random inputs."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import mask24

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _K():
    from explorer.gpu.cuda import kernels

    return kernels


@pytest.mark.parametrize(("n", "m"), [(2, 4), (1, 4), (4, 8), (2, 8), (8, 16)])
def test_nm_mask(n, m):
    K = _K()
    s = torch.randn(97, 64, device=DEV)
    s[0, :4] = float("nan")
    got = K.nm_mask(s, n, m).cpu()
    assert torch.equal(got, K.nm_mask_reference(s.cpu(), n, m))
    assert int(got.reshape(-1, m).sum(1).max()) == n


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8])
@pytest.mark.parametrize("numel_rows", [1, 33, 1000])
def test_nm_histogram(dtype, numel_rows):
    K = _K()
    w = mask24(torch.randn(numel_rows, 96, device=DEV))
    w[torch.rand_like(w) < 0.1] = 0
    bad = torch.rand(numel_rows, device=DEV) < 0.05
    w[bad, 8:12] = 1.0
    w[0, 0] = -0.0
    w = (w * 50).to(dtype)
    got = K.nm_histogram(w)
    ref = K.nm_histogram_reference(w.cpu())
    assert got.counts == ref.counts
    assert got.first_violation == ref.first_violation
    for n, m in [(1, 4), (3, 4), (4, 8)]:
        assert K.nm_histogram(w, n, m).counts == K.nm_histogram_reference(w.cpu(), n, m).counts


def test_nm_histogram_matches_checks():
    from explorer.checks import check_pattern

    K = _K()
    w = mask24(torch.randn(64, 128, device=DEV)).half()
    w[3, :4] = 1
    got = K.nm_histogram(w)
    rep = check_pattern(w.cpu(), "2:4")
    assert got.violations == rep.violations
    assert got.as_dict() == dict(rep.histogram)


@pytest.mark.parametrize(
    ("rows", "cols", "tile"),
    [(1000, 777, None), (64, 64, (3, 5)), (2048, 4096, None), (7, 9, (4, 4))],
)
def test_block_density(rows, cols, tile):
    K = _K()
    m = torch.rand(rows, cols, device=DEV) > 0.3
    got = K.block_density(m, tile=tile).cpu()
    ref = K.block_density_reference(m.cpu(), tile=tile)
    assert got.shape == ref.shape and max(got.shape) <= 512
    assert torch.allclose(got, ref, atol=1e-6)


def test_kernels_refuse_cpu_tensors():
    K = _K()
    with pytest.raises(ValueError, match="CUDA"):
        K.nm_histogram(torch.zeros(4, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("tokens", "hidden"), [(64, 1376), (40, 96), (33, 96), (8, 12)])
@pytest.mark.parametrize("transposed", [False, True])
def test_silu_mul(dtype, tokens, hidden, transposed):
    K = _K()
    if transposed:  # a transposed view of [2h, tokens], as the "r" output layout returns it
        gu = (torch.randn(2 * hidden, tokens, device=DEV) * 4).to(dtype).t()
    else:
        gu = (torch.randn(tokens, 2 * hidden, device=DEV) * 4).to(dtype)
    got = K.silu_mul(gu)
    assert got.shape == (tokens, hidden)
    assert got.dtype == dtype
    # the layout is kept, so a following "r"-layout sparse layer needs no copy
    assert got.t().is_contiguous() == (transposed and not got.is_contiguous())
    ref = K.silu_mul_reference(gu.cpu()).float()
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3  # one rounding of each output
    torch.testing.assert_close(got.cpu().float(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("tokens", "hidden"), [(1, 8960), (16, 1376), (3, 96)])
def test_silu_mul_call_set_up_once_matches_the_reference(dtype, tokens, hidden):
    K = _K()
    call = K.SiluMulCall(tokens, hidden, dtype, torch.device(DEV))
    for _ in range(2):  # fresh inputs at new addresses through the same launch state
        gu = (torch.randn(tokens, 2 * hidden, device=DEV) * 4).to(dtype)
        assert call.fits(gu)
        got = call(gu)
        ref = K.silu_mul_reference(gu.cpu()).float()
        tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
        torch.testing.assert_close(got.cpu().float(), ref, rtol=tol, atol=tol)
    transposed = torch.randn(2 * hidden, tokens, device=DEV).to(dtype).t()
    assert not call.fits(transposed) or tokens == 1
    assert not call.fits(torch.randn(tokens + 1, 2 * hidden, device=DEV).to(dtype))
    with pytest.raises(ValueError, match="multiple of 8"):
        K.SiluMulCall(tokens, 12, dtype, torch.device(DEV))


def test_silu_mul_falls_back_for_other_layouts():
    K = _K()
    gu = torch.randn(16, 64, device=DEV, dtype=torch.float16)[:, :48]  # neither layout
    ref = K.silu_mul_reference(gu.cpu()).float()
    torch.testing.assert_close(K.silu_mul(gu).cpu().float(), ref, rtol=2e-3, atol=2e-3)
    with pytest.raises(ValueError, match="2 \\* hidden"):
        K.silu_mul(torch.randn(4, 5, device=DEV))
