"""FP8 2:4 against FP8 dense, per layer: the question a user deploying FP8 prefill asks.

For each layer shape (out x in) at the given token counts, on one GPU, GPU time of CUDA-graph
replays (medians): bf16 dense (``F.linear``), FP8 dense (``torch._scaled_mm`` with row-wise
scales: per-token activation scales, per-channel weight scales), and FP8 2:4 through the
explorer's cuSPARSELt plans with the library's default algorithm and with the algorithm
searched for the shape (``explorer.gpu.library.search``, in a child process, within its time
budget). Each FP8 route is timed twice: the matmul alone on an already quantized input, and with the
activation's per-token quantization (``explorer.gpu.modules.fp8.quantize_activations``) and the
scales applied, which is what a layer pays. Every route's output is checked against the float64
product of the same quantized operands. Run on a GPU (capability 8.9 or newer)::

    python benchmarks/fp8_layers.py --tokens 4096 --json fp8_layers.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from explorer.bench import environment
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library.search import search_algorithm
from explorer.gpu.modules import fp8
from explorer.gpu.routes.timing import graph_ms
from explorer.masks import make_mask

SHAPES_8B = "4096x4096,1024x4096,14336x4096,4096x14336"


def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def bench_shape(m: int, k: int, n: int, search: bool) -> dict:
    """One shape at ``n`` tokens: times (ms), ratios and errors of every route."""
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + k)
    w = torch.randn(m, k, device="cuda", generator=gen)
    w = (w * make_mask(w, "2:4").to(w.device)).to(torch.bfloat16)
    x = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
    wq, w_scale = fp8.quantize_weight(w)
    xq, x_scale = fp8.quantize_activations(x)
    ref = (xq.double() * x_scale[:, None].double()) @ (wq.double() * w_scale[:, None].double()).t()
    row: dict = {"m": m, "k": k, "n": n}
    sa, sb = x_scale[:, None].float(), w_scale[None, :].float()
    wt = wq.t()  # column-major, as _scaled_mm wants its second operand

    def dense_fp8() -> torch.Tensor:
        return torch._scaled_mm(xq, wt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    def dense_fp8_cast() -> torch.Tensor:
        q, s = fp8.quantize_activations(x)
        return torch._scaled_mm(q, wt, scale_a=s[:, None], scale_b=sb, out_dtype=torch.bfloat16)

    cw = C.compress(wq)
    algs = {"default": -1}
    if search:
        try:
            found = search_algorithm(cw, wq, n, out_dtype=torch.bfloat16)
            algs["searched"] = found["alg"]
            row["search_complete"] = found["complete"]
        except RuntimeError as exc:
            row["search_error"] = str(exc)[:200]

    def sparse(alg: int, cast: bool):
        def call() -> torch.Tensor:
            q, s = fp8.quantize_activations(x) if cast else (xq, x_scale)
            y = C.matmul(cw, q, out_dtype=torch.bfloat16, alg=alg)
            return y * s[:, None].to(y.dtype) * w_scale[None, :].to(y.dtype)

        return call

    routes = {
        "bf16 dense": lambda: torch.nn.functional.linear(x, w),
        "fp8 dense": dense_fp8,
        "fp8 dense + cast": dense_fp8_cast,
    }
    for name, alg in algs.items():
        routes[f"fp8 2:4 {name}"] = sparse(alg, False)
        routes[f"fp8 2:4 {name} + cast"] = sparse(alg, True)
    for name, fn in routes.items():
        try:
            y = fn()
            if name != "bf16 dense":
                row[f"{name} relerr"] = _relerr(y, ref)
            row[f"{name} ms"] = graph_ms(fn, iters=10, reps=7)
        except Exception as exc:  # a refused route is a result to show
            row[f"{name} error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    base = row.get("fp8 dense ms")
    for name in list(row):
        if name.startswith("fp8 2:4") and name.endswith(" ms") and base:
            cast = " + cast" in name
            denom = row.get("fp8 dense + cast ms") if cast else base
            if denom:
                row[name.replace(" ms", " over fp8 dense")] = denom / row[name]
            if row.get("bf16 dense ms"):
                row[name.replace(" ms", " over bf16")] = row["bf16 dense ms"] / row[name]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SHAPES_8B, help="OUTxIN,... (default: LLaMA-3-8B's)")
    p.add_argument("--tokens", default="4096")
    p.add_argument("--no-search", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        m, k = (int(v) for v in shape.split("x"))
        for n in (int(t) for t in args.tokens.split(",")):
            row = bench_shape(m, k, n, not args.no_search)
            rows.append(row)
            print(
                f"{m}x{k} @ {n}: "
                + ", ".join(
                    f"{key} {value:.3g}" for key, value in row.items() if isinstance(value, float)
                ),
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"env": environment(), "rows": rows}, default=str))


if __name__ == "__main__":
    main()
