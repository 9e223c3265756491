"""The ADMM weight update after the mask is fixed, alone and through prune(update="admm")."""

from __future__ import annotations

import itertools

import pytest
import torch

from explorer.groupquant import Quantization, quantize_rtn, round_to_grid
from explorer.patterns import Pattern
from explorer.pruning import admm_update, prune
from explorer.pruning.admm import admm_update_on_grid, reconstruction_loss
from explorer.pruning.sparsegpt import sparsegpt_prune, sparsegpt_quantize_prune


def _problem(rows=6, cols=16, n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, cols, generator=g) @ (
        torch.randn(cols, cols, generator=g) / 4 + torch.eye(cols)
    )
    w = torch.randn(rows, cols, generator=g)
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    for r in range(rows):
        mask[r, torch.randperm(cols, generator=g)[: cols // 2]] = True
    return w, mask, x.T @ x


def _exact(w, mask, h):
    """The least-squares optimum on each row's support, solved directly."""
    out = torch.zeros_like(w, dtype=torch.float64)
    hd, wd = h.double(), w.double()
    for r in range(len(w)):
        s = mask[r]
        # minimise (w0 - v) H (w0 - v)^T over v supported on s: H_ss v_s = (H w0)_s
        out[r, s] = torch.linalg.solve(hd[s][:, s], (wd[r] @ hd)[s])
    return out


def test_close_to_the_exact_optimum_and_keeps_mask():
    w, mask, h = _problem()
    new = admm_update(w, mask, h, iterations=40, cg_steps=40)
    assert bool((new[~mask] == 0).all())
    best = reconstruction_loss(w, _exact(w, mask, h), h)
    naive = reconstruction_loss(w, w * mask, h)
    got = reconstruction_loss(w, new, h)
    assert got < naive
    # the damping (10% of the normalised diagonal) costs a little against the exact optimum
    assert got <= best * 1.10 + 1e-6


def test_never_worse_than_the_start():
    w, mask, h = _problem(seed=1)
    start = _exact(w, mask, h).float()  # already optimal: the update must not lose
    new = admm_update(w, mask, h, start=start)
    assert reconstruction_loss(w, new, h) <= reconstruction_loss(w, start, h) + 1e-6


def test_improves_on_sparsegpt():
    w, _, h = _problem(rows=8, cols=32, seed=2)
    sg, mask = sparsegpt_prune(w, h, Pattern.parse("2:4"))
    new = admm_update(w, mask, h, start=sg)
    assert reconstruction_loss(w, new, h) < reconstruction_loss(w, sg, h)


def test_dead_inputs_keep_start_values():
    w, mask, h = _problem(seed=3)
    h[:, 0] = 0
    h[0, :] = 0
    new = admm_update(w, mask, h)
    torch.testing.assert_close(new[:, 0], (w * mask)[:, 0])
    assert torch.isfinite(new).all()


def test_shape_errors():
    w, mask, h = _problem()
    with pytest.raises(ValueError, match="mask shape"):
        admm_update(w, mask[:, :4], h)
    with pytest.raises(ValueError, match="hessian must be"):
        admm_update(w, mask, h[:4, :4])


@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
def test_prune_update_lowers_errors_with_the_same_masks(method, make_mlp, make_inputs):
    x = make_inputs(512, 16)
    plain = make_mlp((16, 64, 32))
    updated = make_mlp((16, 64, 32))
    base = prune(plain, method, "2:4", calibration=[x], progress=False)
    new = prune(updated, method, "2:4", calibration=[x], update="admm", progress=False)
    assert new.update == "admm" and new.update_seconds > 0
    assert "update='admm'" in repr(new)
    # the first layer sees the same inputs either way: same mask, lower error
    assert torch.equal(base.masks["0"], new.masks["0"])
    assert new.errors["0"] < base.errors["0"]
    for name, mask in new.masks.items():
        weight = updated.get_submodule(name).weight
        assert bool((weight[~mask] == 0).all())
    assert new.mean_error < base.mean_error


def test_prune_update_needs_calibration(make_mlp):
    with pytest.raises(ValueError, match="calibration="):
        prune(make_mlp((16, 32)), "magnitude", "2:4", update="admm", progress=False)
    with pytest.raises(ValueError, match="unknown weight update 'lbfgs'"):
        prune(make_mlp((16, 32)), "magnitude", "2:4", update="lbfgs", progress=False)


def test_prune_update_on_transformer(tiny_transformer, token_batches):
    result = prune(
        tiny_transformer,
        "wanda",
        "2:4",
        calibration=token_batches,
        filter_fn=lambda m, n: n.startswith("blocks."),
        update="admm",
        progress=False,
    )
    assert result.blocks == "blocks" and result.update == "admm"


# ----------------------------------------------------------------------------- on a grid
def _on_grid(weight, scales, quant):
    full = scales.repeat_interleave(quant.group_size, dim=1)
    codes = round_to_grid(weight, full, quant.qmax)
    return torch.equal(codes * full, weight.float()), codes


@pytest.mark.parametrize("fmt", ["int4", "int8"])
def test_on_grid_improves_on_joint_sparsegpt_and_stays_on_its_grid(fmt):
    w, _, h = _problem(rows=16, cols=64, n=1024, seed=4)
    quant = Quantization(fmt, 16)
    start, mask, scales = sparsegpt_quantize_prune(w, h, Pattern.parse("2:4"), quant)
    new = admm_update_on_grid(w, mask, h, quant, scales, start)
    on_grid, codes = _on_grid(new, scales, quant)
    assert on_grid and int(codes.abs().max()) <= quant.qmax
    assert bool((new[~mask] == 0).all())
    # the same scales and mask, a clearly lower calibration error (0.71 of it in int4, 0.65 in int8)
    assert reconstruction_loss(w, new, h) < 0.95 * reconstruction_loss(w, start, h)


def test_on_grid_keeps_an_optimal_start():
    # one row of 8 inputs, 4 kept: every grid point can be tried, so the optimum is known
    w, _, h = _problem(rows=1, cols=8, seed=5)
    mask = torch.tensor([[True, False, True, False, False, True, True, False]])
    quant = Quantization("int4", 4)
    _, scales = quantize_rtn(w * mask, mask, "int4", 4)
    full = scales.repeat_interleave(4, dim=1)[0]
    kept = mask[0].nonzero().flatten().tolist()
    best, best_loss = None, float("inf")
    for codes in itertools.product(range(-7, 8), repeat=len(kept)):
        v = torch.zeros(1, 8)
        v[0, kept] = torch.tensor(codes, dtype=torch.float32) * full[kept]
        loss = reconstruction_loss(w, v, h)
        if loss < best_loss:
            best, best_loss = v, loss
    new = admm_update_on_grid(w, mask, h, quant, scales, best)
    assert torch.equal(new, best)  # nothing on the grid beats it: the start comes back
    rounded = (round_to_grid(w, full, 7) * full) * mask
    found = admm_update_on_grid(w, mask, h, quant, scales, rounded)
    assert best_loss <= reconstruction_loss(w, found, h) <= reconstruction_loss(w, rounded, h)


def test_on_grid_reads_a_16_bit_start():
    w, _, h = _problem(rows=8, cols=32, seed=6)
    quant = Quantization("int4", 16)
    start, mask, scales = sparsegpt_quantize_prune(w, h, Pattern.parse("2:4"), quant)
    new = admm_update_on_grid(w, mask, h, quant, scales, start.bfloat16())  # a bf16 copy
    assert _on_grid(new, scales, quant)[0] and bool((new[~mask] == 0).all())
    assert reconstruction_loss(w, new, h) < reconstruction_loss(w, start, h)
    half = admm_update_on_grid(w.bfloat16(), mask, h, quant, scales, start.bfloat16())
    assert half.dtype == torch.bfloat16 and bool((half[~mask] == 0).all())


def test_on_grid_refuses_what_is_off_it():
    w, _, h = _problem(rows=8, cols=32, seed=7)
    quant = Quantization("int4", 16)
    start, mask, scales = sparsegpt_quantize_prune(w, h, Pattern.parse("2:4"), quant)
    with pytest.raises(ValueError, match="start is not on the grid"):
        admm_update_on_grid(w, mask, h, quant, scales, start + 0.4 * scales.max())
    with pytest.raises(ValueError, match="finite and positive"):
        admm_update_on_grid(w, mask, h, quant, scales * 0, start)
    with pytest.raises(ValueError, match=r"shape \(8, 2\)"):
        admm_update_on_grid(w, mask, h, quant, scales[:, :1], start)
    with pytest.raises(ValueError, match="hessian must be"):
        admm_update_on_grid(w, mask, h[:4, :4], quant, scales, start)
    # no iterations: the start, unchanged
    assert torch.equal(admm_update_on_grid(w, mask, h, quant, scales, start, iterations=0), start)
