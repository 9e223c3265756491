"""Joint 2:4 + int4/int8 in SparseGPT's column loop, against prune-then-RTN."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.checkpoint import save_sparse
from explorer.checks import check_pattern
from explorer.groupquant import quantize_rtn
from explorer.lowbit import compress_int4
from explorer.pruning import prune


def _layer(seed: int = 0, rows: int = 64, cols: int = 256):
    gen = torch.Generator().manual_seed(seed)
    # correlated inputs (as real activations are): that is where the error feedback pays off
    mix = torch.randn(cols, cols, generator=gen) / cols**0.5 + torch.eye(cols)
    x = torch.randn(512, cols, generator=gen) @ mix
    net = nn.Sequential(nn.Linear(cols, rows))
    with torch.no_grad():
        net[0].weight.copy_(torch.randn(rows, cols, generator=gen))
    return net, x


def _recon(x, w_dense, w_new):
    return float(torch.linalg.norm(x @ w_dense.T - x @ w_new.T))


@pytest.mark.parametrize(("fmt", "group"), [("int4", 128), ("int4", 64), ("int8", 128)])
def test_joint_beats_prune_then_rtn(fmt, group):
    net, x = _layer()
    dense = net[0].weight.detach().clone()
    calib = [x[:256], x[256:]]
    joint = prune(
        net,
        "sparsegpt",
        "2:4",
        calibration=calib,
        quantize=fmt,
        group_size=group,
        progress=False,
        inplace=False,
    )
    plain = prune(net, "sparsegpt", "2:4", calibration=calib, progress=False, inplace=False)
    w_joint = joint.model[0].weight.detach()
    mask = joint.masks["0"]
    # 2:4 exactly, zeros in place
    assert check_pattern(mask, "2:4").valid and mask.float().mean() == 0.5
    assert bool((w_joint[~mask] == 0).all())
    # on the recorded grid: integer codes within range, and exactly q * scale
    scales = joint.scales["0"]
    assert scales.shape == (64, 256 // group)
    full = scales.repeat_interleave(group, dim=1)
    codes = torch.round(w_joint / full)
    assert int(codes.abs().max()) <= (7 if fmt == "int4" else 127)
    assert torch.equal(codes * full, w_joint)
    # the baseline: the same SparseGPT pruning, then round to nearest
    w_plain = plain.model[0].weight.detach()
    w_rtn, _ = quantize_rtn(w_plain, plain.masks["0"], fmt, group)
    e_joint, e_rtn, e_plain = (
        _recon(x, dense, w_joint),
        _recon(x, dense, w_rtn),
        _recon(x, dense, w_plain),
    )
    assert e_joint <= e_rtn
    if fmt == "int4":
        # clearly better: it recovers a good share of the rounding error on top of pruning
        assert e_joint - e_plain < 0.7 * (e_rtn - e_plain)
    assert joint.quantize == fmt and joint.group_size == group
    assert f"quantize={fmt!r}" in repr(joint) and joint.to_dict()["group_size"] == group
    # the model given was not changed (inplace=False)
    assert torch.equal(net[0].weight, dense)


def test_joint_int4_compresses_exactly_with_its_scales():
    net, x = _layer(1, 32, 128)
    result = prune(
        net, "sparsegpt", "2:4", calibration=[x], quantize="int4", group_size=32, progress=False
    )
    w = net[0].weight.detach()
    packed = compress_int4(w, 32, scales=result.scales["0"])
    assert torch.equal(packed.decompress(), w)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"quantize": "int3"}, "unknown quantize format"),
        ({"quantize": "int4", "group_size": 96}, "does not divide K=256"),
        ({"quantize": "int4", "group_size": 6}, "multiple of 4"),
        ({"quantize": "int4", "method": "wanda"}, "method 'wanda' cannot"),
    ],
)
def test_bad_arguments_leave_the_model_alone(kwargs, match):
    net, x = _layer(2, 16, 256)
    before = net[0].weight.detach().clone()
    args = {"method": "sparsegpt", "calibration": [x], "progress": False, **kwargs}
    method = args.pop("method")
    with pytest.raises(ValueError, match=match):
        prune(net, method, "2:4", **args)
    assert torch.equal(net[0].weight, before)


def test_failure_midway_restores_the_model():
    net, x = _layer(3, 16, 128)
    net = nn.Sequential(net[0], nn.Linear(16, 8))
    with torch.no_grad():
        net[1].weight[0, 0] = float("nan")  # the second layer fails after the first was pruned
    before = [p.detach().clone() for p in net.parameters()]
    with pytest.raises(ValueError, match="NaN"):
        prune(
            net, "sparsegpt", "2:4", calibration=[x], quantize="int4", progress=False, group_size=16
        )
    for p, q in zip(net.parameters(), before, strict=True):
        assert torch.equal(p.nan_to_num(), q.nan_to_num())


def test_block_by_block_transformer(tiny_transformer, token_batches):
    result = prune(tiny_transformer, "sparsegpt", "2:4", calibration=token_batches,
                   quantize="int4", group_size=16, progress=False)  # fmt: skip
    assert result.blocks == "blocks" and set(result.scales) == set(result.layers)
    for fqn in result.layers:
        w = tiny_transformer.get_submodule(fqn).weight.detach()
        full = result.scales[fqn].repeat_interleave(16, dim=1)
        codes = torch.round(w / full)
        assert check_pattern(result.masks[fqn], "2:4").valid
        assert int(codes.abs().max()) <= 7 and torch.equal(codes * full, w)


def test_unstructured_int8_on_grid():
    net, x = _layer(4, 16, 64)
    result = prune(net, "sparsegpt", "unstructured:0.5", calibration=[x], quantize="int8",
                   group_size=32, progress=False)  # fmt: skip
    w = net[0].weight.detach()
    full = result.scales["0"].repeat_interleave(32, dim=1)
    assert result.density == 0.5 and int(torch.round(w / full).abs().max()) <= 127
    assert torch.equal(torch.round(w / full) * full, w)


def test_the_clip_search_lowers_the_error_int4_adds_to_heavy_tailed_weights(monkeypatch):
    from explorer.patterns import Pattern
    from explorer.pruning import sparsegpt

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, 256, generator=gen)
    torch.manual_seed(0)
    # Student-t weights: a few large values per group stretch an absmax scale's grid
    w = torch.distributions.StudentT(2.0).sample((64, 256))
    h, pattern, quant = x.T @ x, Pattern.parse("2:4"), sparsegpt.Quantization("int4", 32)
    floating = _recon(x, w, sparsegpt.sparsegpt_prune(w, h, pattern)[0])
    searched, _, scales = sparsegpt.sparsegpt_quantize_prune(w, h, pattern, quant)
    monkeypatch.setattr(sparsegpt, "CLIP_FACTORS", (1.0,))  # absmax scales only
    plain = sparsegpt.sparsegpt_quantize_prune(w, h, pattern, quant)[0]
    # what int4 adds to the float 2:4 error shrinks (measured: by 2.2% here)
    assert _recon(x, w, searched) - floating < 0.99 * (_recon(x, w, plain) - floating)
    # the codes stay on the int4 grid of their scales, and the 2:4 mask holds
    codes = searched / scales.repeat_interleave(32, dim=1)
    assert torch.allclose(codes, codes.round(), atol=1e-4) and codes.abs().max() <= 7 + 1e-4
    assert bool(check_pattern(searched, "2:4").valid)


def test_with_no_feedback_to_spread_the_joint_mask_keeps_the_pair_of_least_total_error():
    from itertools import combinations

    from explorer.patterns import Pattern
    from explorer.pruning import sparsegpt

    # a diagonal Hessian: no column's error reaches another, so each group of four is its mask
    # and rounding alone, and the loss is sum(h * err^2); the kept pair must cost least,
    # counting the pruned weights' squares and the kept weights' rounding errors
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(256, 32, generator=gen)
    h = torch.rand(32, generator=gen) * 10 + 0.1
    new, mask, scales = sparsegpt.sparsegpt_quantize_prune(
        w, torch.diag(h), Pattern.parse("2:4"), sparsegpt.Quantization("int4", 32)
    )
    h = (h + 0.01 * h.mean()).reshape(8, 4)  # with the default 1% damping
    w, new, mask = (t.reshape(256, 8, 4) for t in (w, new, mask))
    s = scales[:, :1, None]
    q = torch.clamp(torch.round(w / s), -7, 7) * s

    def cost(kept):
        return (h * torch.where(kept, (w - q).square(), w.square())).sum(dim=-1)

    pairs = []
    for pair in combinations(range(4), 2):
        kept = torch.zeros(4, dtype=torch.bool)
        kept[list(pair)] = True
        pairs.append(cost(kept.expand_as(w)))
    best = torch.stack(pairs).min(dim=0).values
    assert torch.allclose(cost(mask), best, rtol=1e-5, atol=1e-6)
    assert torch.allclose(new[mask], q[mask])
    # the rule this replaced (keep the two largest h * w^2) costs more in some groups
    saliency = (h * w.square()).topk(2).indices
    largest = torch.zeros_like(w, dtype=torch.bool).scatter_(-1, saliency, True)
    assert bool((cost(largest) > best * (1 + 1e-4)).any())


@pytest.mark.parametrize("fmt", ["int4", "int8"])
def test_joint_with_the_admm_update(fmt):
    net, x = _layer(4, 32, 128)
    dense = net[0].weight.detach().clone()
    calib = [x[:256], x[256:]]
    kwargs = dict(calibration=calib, quantize=fmt, group_size=32, progress=False, inplace=False)
    joint = prune(net, "sparsegpt", "2:4", **kwargs)
    updated = prune(net, "sparsegpt", "2:4", update="admm", **kwargs)
    assert updated.update == "admm" and updated.update_seconds > 0
    assert updated.quantize == fmt and updated.group_size == 32
    # the joint step's mask, kept by the update; the scales refit to the final codes, the
    # weights on their grid
    assert torch.equal(updated.masks["0"], joint.masks["0"])
    scales = updated.scales["0"]
    assert scales.shape == joint.scales["0"].shape and scales.dtype == torch.float32
    assert bool(torch.isfinite(scales).all() and (scales > 0).all())
    w = updated.model[0].weight.detach()
    full = updated.scales["0"].repeat_interleave(32, dim=1)
    codes = torch.round(w / full)
    assert torch.equal(codes * full, w) and int(codes.abs().max()) <= (7 if fmt == "int4" else 127)
    if fmt == "int4":
        assert torch.equal(compress_int4(w, 32, scales=updated.scales["0"]).decompress(), w)
    # lower error than the joint step alone, on the calibration inputs
    assert _recon(x, dense, w) < _recon(x, dense, joint.model[0].weight.detach())
    assert updated.errors["0"] < joint.errors["0"]


def test_permutation_and_admm_compose_with_joint_int4(tiny_transformer, token_batches):
    result = prune(tiny_transformer, "sparsegpt", "2:4", calibration=token_batches,
                   quantize="int4", group_size=16, permute=True, update="admm",
                   progress=False)  # fmt: skip
    assert result.permutation is not None and result.update == "admm"
    for fqn in result.layers:
        w = tiny_transformer.get_submodule(fqn).weight.detach()
        assert check_pattern(result.masks[fqn], "2:4").valid
        assert torch.equal(compress_int4(w, 16, scales=result.scales[fqn]).decompress(), w)


@pytest.mark.parametrize("fmt", ["int4", "int8"])
def test_joint_with_the_admm_update_in_bfloat16(fmt, tmp_path):
    # a bfloat16 copy of int8 codes near 127 is off the grid by up to a quarter of a step
    net, x = _layer(5, 32, 128)
    net = net.to(torch.bfloat16)
    calib = [x[:256].bfloat16(), x[256:].bfloat16()]
    kwargs = dict(calibration=calib, quantize=fmt, group_size=32, progress=False, inplace=False)
    joint = prune(net, "sparsegpt", "2:4", **kwargs)
    updated = prune(net, "sparsegpt", "2:4", update="admm", **kwargs)
    w = updated.model[0].weight
    assert w.dtype == torch.bfloat16 and bool((w[~updated.masks["0"]] == 0).all())
    assert updated.errors["0"] < joint.errors["0"]
    save_sparse(updated.model, tmp_path / "q.safetensors", updated, progress=False)
    assert (tmp_path / "q.safetensors").exists()


@pytest.mark.parametrize(("pattern", "group"), [("2:4", 32), ("2:4", 8), ("unstructured:0.5", 16)])
def test_the_importance_order_moves_whole_scale_and_nm_groups(pattern, group):
    from explorer.patterns import Pattern
    from explorer.pruning.sparsegpt import importance_order

    parsed = Pattern.parse(pattern)
    diagonal = torch.rand(128, generator=torch.Generator().manual_seed(3))
    order = importance_order(diagonal, parsed, group)
    assert sorted(order.tolist()) == list(range(128))
    # every stretch of `group` columns in the loop is one whole scale group, heaviest first
    blocks = order.view(-1, group)
    assert bool((blocks // group == blocks[:, :1] // group).all())
    sums = diagonal[blocks].sum(dim=1)
    assert bool((sums[:-1] >= sums[1:]).all())
    # and within it, whole aligned N:M groups (single columns otherwise), heaviest first
    unit = parsed.m if parsed.kind == "nm" else 1
    units = order.view(-1, unit)
    assert bool((units[:, 0] % unit == 0).all())
    assert torch.equal(units - units[:, :1], torch.arange(unit).expand_as(units))
    inside = diagonal[units].sum(dim=1).view(-1, group // unit)
    assert bool((inside[:, :-1] >= inside[:, 1:]).all())


def test_a_falling_diagonal_leaves_the_joint_loop_as_it_was():
    from explorer.patterns import Pattern
    from explorer.pruning import sparsegpt

    net, x = _layer(seed=4, cols=128)
    # inputs scaled so that every column carries less energy than the one before
    x = x * torch.linspace(3.0, 0.5, 128)
    order = torch.argsort(torch.diagonal(x.T @ x), descending=True, stable=True)
    x = x[:, order]
    h, w = x.T @ x, net[0].weight.detach()
    pattern, quant = Pattern.parse("2:4"), sparsegpt.Quantization("int4", 32)
    assert torch.equal(sparsegpt.importance_order(torch.diagonal(h), pattern, 32),
                       torch.arange(128))  # fmt: skip
    ordered = sparsegpt.sparsegpt_quantize_prune(w, h, pattern, quant)
    as_given = sparsegpt.sparsegpt_quantize_prune(w, h, pattern, quant, act_order=False)
    for a, b in zip(ordered, as_given, strict=True):
        assert torch.equal(a, b)


def test_the_importance_order_lowers_the_error_where_input_energy_grows_along_the_row():
    from explorer.patterns import Pattern
    from explorer.pruning import sparsegpt

    net, x = _layer(seed=5, cols=256)
    # the heaviest inputs last: left to right, their errors have no column left to absorb them
    x = x * torch.linspace(0.2, 4.0, 256) ** 2
    h, w = x.T @ x, net[0].weight.detach()
    pattern, quant = Pattern.parse("2:4"), sparsegpt.Quantization("int4", 32)
    new, mask, scales = sparsegpt.sparsegpt_quantize_prune(w, h, pattern, quant)
    plain = sparsegpt.sparsegpt_quantize_prune(w, h, pattern, quant, act_order=False)[0]
    assert _recon(x, w, new) < 0.95 * _recon(x, w, plain)
    # back in the layer's own column order: 2:4 groups, zeros in place, codes on their scales
    assert bool(check_pattern(mask, "2:4").valid) and bool((new[~mask] == 0).all())
    full = scales.repeat_interleave(32, dim=1)
    codes = torch.round(new / full)
    assert int(codes.abs().max()) <= 7 and torch.equal(codes * full, new)
