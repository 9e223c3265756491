"""Where a sparse layer's output goes: per layer, the ways to hand a row-major ``Y`` on.

For each shape, dtype and token count: dense cuBLAS; cuSPARSELt writing ``Y`` row-major
(``cc``); writing ``Y^T`` (``cr``) and returning the transposed view (free only for a sparse or
fused consumer); ``Y^T`` then torch's ``.contiguous()``; ``Y^T`` then the explorer's tiled
transpose kernel. Default algorithm and, where ``--tune`` is given, the tuned one. Medians of
CUDA events, side by side in one run; speedups are over dense in the same run.

Run on a GPU: ``python benchmarks/output_layouts.py [--tune] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json

import torch

from explorer.bench.runner import mask24
from explorer.dtypes import dtype_name
from explorer.gpu.cuda import kernels as K
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library import tuning
from explorer.gpu.routes.timing import eager_ms, host_us

SHAPES = {  # name: (out, in)
    "1B qkv": (3072, 2048),
    "1B o": (2048, 2048),
    "1B gate+up": (16384, 2048),
    "1B down": (2048, 8192),
    "8B qkv": (6144, 4096),
    "8B o": (4096, 4096),
    "8B gate+up": (28672, 4096),
    "8B down": (4096, 14336),
}


def one(name, m, k, n, dtype, tune):
    w = mask24(torch.randn(m, k, device="cuda", dtype=dtype))
    cw = C.compress(w)
    x = torch.randn(n, k, device="cuda", dtype=dtype)
    cache = C.default_cache()
    dn = dtype_name(dtype)
    algs = [-1]
    if tune:
        found = tuning.tune_weight(w, [n], layouts=("cc", "cr"))
        algs += sorted({a for a in found.values() if a >= 0})
    dense = eager_ms(lambda: torch.nn.functional.linear(x, w))
    ref = x.float() @ w.float().t()
    row = {"name": name, "m": m, "k": k, "n": n, "dtype": dn, "dense_ms": dense}
    best = {}
    for alg in algs:
        for lay in ("cc", "cr"):
            plan = cache.get(C.PlanKey(m=m, n=n, k=k, dtype=dn, out_dtype=dn, layout=lay, alg=alg))
            out = torch.empty(n * m, device="cuda", dtype=dtype)

            def f(p=plan, out=out):
                p.run(cw.data.data_ptr(), x.data_ptr(), out.data_ptr())

            f()
            if lay == "cc":
                y = out.view(n, m)
                err = float((y.float() - ref).norm() / ref.norm())
                variants = {"Y": f}
            else:
                d = out.view(m, n)
                err = float((d.t().float() - ref).norm() / ref.norm())
                variants = {
                    "Y^T view": f,
                    "Y^T+torch copy": lambda f=f, d=d: (f(), d.t().contiguous()),
                    "Y^T+kernel": lambda f=f, d=d: (f(), K.transpose_rows(d)),
                }
            if err > 2e-2:
                row[f"err {lay} alg{alg}"] = err
                continue
            for v, fn in variants.items():
                t = eager_ms(fn)
                if v not in best or t < best[v][0]:
                    best[v] = (t, alg)
    for v, (t, alg) in best.items():
        row[v] = round(dense / t, 3)
        row[v + " alg"] = alg
    d = torch.empty(m, n, device="cuda", dtype=dtype)
    row["transpose_ms(kernel)"] = eager_ms(lambda: K.transpose_rows(d))
    row["transpose_ms(torch)"] = eager_ms(lambda: d.t().contiguous())
    row["host_us transpose kernel"] = host_us(lambda: K.transpose_rows(d))
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tune", action="store_true")
    p.add_argument("--tokens", default="4096,1024,16")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--json")
    a = p.parse_args()
    rows = []
    for dt in a.dtypes.split(","):
        for n in map(int, a.tokens.split(",")):
            for name in a.shapes.split(","):
                m, k = SHAPES[name]
                r = one(name, m, k, n, getattr(torch, dt), a.tune and n >= 1024)
                rows.append(r)
                keys = ("Y", "Y^T view", "Y^T+torch copy", "Y^T+kernel")
                print(
                    f"{dt:8} {name:11} n={n:5} dense {r['dense_ms']:.3f} ms | "
                    + " | ".join(
                        f"{kk} {r.get(kk, '-')}x(a{r.get(kk + ' alg', '')})" for kk in keys
                    )
                    + f" | T kern {r['transpose_ms(kernel)']:.4f} torch {r['transpose_ms(torch)']:.4f}"
                    + f" host {r['host_us transpose kernel']:.1f}us",
                    flush=True,
                )
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
