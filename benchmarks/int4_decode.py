"""Check, then time, the 2:4 + int4 (or int8) decode kernel per layer (one call of the device machine).

Usage: python benchmarks/int4_decode.py [--out DIR] [--quick] [--skip-sweep] [--loads]
       [--format int4|int8] [--group-size G] [--tokens 1,4,16,...]

For LLaMA-3-8B's four layer shapes and 1 to 64 tokens it times, side by side, the GPU time of
CUDA-graph replays (medians; every implementation cycles through enough copies of its weight
that the copies hold three times the L2 cache, so each call reads its weight from HBM):

* dense bf16 ``F.linear`` (cuBLAS);
* torch's int4 weight-only kernel (``aten._weight_int4pack_mm`` on a weight packed by
  ``aten._convert_weight_to_int4pack``, group 128, inner_k_tiles 8);
* the explorer's 16-bit 2:4 decode kernel (``explorer.gpu.cuda.decode.DecodeCall``);
* the 2:4 + int4 kernel (``explorer.gpu.cuda.decode_int4.Int4DecodeCall``), default launch.

Above 64 tokens it times the int4 dense route (the weight dequantized per call by
``explorer.gpu.cuda.int4_dequant`` and cuBLAS) against dense bf16 and torch's int4 kernel at
128, 1024 and 4096 tokens. It prints the errors of a quick check, the graph-replay time of the
smallest call (the fixed cost of a launch), a sweep of launch settings (feeding, warps per
block, chunks in flight) at 1, 4 and 16 tokens, optionally variants of the weight loads, the table of times,
ratios over dense bf16 and over torch int4 and the achieved bandwidth (bytes each call must
read and write over its time, also as a share of the device-to-device copy bandwidth measured
in the same run), and the host time per eager call. Full numbers go to DIR/int4_decode.json.

``--format int8`` runs the same for 2:4 + int8 weights (group 128): the kernel reads one int8
code a kept value, and the table's torch column becomes the explorer's older int8 decode kernel
(``DecodeCall`` on ``pack(w, int8=True)``: one float32 scale per row, the 16-bit instruction
stream plus conversions). Its numbers go to DIR/int8_decode.json; the prefill table is int4's.

``--group-size 64`` or ``32`` runs the same for the group sizes a joint prune-and-quantize keeps
its accuracy at: the build of the kernels that reads 2 or 4 scales per 128 columns, torch's int4
kernel at that group size, and files named ``..._g64.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from explorer.bench.decode import DECODE_SHAPES, copy_bandwidth
from explorer.gpu.cuda.code_tiles import tile_coded_weight
from explorer.gpu.cuda.coded_launch import (
    METHODS,
    Int4LaunchConfig,
    default_int4_config,
    multiprocessor_count,
    token_tiles,
)
from explorer.gpu.cuda.decode import DecodeCall, pack
from explorer.gpu.cuda.decode_int4 import (
    Int4DecodeCall,
    decode_int4_matmul,
    pack_int4_weight,
    pack_int8_weight,
)
from explorer.gpu.cuda.int4_dequant import Int4Dequantizer
from explorer.gpu.routes.timing import graph_ms, host_us
from explorer.lowbit import GroupCodedWeight
from explorer.masks import make_mask

TOKENS = (1, 4, 16, 32, 64)
#: Token counts of the dense route's prefill table (above the decode kernel's 64).
PREFILL_TOKENS = (128, 1024, 4096)
GROUP = 128
DEV = "cuda"
#: The codes under test, set by ``--format``: "int4" or "int8".
FORMAT = "int4"


def pack_coded(w: torch.Tensor) -> GroupCodedWeight:
    """``w`` (2:4) compressed and checked for the kernel in the format and group size under test."""
    return (pack_int4_weight if FORMAT == "int4" else pack_int8_weight)(w, group_size=GROUP)


def config(method: str, warps: int, ahead: int) -> Int4LaunchConfig:
    """A launch of the format and group size under test."""
    return Int4LaunchConfig(method, warps, ahead, FORMAT, GROUP)


def default_config(n: int, k: int, t: int) -> Int4LaunchConfig:
    """The launch a call makes unless given one, for the format and group size under test."""
    return default_int4_config(n, k, t, multiprocessor_count(0), FORMAT, GROUP)


def _weight(n: int, k: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    w = torch.randn(n, k, device=DEV, generator=gen).to(dtype)
    return w * make_mask(w, "2:4").to(dtype)


def _copy(p: GroupCodedWeight) -> GroupCodedWeight:
    parts = (p.codes.clone(), p.metadata.clone(), p.scales.clone())
    return type(p)(*parts, p.shape, p.group_size)


def rotated_us(make, footprint: int, l2: int) -> float:
    """Median microseconds per call of graph replays cycling over copies that miss in L2.

    ``make()`` returns a fresh callable over its own copy of the weight (``footprint`` bytes).
    """
    copies = max(2, min(64, math.ceil(3 * l2 / max(footprint, 1))))
    calls = [make() for _ in range(copies)]
    cycle = itertools.cycle(calls)
    iters = copies * max(1, math.ceil(40 / copies))
    return graph_ms(lambda: next(cycle)(), iters=iters, reps=7) * 1e3


def int4_bytes(n: int, k: int, group: int | None = None) -> int:
    """Bytes of a 2:4 + int4 (int8 under ``--format int8``) weight: codes, positions, scales."""
    group = group or GROUP
    codes = n * k // 4 if FORMAT == "int4" else n * k // 2
    return codes + n * k // 8 + n * (k // group) * 4


def torch_int4_bytes(n: int, k: int, group: int | None = None) -> int:
    """Bytes of torch's int4 weight: 4-bit codes, bf16 scale and zero per group."""
    group = group or GROUP
    return n * k // 2 + (k // group) * n * 2 * 2


def _relerr(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).norm() / ref.norm().clamp_min(1e-30))


# -- torch's int4 weight-only kernel --------------------------------------------------------------
def torch_int4(n: int, k: int, gen: torch.Generator):
    """(packed weight, scales and zeros, dense bf16 equivalent) for torch's int4 kernel.

    Codes are random; the dense equivalent assumes torch's documented tinygemm dequantization
    ``(q - 8) * scale + zero`` with the high nibble of byte j holding column 2j (it is only
    used to print a sanity error, never to pass or fail).
    """
    q = torch.randint(0, 16, (n, k), device=DEV, generator=gen, dtype=torch.int32)
    packed_u8 = ((q[:, 0::2] << 4) | q[:, 1::2]).to(torch.uint8)
    w = torch.ops.aten._convert_weight_to_int4pack(packed_u8.contiguous(), 8)
    scale = torch.rand(k // GROUP, n, device=DEV, generator=gen) * 0.02 + 0.01
    zero = torch.zeros(k // GROUP, n, device=DEV)
    sz = torch.stack([scale, zero], dim=-1).to(torch.bfloat16).contiguous()
    s_full = sz[..., 0].float().t().repeat_interleave(GROUP, dim=1)
    dense = ((q.float() - 8) * s_full).to(torch.bfloat16)
    return w, sz, dense


# -- checks ---------------------------------------------------------------------------------------
def check(gen: torch.Generator) -> list[dict]:
    """Both feedings against a float64 product on fresh inputs (with bias, strided rows)."""
    rows = []
    for (n, k), dt, t in itertools.product(
        ((4096, 4096), (1000, 4224), (48, 128)), (torch.bfloat16, torch.float16), (1, 9, 16, 33, 64)
    ):
        p = pack_coded(_weight(n, k, torch.float32, gen))
        bias = torch.randn(n, device=DEV, generator=gen).to(dt)
        wide = torch.randn(t, k + 64, device=DEV, generator=gen).to(dt)
        x = wide[:, 32 : 32 + k]
        ref = x.double() @ p.decompress().double().t() + bias.double()
        row = dict(n=n, k=k, tokens=t, dtype=str(dt).removeprefix("torch."))
        for method, ahead in (("spa", 4), ("sp", 2), ("ex", 2)):
            cfg = config(method, 4, ahead)
            y = decode_int4_matmul(x, p, bias, config=cfg)
            row[f"relerr_{method}"] = _relerr(y, ref)
            row[f"finite_{method}"] = bool(torch.isfinite(y).all())
        rows.append(row)
    return rows


# -- launch sweep ---------------------------------------------------------------------------------
def sweep(gen: torch.Generator, l2: int, tokens=(1, 16)) -> list[dict]:
    """Per-layer time of each launch setting at ``tokens`` (bf16), against the default."""
    rows = []
    for (n, k), t in itertools.product(DECODE_SHAPES, tokens):
        p = pack_coded(_weight(n, k, torch.float32, gen))
        x = torch.randn(t, k, device=DEV, generator=gen).to(torch.bfloat16)
        tiles = token_tiles(t)
        configs = []
        grid = {
            "spa": itertools.product((2, 4), (2, 4, 8, 12, 16)),
            "ex": itertools.product((1, 2), (2, 4, 8, 16)),
            "sp": [(1, 16), (2, 8)],
        }
        for method, pairs in grid.items():
            for ahead, warps in pairs:
                cfg = config(method, warps, ahead)
                if warps <= cfg.max_warps(tiles) and warps <= k // 128:
                    configs.append(cfg)
        dflt = default_config(n, k, t)
        times = {}
        for cfg in configs:

            def make(cfg=cfg, p=p, x=x, t=t):
                call = Int4DecodeCall(_copy(p), None, t, torch.bfloat16, cfg)
                return lambda: call(x)

            times[repr(cfg)] = rotated_us(make, int4_bytes(n, k), l2)
        dkey = repr(dflt)
        if dkey not in times:

            def make(p=p, x=x, t=t, dflt=dflt):
                call = Int4DecodeCall(_copy(p), None, t, torch.bfloat16, dflt)
                return lambda: call(x)

            times[dkey] = rotated_us(make, int4_bytes(n, k), l2)
        best = min(times, key=times.get)
        rows.append(dict(n=n, k=k, tokens=t, times_us=times, best=best, default=dkey))
        short = {
            key.removeprefix("Int4LaunchConfig(")
            .removesuffix(")")
            .replace("warps=", "w")
            .replace("ahead=", "d")
            .replace(", fmt='int8'", "")
            .replace("'", "")
            .replace(", ", "/"): round(v, 2)
            for key, v in sorted(times.items(), key=lambda kv: kv[1])
        }
        print(
            f"sweep {n}x{k}@{t}: default {times[dkey]:.2f} us, best {times[best]:.2f} us "
            f"({best}); {short}",
            flush=True,
        )
    return rows


def floor_us(gen: torch.Generator, l2: int) -> dict:
    """Graph-replay time of the smallest calls (one block, 16x128): the fixed cost per launch."""
    w = _weight(16, 128, torch.float32, gen)
    p = pack_coded(w)
    x = torch.randn(1, 128, device=DEV, generator=gen).to(torch.bfloat16)
    wb = w.to(torch.bfloat16)

    def tiny():
        call = Int4DecodeCall(_copy(p), None, 1, torch.bfloat16)
        return lambda: call(x)

    out = {
        "int4_24_16x128_us": rotated_us(tiny, l2, l2),
        "linear_16x128_us": rotated_us(lambda: lambda: F.linear(x, wb), l2, l2),
    }
    print(
        f"floor: 16x128 at 1 token, 2:4 {FORMAT} {out['int4_24_16x128_us']:.2f} us, F.linear "
        f"{out['linear_16x128_us']:.2f} us per graph-replayed call",
        flush=True,
    )
    return out


def load_variants(gen: torch.Generator, l2: int) -> list[dict]:
    """The weight loads with L2 prefetch hints, against the shipped build (1 and 16 tokens)."""
    import cupy as cp

    from explorer.gpu.cuda.sources import kernel_source

    src = kernel_source("decode24_int4")
    line = '#define INT4_WEIGHT_LOAD "ld.global.nc.L1::no_allocate.v4.u32"'
    assert line in src
    variants = {
        "L2::128B": line.replace("no_allocate.v4", "no_allocate.L2::128B.v4"),
        "L2::256B": line.replace("no_allocate.v4", "no_allocate.L2::256B.v4"),
        "plain .nc": line.replace(".L1::no_allocate", ""),
    }
    modules = {"shipped": None}
    build = tuple(f"-D{key}={value}" for key, value in config("sp", 1, 1).defines)
    for name, new in variants.items():
        mod = cp.RawModule(code=src.replace(line, new), options=("-std=c++17", *build))
        mod.compile()
        modules[name] = mod
    rows = []
    for (n, k), t in itertools.product(DECODE_SHAPES, (1, 16)):
        p = pack_coded(_weight(n, k, torch.float32, gen))
        x = torch.randn(t, k, device=DEV, generator=gen).to(torch.bfloat16)
        times = {}
        for name, mod in modules.items():

            def make(mod=mod, p=p, x=x, t=t):
                call = Int4DecodeCall(_copy(p), None, t, torch.bfloat16, module=mod)
                return lambda: call(x)

            times[name] = rotated_us(make, int4_bytes(n, k), l2)
        rows.append(dict(n=n, k=k, tokens=t, times_us=times))
        print(
            f"loads {n}x{k}@{t}: " + ", ".join(f"{a} {v:.2f}" for a, v in times.items()),
            flush=True,
        )
    return rows


# -- the table ------------------------------------------------------------------------------------
def table(gen: torch.Generator, l2: int, copy_bps: float, tokens=TOKENS, dtypes=None) -> list:
    """One row per (shape, dtype, tokens): every implementation's time, ratios, bandwidth."""
    dtypes = dtypes or (torch.bfloat16, torch.float16)
    rows = []
    for (n, k), dt in itertools.product(DECODE_SHAPES, dtypes):
        w = _weight(n, k, dt, gen)
        p4 = pack_coded(w.float())
        p16 = pack(w)
        tq = torch_int4(n, k, gen) if dt == torch.bfloat16 and FORMAT == "int4" else None
        for t in tokens:
            x = torch.randn(t, k, device=DEV, generator=gen).to(dt)
            io = (t * k + t * n) * dt.itemsize
            row = dict(n=n, k=k, tokens=t, dtype=str(dt).removeprefix("torch."))
            # what the "torch_int4" keys time in this run
            row["baseline"] = "torch int4" if FORMAT == "int4" else "per-row int8 2:4 (DecodeCall)"

            def dense(w=w, x=x):
                wc = w.clone()
                return lambda: F.linear(x, wc)

            def sparse16(p16=p16, x=x, t=t, dt=dt):
                pc = pack(p16.decompress().to(dt))
                call = DecodeCall(pc, None, t, dt)
                return lambda: call(x)

            def int4_24(p4=p4, x=x, t=t, dt=dt):
                call = Int4DecodeCall(_copy(p4), None, t, dt)
                return lambda: call(x)

            row["dense_us"] = rotated_us(dense, n * k * dt.itemsize, l2)
            row["decode16_us"] = rotated_us(sparse16, p16.nbytes, l2)
            row["int4_24_us"] = rotated_us(int4_24, int4_bytes(n, k), l2)
            row["int4_24_config"] = repr(default_config(n, k, t))
            if FORMAT == "int8":  # the older int8 kernel: per-row scales, 16-bit instructions

                def rows8(w=w, x=x, t=t, dt=dt):
                    call = DecodeCall(pack(w.clone(), int8=True), None, t, dt)
                    return lambda: call(x)

                row["torch_int4_us"] = rotated_us(rows8, n * k // 2 + n * k // 8 + 4 * n, l2)
            if tq is not None:
                try:

                    def torch4(tq=tq, x=x):
                        wq, sz = tq[0].clone(), tq[1].clone()
                        return lambda: torch.ops.aten._weight_int4pack_mm(x, wq, GROUP, sz)

                    row["torch_int4_us"] = rotated_us(torch4, torch_int4_bytes(n, k), l2)
                    y = torch.ops.aten._weight_int4pack_mm(x, tq[0], GROUP, tq[1])
                    row["torch_int4_relerr_vs_assumed_dequant"] = _relerr(
                        y, x.double() @ tq[2].double().t()
                    )
                except Exception as exc:  # a refused call is a result to show, not a crash
                    row["torch_int4_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            for key, nbytes in (
                ("dense", n * k * dt.itemsize),
                ("decode16", p16.nbytes),
                ("int4_24", int4_bytes(n, k)),
                ("torch_int4", torch_int4_bytes(n, k)),
            ):
                if row.get(f"{key}_us"):
                    bps = (nbytes + io) / (row[f"{key}_us"] * 1e-6)
                    row[f"{key}_gbps"] = bps / 1e9
                    row[f"{key}_of_copy"] = bps / copy_bps
            row["int4_24_over_dense"] = row["dense_us"] / row["int4_24_us"]
            row["decode16_over_dense"] = row["dense_us"] / row["decode16_us"]
            if row.get("torch_int4_us"):
                row["torch_int4_over_dense"] = row["dense_us"] / row["torch_int4_us"]
                row["int4_24_over_torch_int4"] = row["torch_int4_us"] / row["int4_24_us"]
            rows.append(row)
            other = "torch int4" if FORMAT == "int4" else "per-row int8 2:4"
            print(
                f"[{FORMAT}] {n}x{k}@{t} {row['dtype']}: dense {row['dense_us']:.2f} us, "
                f"{other} {row.get('torch_int4_us', float('nan')):.2f}, 2:4 16-bit "
                f"{row['decode16_us']:.2f}, 2:4 {FORMAT} {row['int4_24_us']:.2f} us "
                f"({row['int4_24_over_dense']:.2f}x dense, "
                f"{row.get('int4_24_over_torch_int4', float('nan')):.2f}x {other}, "
                f"{row['int4_24_gbps']:.0f} GB/s = {row['int4_24_of_copy']:.0%} of copy)",
                flush=True,
            )
    return rows


def prefill(gen: torch.Generator, l2: int, tokens=PREFILL_TOKENS) -> list[dict]:
    """The int4 dense route above 64 tokens: cuBLAS on the weight dequantized per call.

    Against dense bf16 ``F.linear`` and torch's int4 kernel on the same shapes (bf16).
    """
    rows = []
    for (n, k), t in itertools.product(DECODE_SHAPES, tokens):
        w = _weight(n, k, torch.bfloat16, gen)
        tiles = tile_coded_weight(pack_int4_weight(w.float(), group_size=GROUP))
        tq = torch_int4(n, k, gen)
        x = torch.randn(t, k, device=DEV, generator=gen).to(torch.bfloat16)

        def dense(w=w, x=x):
            wc = w.clone()
            return lambda: F.linear(x, wc)

        def dequantized(tiles=tiles, x=x):
            call = Int4Dequantizer(tiles.to(DEV), torch.bfloat16)
            return lambda: F.linear(x, call())

        def torch4(tq=tq, x=x):
            wq, sz = tq[0].clone(), tq[1].clone()
            return lambda: torch.ops.aten._weight_int4pack_mm(x, wq, GROUP, sz)

        row = dict(n=n, k=k, tokens=t, dtype="bfloat16")
        row["dense_us"] = rotated_us(dense, n * k * 2, l2)
        row["dequantized_us"] = rotated_us(dequantized, int4_bytes(n, k), l2)
        row["torch_int4_us"] = rotated_us(torch4, torch_int4_bytes(n, k), l2)
        row["dequantized_over_torch_int4"] = row["torch_int4_us"] / row["dequantized_us"]
        row["dequantized_over_dense"] = row["dense_us"] / row["dequantized_us"]
        rows.append(row)
        print(
            f"[prefill] {n}x{k}@{t}: dense {row['dense_us']:.1f} us, torch int4 "
            f"{row['torch_int4_us']:.1f}, dequantized + cuBLAS {row['dequantized_us']:.1f} "
            f"({row['dequantized_over_torch_int4']:.2f}x torch int4, "
            f"{row['dequantized_over_dense']:.2f}x dense)",
            flush=True,
        )
    return rows


def host_cost(gen: torch.Generator, calls: int = 2000) -> dict:
    """Host microseconds per eager call, Int4DecodeCall against F.linear (4096x4096, 1 token)."""
    w = _weight(4096, 4096, torch.bfloat16, gen)
    x = torch.randn(1, 4096, device=DEV, generator=gen).to(torch.bfloat16)
    call = Int4DecodeCall(pack_coded(w.float()), None, 1, torch.bfloat16)
    fns = {"Int4DecodeCall": lambda: call(x), "F.linear": lambda: F.linear(x, w)}
    out = {}
    for name, fn in fns.items():
        issue = statistics.median(host_us(fn, iters=calls) for _ in range(3))
        walls = []
        for _ in range(3):
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) / calls * 1e6)
        out[name] = dict(issue_us=issue, wall_us=statistics.median(walls))
        print(
            f"host {name}: {issue:.2f} us to issue a call, {out[name]['wall_us']:.2f} us per call "
            f"back to back ({calls} calls, synchronized at the end)",
            flush=True,
        )
    return out


def format_table(rows: list[dict]) -> str:
    other = "torch int4" if FORMAT == "int4" else "per-row int8 2:4"
    head = (
        f"| layer | dtype | tokens | dense us | {other} us | 2:4 16-bit us | 2:4 {FORMAT} us | "
        f"{FORMAT} 2:4 / dense | / {other} | GB/s | of copy |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['n']}x{r['k']} | {r['dtype']} | {r['tokens']} | {r['dense_us']:.2f} | "
            f"{r.get('torch_int4_us', float('nan')):.2f} | {r['decode16_us']:.2f} | "
            f"{r['int4_24_us']:.2f} | {r['int4_24_over_dense']:.2f}x | "
            f"{r.get('int4_24_over_torch_int4', float('nan')):.2f}x | "
            f"{r['int4_24_gbps']:.0f} | {r['int4_24_of_copy']:.0%} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="bf16 only, 1 and 16 tokens")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--loads", action="store_true", help="also time L2 prefetch hints")
    ap.add_argument("--format", choices=("int4", "int8"), default="int4")
    ap.add_argument("--group-size", type=int, choices=(32, 64, 128), default=128)
    ap.add_argument("--tokens", default=None, help="token counts of the table, e.g. 1,16,64")
    a = ap.parse_args()
    global FORMAT, GROUP
    FORMAT, GROUP = a.format, a.group_size
    out = Path(a.out)
    print(torch.cuda.get_device_name(0), torch.__version__, flush=True)
    gen = torch.Generator(device=DEV).manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    copy_bps = copy_bandwidth()
    print(f"copy bandwidth {copy_bps / 1e9:.0f} GB/s (read + write), L2 {l2 >> 20} MB", flush=True)
    checks = check(gen)
    bad = [
        r for r in checks if not all(r[f"relerr_{m}"] < 4e-3 and r[f"finite_{m}"] for m in METHODS)
    ]
    worst = ", ".join(f"{m} {max(r[f'relerr_{m}'] for r in checks):.2e}" for m in METHODS)
    print(f"checks: {len(checks)} cases, max relerr {worst}, {len(bad)} bad", flush=True)
    for r in bad[:8]:
        print("BAD", r, flush=True)
    result = dict(
        format=FORMAT,
        group_size=GROUP,
        device=torch.cuda.get_device_name(0),
        torch=torch.__version__,
        copy_gbps=copy_bps / 1e9,
        checks=checks,
    )
    result["floor"] = floor_us(gen, l2)
    if not a.skip_sweep:
        result["sweep"] = sweep(gen, l2, tokens=(1, 4, 16) if GROUP == 128 else (16, 64))
    if a.loads:
        result["loads"] = load_variants(gen, l2)
    tokens, dtypes = ((1, 16), (torch.bfloat16,)) if a.quick else (TOKENS, None)
    if a.tokens:
        tokens = tuple(int(t) for t in a.tokens.split(","))
    result["rows"] = table(gen, l2, copy_bps, tokens, dtypes)
    result["host"] = host_cost(gen)
    if FORMAT == "int4":
        result["prefill"] = prefill(gen, l2, (128, 4096) if a.quick else PREFILL_TOKENS)
    suffix = "" if GROUP == 128 else f"_g{GROUP}"
    (out / f"{FORMAT}_decode{suffix}.json").write_text(json.dumps(result, indent=1, default=str))
    print(format_table(result["rows"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
