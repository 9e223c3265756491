"""Check, then time, the 2:4 decode kernel on the GPU (one call of the device machine).

Usage: python benchmarks/decode_kernel.py [--out DIR] [--quick] [--skip-sweep]
       [--sweep-only --shapes 28672x4096,6144x4096 --tokens 1,8,16]
Prints the largest errors of the checks, a sweep of warps per block against the default (each
shape and token count beside dense ``F.linear`` timed the same way), and the per-layer decode
table (dense, cuSPARSELt, decode 16-bit and int8); writes JSON to --out. ``--sweep-only`` runs
the checks and the warps sweep alone, for the shapes and token counts given (by default
LLaMA-3-8B's four layer shapes at 1 and 16 tokens): the way to see whether
:func:`~explorer.gpu.cuda.decode.default_warps` suits another GPU or a model's fused shapes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from explorer.bench.decode import DECODE_SHAPES, bench_decode, check_decode
from explorer.results.markdown.bench import format_decode


def _problems(tokens, dtype, seed, shapes=DECODE_SHAPES):
    """(n, k, t, weight, x) for each shape (by default the 8B ones) and token count."""
    from explorer.bench.decode import _weight

    gen = torch.Generator(device="cuda").manual_seed(seed)
    for n, k in shapes:
        w = _weight(n, k, dtype, gen)
        for t in tokens:
            yield n, k, t, w, torch.randn(t, k, device="cuda", generator=gen).to(dtype)


def sweep_warps(tokens=(1, 16), dtype=torch.bfloat16, shapes=DECODE_SHAPES) -> list[dict]:
    """Per-layer time of each warp count beside dense, to check :func:`default_warps` picks well."""
    from explorer.bench.decode import _rotating_ms
    from explorer.gpu.cuda.decode import (
        _MAX_WARPS,
        _sms,
        _tiles,
        decode_matmul,
        default_warps,
        pack,
    )

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for n, k, t, w, x in _problems(tokens, dtype, 5, shapes):

        def dense_call(w=w, x=x):
            copy = w.clone()
            return lambda: torch.nn.functional.linear(x, copy)

        dense_us = _rotating_ms(dense_call, w.numel() * w.element_size(), l2) * 1e3
        times = {}
        for warps in (1, 2, 4, 8, 16, 32):
            if warps > _MAX_WARPS[_tiles(t)]:
                continue

            def make(warps=warps, w=w, x=x):
                p = pack(w)
                return lambda: decode_matmul(x, p, warps=warps)

            times[warps] = _rotating_ms(make, pack(w).nbytes, l2) * 1e3
        best = min(times, key=times.get)
        dflt = default_warps(n, k, t, _sms(0))
        rows.append(dict(n=n, k=k, t=t, dense_us=dense_us, times_us=times, best=best, default=dflt))
        print(
            f"warps {n}x{k}@{t}: dense {dense_us:.1f} | "
            + " ".join(f"{w}:{v:.1f}" for w, v in times.items())
            + f" | best {best} ({dense_us / times[best]:.2f}x dense), default {dflt} "
            f"({dense_us / times[dflt]:.2f}x dense, {times[dflt] / times[best]:.2f}x best)",
            flush=True,
        )
    return rows


def sweep_unroll(tokens=(1, 16), dtype=torch.bfloat16) -> list[dict]:
    """Per-layer time of builds of the kernel with the main loop unrolled 1, 2, 4 or 8 times."""
    import cupy as cp

    from explorer.bench.decode import _rotating_ms
    from explorer.gpu.cuda.decode import _launch, pack
    from explorer.gpu.cuda.sources import kernel_dir

    src = (kernel_dir() / "decode24.cu").read_text()
    assert "#pragma unroll 2\n    for (int ch" in src
    mods = {}
    for u in (1, 2, 4, 8):
        mods[u] = cp.RawModule(
            code=src.replace(
                "#pragma unroll 2\n    for (int ch", f"#pragma unroll {u}\n    for (int ch"
            ),
            options=("-std=c++17",),
        )
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for n, k, t, w, x in _problems(tokens, dtype, 6):
        times = {}
        for u, mod in mods.items():

            def make(mod=mod, w=w, x=x):
                p = pack(w)
                y = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device="cuda")
                return lambda: _launch(x, p, None, y, None, module=mod)

            times[u] = _rotating_ms(make, pack(w).nbytes, l2) * 1e3
        rows.append(dict(n=n, k=k, t=t, times_us=times))
        print(
            f"unroll {n}x{k}@{t}: " + " ".join(f"{u}:{v:.1f}" for u, v in times.items()),
            flush=True,
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--sweep-only", action="store_true", help="checks and the warps sweep only")
    ap.add_argument("--shapes", default="", help="out x in shapes for the sweep, e.g. 28672x4096")
    ap.add_argument("--tokens", default="1,16", help="token counts for the sweep")
    a = ap.parse_args()
    shapes = (
        tuple(tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",") if s)
        or DECODE_SHAPES
    )
    sweep_tokens = tuple(int(t) for t in a.tokens.split(",") if t)
    out = Path(a.out)
    print(torch.cuda.get_device_name(0), torch.__version__, flush=True)
    checks = check_decode()
    worst = max(r["relerr"] for r in checks)
    worst8 = max(r["relerr_int8"] for r in checks)
    print(
        f"checks: {len(checks)} cases, max relerr 16-bit {worst:.2e}, int8 {worst8:.2e}, "
        f"all finite {all(r['finite'] for r in checks)}",
        flush=True,
    )
    bad = [
        r for r in checks if not (r["relerr"] < 2e-3 and r["relerr_int8"] < 2e-3 and r["finite"])
    ]
    for r in bad[:10]:
        print("BAD", r, flush=True)
    sweep = [] if a.skip_sweep else sweep_warps(sweep_tokens, shapes=shapes)
    if a.sweep_only:
        (out / "decode_warps.json").write_text(json.dumps(dict(checks=checks, sweep=sweep)))
        return 1 if bad else 0
    unroll = [] if a.skip_sweep else sweep_unroll()
    dts = (torch.bfloat16,) if a.quick else (torch.bfloat16, torch.float16)
    rows = bench_decode(dtypes=dts, log=sys.stdout)
    (out / "decode_kernel.json").write_text(
        json.dumps(
            dict(checks=checks, sweep=sweep, unroll=unroll, rows=rows), indent=1, default=str
        )
    )
    print(format_decode(rows))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
