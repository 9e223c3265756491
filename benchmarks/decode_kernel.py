"""Check, then time, the 2:4 decode kernel on the GPU (one call of the device machine).

Usage: python benchmarks/decode_kernel.py [--out DIR] [--quick] [--skip-sweep]
       [--sweep-only --shapes 28672x4096,6144x4096 --tokens 1,8,16]
       [--builds shipped,unroll4,prefetch --shapes ... --tokens 1,8 --dtype float16]
Prints the largest errors of the checks, a sweep of warps per block against the default (each
shape and token count beside dense ``F.linear`` timed the same way), and the per-layer decode
table (dense, cuSPARSELt, decode 16-bit and int8); writes JSON to --out. ``--sweep-only`` runs
the checks and the warps sweep alone, for the shapes and token counts given (by default
LLaMA-3-8B's four layer shapes at 1 and 16 tokens): the way to see whether
:func:`~explorer.gpu.cuda.decode.default_warps` suits another GPU or a model's fused shapes.
``--builds`` times builds of the kernel (:data:`BUILDS`: unrolling, chunk order, load hints)
side by side at three warp counts, each checked against a float64 product first.
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


def _dense_us(w, x, l2) -> float:
    """Per-call microseconds of ``F.linear(x, w)``, cycling through copies of ``w``."""
    from explorer.bench.decode import _rotating_ms

    def dense_call():
        copy = w.clone()
        return lambda: torch.nn.functional.linear(x, copy)

    return _rotating_ms(dense_call, w.numel() * w.element_size(), l2) * 1e3


def _times(times: dict) -> str:
    """``warps:us`` pairs of one line."""
    return " ".join(f"{warps}:{us:6.1f}" for warps, us in times.items())


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
        dense_us = _dense_us(w, x, l2)
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
            + _times(times)
            + f" | best {best} ({dense_us / times[best]:.2f}x dense), default {dflt} "
            f"({dense_us / times[dflt]:.2f}x dense, {times[dflt] / times[best]:.2f}x best)",
            flush=True,
        )
    return rows


#: Builds of ``kernels/decode24.cu`` that ``--builds`` times side by side (its ``-D`` values).
BUILDS = {
    "shipped": (),
    "ldg": (("DECODE24_LOAD", 0),),
    "unroll1": (("DECODE24_UNROLL", 1),),
    "unroll4": (("DECODE24_UNROLL", 4),),
    "contiguous": (("DECODE24_CONTIGUOUS", 1),),
    "contiguous-unroll4": (("DECODE24_CONTIGUOUS", 1), ("DECODE24_UNROLL", 4)),
    "prefetch": (("DECODE24_LOAD", 2),),
    "prefetch-noL1": (("DECODE24_LOAD", 1),),
    "unroll1-prefetch-noL1": (("DECODE24_UNROLL", 1), ("DECODE24_LOAD", 1)),
    "contiguous-prefetch": (("DECODE24_CONTIGUOUS", 1), ("DECODE24_LOAD", 2)),
    "contiguous-prefetch-noL1": (("DECODE24_CONTIGUOUS", 1), ("DECODE24_LOAD", 1)),
}


def sweep_builds(
    builds=tuple(BUILDS), tokens=(1, 8), dtype=torch.bfloat16, shapes=DECODE_SHAPES, int8=False
) -> list[dict]:
    """Per-layer time of builds of the kernel (:data:`BUILDS`) at three warp counts, beside dense.

    ``int8`` times the weights with int8 values (and per-row scales) instead of 16-bit ones.

    Each build's output at the default warps is compared with a float64 product first; a build
    that fails to compile or to match is reported and left out.
    """
    import cupy as cp

    from explorer.bench.decode import _rotating_ms
    from explorer.gpu.cuda.decode import _MAX_WARPS, _launch, _sms, _tiles, default_warps, pack
    from explorer.gpu.cuda.sources import kernel_source

    src = kernel_source("decode24")
    mods = {}
    for name in builds:
        options = ("-std=c++17", *(f"-D{k}={v}" for k, v in BUILDS[name]))
        try:
            mods[name] = cp.RawModule(code=src, options=options)
            mods[name].compile()
        except Exception as exc:  # a build that does not compile is a result, not a crash
            print(f"build {name}: {type(exc).__name__}: {str(exc)[:400]}", flush=True)
            mods.pop(name, None)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for n, k, t, w, x in _problems(tokens, dtype, 7, shapes):
        dense_us = _dense_us(w, x, l2)
        dflt = default_warps(n, k, t, _sms(0))
        top = min(_MAX_WARPS[_tiles(t)], max(1, k // 64))
        warp_counts = sorted({max(1, dflt // 2), dflt, min(top, 2 * dflt)})
        p = pack(w, int8=int8)
        ref = (x.double() @ p.decompress().double().t()).float()  # int8: values x scales
        for name, mod in mods.items():
            y = torch.empty(t, n, dtype=dtype, device="cuda")
            _launch(x, p, None, y, dflt, module=mod)
            torch.cuda.synchronize()
            err = ((y.float() - ref).norm() / ref.norm()).item()
            if not err < 2e-3:
                print(f"build {name} {n}x{k}@{t}: relerr {err:.2e}, left out", flush=True)
                continue
            times = {}
            for warps in warp_counts:

                def make(mod=mod, w=w, x=x, warps=warps):
                    q = pack(w, int8=int8)
                    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device="cuda")
                    return lambda: _launch(x, q, None, out, warps, module=mod)

                times[warps] = _rotating_ms(make, p.nbytes, l2) * 1e3
            best = min(times, key=times.get)
            rows.append(
                dict(
                    n=n,
                    k=k,
                    t=t,
                    int8=int8,
                    build=name,
                    relerr=err,
                    dense_us=dense_us,
                    times_us=times,
                    default=dflt,
                    best=best,
                )
            )
            print(
                f"build {name:26s} {n}x{k}@{t}: dense {dense_us:6.1f} | "
                + _times(times)
                + f" | default {dense_us / times[dflt]:.3f}x, best {best} "
                f"{dense_us / times[best]:.3f}x dense | relerr {err:.1e}",
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
    ap.add_argument(
        "--builds",
        default="",
        help=f"time these builds of the kernel side by side and stop: {','.join(BUILDS)}",
    )
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--int8", action="store_true", help="--builds with int8 weight values")
    a = ap.parse_args()
    shapes = (
        tuple(tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",") if s)
        or DECODE_SHAPES
    )
    sweep_tokens = tuple(int(t) for t in a.tokens.split(",") if t)
    out = Path(a.out)
    names = tuple(b for b in a.builds.split(",") if b)
    unknown = [b for b in names if b not in BUILDS]
    if unknown:
        ap.error(f"--builds {unknown}: expected names from {', '.join(BUILDS)}")
    print(torch.cuda.get_device_name(0), torch.__version__, flush=True)
    if a.builds:
        rows = sweep_builds(names, sweep_tokens, getattr(torch, a.dtype), shapes, a.int8)
        (out / f"decode_builds_{a.dtype}{'_int8' if a.int8 else ''}.json").write_text(
            json.dumps(rows, default=str)
        )
        return 0
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
    unroll = [] if a.skip_sweep else sweep_builds(("shipped", "unroll1", "unroll4"))
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
