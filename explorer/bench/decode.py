"""Decode rows of the benchmark: the explorer's 2:4 decode kernel against dense, per layer.

For each weight shape, dtype and token count (1 to 64) one process times, side by side:

* dense cuBLAS (``F.linear`` on the dense masked weight);
* cuSPARSELt (the explorer's :class:`~explorer.gpu.SparseLinear` with its sparse route fixed,
  library-default algorithm);
* the decode kernel on the 16-bit compressed weight, and on the int8 one (weight-only int8,
  16-bit activations).

Each time is the median per call of CUDA-graph replays, and every implementation cycles
through enough copies of its weight that the copies together hold three times the GPU's L2
cache, so no weight is read from L2: what a model whose layers do not fit in L2 sees. Achieved
bandwidth counts the bytes each call must move (weight, input and output once) against the
device-to-device copy bandwidth measured in the same run (bytes read plus bytes written).
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from explorer.dtypes import dtype_name
from explorer.gpu.routes.timing import graph_ms

__all__ = ["DECODE_SHAPES", "DECODE_TOKENS", "bench_decode", "check_decode", "copy_bandwidth"]

#: LLaMA-3-8B's layer shapes (out x in): q/o, k/v, gate/up, down.
DECODE_SHAPES = ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336))
DECODE_TOKENS = (1, 4, 16, 64)


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes per second (read plus written), median of 7.

    Parameters
    ----------
    nbytes : int, optional
        Bytes read plus written per copy.

    Returns
    -------
    float
    """
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = graph_ms(lambda: b.copy_(a), iters=5, reps=7)
    return nbytes / (ms * 1e-3)


def _weight(n: int, k: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    from explorer.masks import make_mask

    w = torch.randn(n, k, device="cuda", generator=gen).to(dtype)
    return w * make_mask(w, "2:4").to(dtype)


def _relerr(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def check_decode(
    shapes=((1000, 4096 + 48), (4096, 4096), (48, 16)),
    tokens=(1, 3, 8, 9, 16, 33, 64),
    dtypes=(torch.bfloat16, torch.float16),
    seed: int = 0,
) -> list[dict]:
    """The decode kernel against a float64 product of the same operands, on fresh inputs.

    Each row holds the relative error ``|y - ref| / |ref|`` of the 16-bit kernel (with a bias
    and a strided input) and of the int8 one, and whether every output was written.

    Parameters
    ----------
    shapes : sequence of (int, int)
        Weight shapes ``(out, in)``.
    tokens : sequence of int
        Token counts.
    dtypes : sequence of torch.dtype
        The 16-bit dtypes.
    seed : int, optional
        Seed of the weights and inputs.

    Returns
    -------
    list of dict
        One row per (shape, dtype, tokens).
    """
    from explorer.gpu.cuda.decode import decode_matmul, pack

    gen = torch.Generator(device="cuda").manual_seed(seed)
    rows = []
    for (n, k), dt, t in itertools.product(shapes, dtypes, tokens):
        w = _weight(n, k, dt, gen)
        bias = torch.randn(n, device="cuda", generator=gen).to(dt)
        wide = torch.randn(t, k + 64, device="cuda", generator=gen).to(dt)
        x = wide[:, 32 : 32 + k]  # strided rows, 64-byte aligned
        p16, p8 = pack(w), pack(w, int8=True)
        ref = x.double() @ w.double().t() + bias.double()
        y = decode_matmul(x, p16, bias)
        ref8 = x.double() @ p8.decompress().double().t()
        y8 = decode_matmul(x, p8)
        rows.append(
            dict(
                suite="decode",
                case="check",
                n=n,
                k=k,
                tokens=t,
                dtype=dtype_name(dt),
                relerr=_relerr(y, ref),
                relerr_int8=_relerr(y8, ref8),
                finite=bool(torch.isfinite(y).all() and torch.isfinite(y8).all()),
            )
        )
    return rows


def _rotating_ms(make, footprint: int, l2: int) -> float:
    """Median per-call graph time of calls cycling over enough copies to miss in L2."""
    copies = max(2, min(64, math.ceil(3 * l2 / max(footprint, 1))))
    calls = [make() for _ in range(copies)]
    cycle = itertools.cycle(calls)
    iters = copies * max(1, math.ceil(40 / copies))
    return graph_ms(lambda: next(cycle)(), iters=iters, reps=7)


def bench_decode(
    shapes=DECODE_SHAPES,
    tokens=DECODE_TOKENS,
    dtypes=(torch.bfloat16, torch.float16),
    log=None,
) -> list[dict]:
    """Time dense, cuSPARSELt and the decode kernel (16-bit and int8) per layer.

    Parameters
    ----------
    shapes : sequence of (int, int), optional
        Weight shapes ``(out, in)``.
    tokens : sequence of int, optional
        Token counts.
    dtypes : sequence of torch.dtype, optional
        The 16-bit dtypes.
    log : file-like, optional
        Where a line per row is printed; None prints nothing.

    Returns
    -------
    list of dict
        One row per (shape, dtype, tokens): times in ms, ratios over dense, bytes moved and the
        achieved share of the copy bandwidth.
    """
    from explorer.gpu.cuda.decode import decode_matmul, pack
    from explorer.gpu.modules.sparse_linear import SparseLinear

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    copy_bps = copy_bandwidth()
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = []
    for (n, k), dt in itertools.product(shapes, dtypes):
        w = _weight(n, k, dt, gen)
        lin = nn.Linear(k, n, bias=False, device="cuda", dtype=dt)
        with torch.no_grad():
            lin.weight.copy_(w)
        for t in tokens:
            x = torch.randn(t, k, device="cuda", generator=gen).to(dt)
            p16, p8 = pack(w), pack(w, int8=True)
            io = (t * k + t * n) * dt.itemsize
            row = dict(
                suite="decode",
                case="layer",
                label=f"{n}x{k}@{t}",
                m=n,
                n=t,
                k=k,
                dtype=dtype_name(dt),
                copy_gbps=copy_bps / 1e9,
                status="ok",
            )

            def dense_call(w=w, x=x):
                wc = w.clone()
                return lambda: nn.functional.linear(x, wc)

            def decode_call(int8=False, w=w, x=x):
                pc = pack(w, int8=int8)
                return lambda: decode_matmul(x, pc)

            def cslt_call(lin=lin, x=x):
                sl = SparseLinear.from_linear(lin, layout="cc")
                sl(x)
                return lambda: sl(x)

            dense_bytes = n * k * dt.itemsize
            row["dense_ms"] = _rotating_ms(dense_call, dense_bytes, l2)
            row["decode_ms"] = _rotating_ms(decode_call, p16.nbytes, l2)
            row["decode_int8_ms"] = _rotating_ms(lambda: decode_call(True), p8.nbytes, l2)
            try:
                row["cusparselt_ms"] = _rotating_ms(cslt_call, p16.nbytes, l2)
            except Exception as exc:  # a refused problem is a result to show, not a crash
                row["cusparselt_error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
            for key in ("decode", "decode_int8", "cusparselt"):
                if row.get(f"{key}_ms"):
                    row[f"{key}_speedup"] = row["dense_ms"] / row[f"{key}_ms"]
            for key, nbytes in (
                ("dense", dense_bytes),
                ("decode", p16.nbytes),
                ("decode_int8", p8.nbytes),
            ):
                row[f"{key}_bw"] = (nbytes + io) / (row[f"{key}_ms"] * 1e-3) / copy_bps
            if log is not None:
                print(
                    f"[decode] {row['label']} {row['dtype']}: dense {row['dense_ms'] * 1e3:.1f} us, "
                    f"decode {row['decode_speedup']:.2f}x ({row['decode_bw']:.0%} of copy), int8 "
                    f"{row['decode_int8_speedup']:.2f}x, cuSPARSELt "
                    f"{row.get('cusparselt_speedup', float('nan')):.2f}x",
                    file=log,
                    flush=True,
                )
            rows.append(row)
    return rows
