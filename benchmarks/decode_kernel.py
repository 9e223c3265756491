"""Check, then time, the 2:4 decode kernel on the GPU (one call of the device machine).

Usage: python benchmarks/decode_kernel.py [--out DIR] [--quick]
Prints the largest errors of the checks, a sweep of warps per block against the default, and
the per-layer decode table (dense, cuSPARSELt, decode 16-bit and int8); writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from explorer.bench.decode import DECODE_SHAPES, bench_decode, check_decode
from explorer.results.markdown.bench import format_decode


def _problems(tokens, dtype, seed):
    """(n, k, t, weight, x) for each 8B shape and token count."""
    from explorer.bench.decode import _weight

    gen = torch.Generator(device="cuda").manual_seed(seed)
    for n, k in DECODE_SHAPES:
        w = _weight(n, k, dtype, gen)
        for t in tokens:
            yield n, k, t, w, torch.randn(t, k, device="cuda", generator=gen).to(dtype)


def sweep_warps(tokens=(1, 16), dtype=torch.bfloat16) -> list[dict]:
    """Per-layer time of each warp count, to check :func:`default_warps` picks well."""
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
    for n, k, t, w, x in _problems(tokens, dtype, 5):
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
        rows.append(dict(n=n, k=k, t=t, times_us=times, best=best, default=dflt))
        print(
            f"warps {n}x{k}@{t}: "
            + " ".join(f"{w}:{v:.1f}" for w, v in times.items())
            + f" | best {best}, default {dflt} ({times[dflt] / times[best]:.2f}x best)",
            flush=True,
        )
    return rows


def sweep_unroll(tokens=(1, 16), dtype=torch.bfloat16) -> list[dict]:
    """Per-layer time of builds of the kernel with the main loop unrolled 1, 2, 4 or 8 times."""
    import cupy as cp

    from explorer.bench.decode import _rotating_ms
    from explorer.gpu.cuda.decode import _launch, pack
    from explorer.gpu.cuda.kernels import kernel_dir

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
    a = ap.parse_args()
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
    sweep = [] if a.skip_sweep else sweep_warps()
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
