"""Least-squares scales for fixed codes (explorer.pruning.scale_refit)."""

from __future__ import annotations

import pytest
import torch

from explorer.groupquant import Quantization, quantize_rtn, round_to_grid
from explorer.pruning.admm import reconstruction_loss
from explorer.pruning.scale_refit import refit_scales


def _layer(rows=12, cols=32, tokens=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, cols, generator=g) @ torch.randn(cols, cols, generator=g)
    w = torch.randn(rows, cols, generator=g)
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    keep = torch.rand(rows, cols // 4, 4, generator=g).argsort(-1)[..., :2]
    mask.view(rows, cols // 4, 4).scatter_(-1, keep, True)
    return w, mask, x.T @ x


def _codes(weight, scales, size, qmax):
    return round_to_grid(weight, scales.repeat_interleave(size, dim=1), qmax)


@pytest.mark.parametrize(("fmt", "size"), [("int4", 8), ("int4", 16), ("int8", 8)])
def test_every_row_is_no_worse_the_codes_stay_and_the_scales_are_positive(fmt, size):
    w, mask, h = _layer()
    quant = Quantization(fmt, size)
    rounded, scales = quantize_rtn(w * mask, mask, fmt, size)
    new, new_scales = refit_scales(w, rounded, h, quant, scales)
    for r in range(w.shape[0]):
        assert reconstruction_loss(w[r : r + 1], new[r : r + 1], h) <= reconstruction_loss(
            w[r : r + 1], rounded[r : r + 1], h
        ) * (1 + 1e-6)
    assert reconstruction_loss(w, new, h) < 0.99 * reconstruction_loss(w, rounded, h)
    assert torch.equal(
        _codes(rounded, scales, size, quant.qmax), _codes(new, new_scales, size, quant.qmax)
    )
    assert bool((new[~mask] == 0).all()) and bool((new_scales > 0).all())
    assert new_scales.dtype == torch.float32 and new_scales.shape == scales.shape


def test_one_group_alone_gets_the_closed_form_scale():
    # one row, one group, H = I: the best scale is <q, w0> / <q, q>
    w0 = torch.tensor([[1.0, 0.0, 2.9, 0.0]])
    codes = torch.tensor([[3.0, 0.0, 7.0, 0.0]])
    scales = torch.tensor([[0.5]])
    new, new_scales = refit_scales(
        w0, codes * 0.5, torch.eye(4), Quantization("int4", 4), scales, 0
    )
    expected = (3 * 1.0 + 7 * 2.9) / (9 + 49)
    assert new_scales.item() == pytest.approx(expected, rel=1e-6)
    assert torch.allclose(new, codes * expected)


def test_a_group_with_no_code_keeps_its_scale():
    w, mask, h = _layer(rows=4, cols=16)
    mask[:, 8:] = False  # the second group of every row is all pruned
    rounded, scales = quantize_rtn(w * mask, mask, "int4", 8)
    _, new_scales = refit_scales(w, rounded, h, Quantization("int4", 8), scales)
    assert torch.equal(new_scales[:, 1], scales[:, 1])


def test_an_optimal_start_is_returned_as_it_is():
    # the dense weight is itself on the grid: nothing can beat it, nothing changes
    scales = torch.full((3, 2), 0.25)
    codes = torch.randint(-7, 8, (3, 16), generator=torch.Generator().manual_seed(1)).float()
    w = codes * 0.25
    *_, h = _layer(rows=3, cols=16)
    new, new_scales = refit_scales(w, w, h, Quantization("int4", 8), scales)
    assert torch.equal(new_scales, scales) and torch.equal(new, w)


def test_a_16bit_weight_comes_back_in_its_dtype():
    w, mask, h = _layer()
    rounded, scales = quantize_rtn(w * mask, mask, "int4", 8)
    new, new_scales = refit_scales(
        w.bfloat16(), rounded.bfloat16(), h, Quantization("int4", 8), scales
    )
    assert new.dtype == torch.bfloat16 and new_scales.dtype == torch.float32


def test_bad_shapes_and_scales_are_named():
    w, mask, h = _layer(rows=4, cols=16)
    rounded, scales = quantize_rtn(w * mask, mask, "int4", 8)
    quant = Quantization("int4", 8)
    with pytest.raises(ValueError, match="hessian must be \\(16, 16\\)"):
        refit_scales(w, rounded, h[:8, :8], quant, scales)
    with pytest.raises(ValueError, match="weight shape"):
        refit_scales(w, rounded[:2], h, quant, scales)
    with pytest.raises(ValueError, match="finite and positive"):
        refit_scales(w, rounded, h, quant, -scales)
