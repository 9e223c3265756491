"""Where the time of the fused LLaMA-7B MLP block goes: gate+up, silu_mul, down, each alone.

Run on a GPU machine with nvmath-python and CuPy: ``python benchmarks/gated_mlp_parts.py``.
Prints CUDA-event medians (ms) for each part of ``SparseGatedMLP`` and for the dense block.
"""

from __future__ import annotations

import sys

import torch

from explorer.bench.runner import llama_mlp, mask24
from explorer.gpu import SparseGatedMLP
from explorer.gpu.cuda.kernels import silu_mul
from explorer.gpu.routes.timing import eager_ms as ms


def report(dtype: torch.dtype, tokens: int) -> None:
    with torch.no_grad():
        dense = llama_mlp(4096, 11008, dtype)
        for lin in (dense.gate_proj, dense.up_proj, dense.down_proj):
            lin.weight.copy_(mask24(lin.weight))
        block = SparseGatedMLP.from_modules(
            dense.gate_proj, dense.up_proj, dense.down_proj, tune_tokens=(tokens,)
        )
        x = torch.randn(tokens, 4096, device="cuda", dtype=dtype)
        gu = block.gate_up(x)
        z = silu_mul(gu)
        print(dtype, "gate+up output", "row-major" if gu.is_contiguous() else "transposed")
        parts = {
            "dense block": lambda: dense(x),
            "sparse block": lambda: block(x),
            "gate+up": lambda: block.gate_up(x),
            "silu_mul": lambda: silu_mul(gu),
            "down": lambda: block.down(z),
        }
        for name, fn in parts.items():
            print(dtype, f"{name:12s} {ms(fn):.3f} ms", flush=True)
        for key, plan in list(block.gate_up._plans.items()) + list(block.down._plans.items()):
            print(dtype, "plan", key, plan.key.layout, plan.key.alg)


def main(tokens: int = 4096) -> None:
    for dtype in (torch.float16, torch.bfloat16):
        report(dtype, tokens)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
