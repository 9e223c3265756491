"""Where the host time of one eager call of a sparse block goes (cProfile), beside the dense
block it replaces, with the route each sparse product took.

Run on a GPU: ``python benchmarks/host_profile.py --block mlp --tokens 16``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import torch

from explorer.bench.host_cost import _Attention, _pruned, _SwiGLU
from explorer.gpu import SparseGatedMLP, SparseLinear, SparseQKV


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--block", choices=("mlp", "qkv", "linear"), default="mlp")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--d", type=int, default=4096)
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args()
    dt = torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(args.tokens, 1, args.d, dtype=dt, device="cuda")
    if args.block == "mlp":
        dense = _pruned(_SwiGLU(args.d, int(args.d * 3.5), dt))
        sparse = SparseGatedMLP.from_modules(dense.gate_proj, dense.up_proj, dense.down_proj)
    elif args.block == "qkv":
        dense = _pruned(_Attention(args.d, args.d // 4, dt))
        parts = SparseQKV.from_modules(dense.q_proj, dense.k_proj, dense.v_proj).parts()

        def sparse(x):
            return tuple(part(x) for part in parts)
    else:
        dense = _pruned(torch.nn.Linear(args.d, args.d, bias=False, dtype=dt, device="cuda"))
        sparse = SparseLinear.from_linear(dense)
    with torch.no_grad():
        for name, fn in (("dense", dense), ("sparse", sparse)):
            for _ in range(5):
                fn(x)
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                fn(x)
            prof.disable()
            torch.cuda.synchronize()
            print(f"== {name}: {args.calls} calls")
            pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    for mod in getattr(sparse, "modules", lambda: [])():
        if isinstance(mod, SparseLinear):
            print(mod.extra_repr(), mod.decisions())


if __name__ == "__main__":
    main()
