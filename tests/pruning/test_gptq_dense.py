"""SparseGPT's joint loop with nothing pruned is GPTQ: every weight kept, on its group's grid,
with a smaller output error than rounding each weight to nearest."""

from __future__ import annotations

import torch

from explorer.groupquant import Quantization, quantize_rtn
from explorer.patterns import Pattern
from explorer.pruning.sparsegpt import sparsegpt_quantize_prune


def _layer(seed: int):
    g = torch.Generator().manual_seed(seed)
    # correlated inputs with unequal scales, as a real layer's activations are
    x = torch.randn(512, 64, generator=g) @ torch.randn(64, 64, generator=g)
    x = x * torch.linspace(0.2, 3.0, 64)
    return torch.randn(32, 64, generator=g), x


def test_nothing_pruned_every_weight_on_its_grid_and_less_error_than_rounding():
    for seed in range(4):
        w, x = _layer(seed)
        new, mask, scales = sparsegpt_quantize_prune(
            w, x.T @ x, Pattern.parse("unstructured:0"), Quantization("int4", 16)
        )
        assert bool(mask.all())  # nothing pruned
        codes = new / scales.repeat_interleave(16, 1)
        assert torch.allclose(codes, codes.round(), atol=1e-4) and codes.abs().max() <= 8
        rounded, _ = quantize_rtn(w, torch.ones_like(w, dtype=torch.bool), "int4", 16)
        ref = x @ w.T
        err_gptq = (x @ new.T - ref).norm() / ref.norm()
        err_rtn = (x @ rounded.T - ref).norm() / ref.norm()
        assert err_gptq < err_rtn, (seed, float(err_gptq), float(err_rtn))
