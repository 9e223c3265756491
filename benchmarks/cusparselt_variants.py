"""Which way of calling cuSPARSELt is fastest: the weight as sparse A or sparse B, each layout.

For ``Y[tokens, out] = X[tokens, in] @ W[out, in]^T`` with a 2:4 ``W`` there are many
equivalent cuSPARSELt problems: the weight can be the structured operand A (``D = W @ X^T``) or
B (``D = X @ W^T``), and the dense operand and the output can each be stored either way round.
This script builds every variant, checks its output against dense, and times the kernel alone
(CUDA events, median) with the library's default algorithm and with the one ``matmul_search``
picks, beside dense cuBLAS. Then it times the LLaMA MLP block built in several ways.

Run on a GPU machine with nvmath-python::

    python benchmarks/cusparselt_variants.py --json variants.jsonl

Each (shape, dtype) runs in a child process, so a configuration that kills the CUDA context
is recorded as ``crashed`` and the sweep goes on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch

from explorer.gpu.routes.timing import eager_ms as cuda_ms

COL, ROW = 1, 2
OP_N, OP_T = 0, 1
CODES = {torch.float16: 2, torch.bfloat16: 14}
SHAPES = [
    (4096, 1024, 4096),
    (11008, 4096, 4096),
    (4096, 4096, 11008),
    (22016, 4096, 4096),
    (8192, 8192, 8192),
]
# (name, sparse operand, dense operand stored as X (x) or X^T (xt), output Y (y) or Y^T (yt),
#  the weight's view: "w" row-major [out, in] or "wt" the same memory read as [in, out] col-major)
VARIANTS = [
    ("A cc", "A", "x", "y"),
    ("A rr", "A", "xt", "yt"),
    ("A rc", "A", "xt", "y"),
    ("A cr", "A", "x", "yt"),
    ("B cc", "B", "x", "y"),
    ("B rr", "B", "xt", "yt"),
    ("B rc", "B", "xt", "y"),
    ("B cr", "B", "x", "yt"),
]


def mask24(w: torch.Tensor) -> torch.Tensor:
    g = w.reshape(-1, 4)
    idx = g.float().abs().topk(2, dim=1).indices
    return (g * torch.zeros_like(g, dtype=torch.bool).scatter_(1, idx, True)).reshape(w.shape)


class Variant:
    """One cuSPARSELt problem equivalent to ``Y = X @ W^T``."""

    def __init__(self, L, h, m, n, k, dtype, sparse, xin, yout, search):
        self.L, self.h = L, h
        code = CODES[dtype]
        self.descs = []
        if sparse == "A":  # D[m, n] = W[m, k] @ X^T[k, n]
            a = L.structured_descriptor_init(
                h, m, k, k, 16, code, ROW, L.Sparsity.SPARSITY_50_PERCENT
            )
            b = (
                L.dense_descriptor_init(h, k, n, k, 16, code, COL)
                if xin == "x"
                else L.dense_descriptor_init(h, k, n, n, 16, code, ROW)
            )
            d = (
                L.dense_descriptor_init(h, m, n, m, 16, code, COL)
                if yout == "y"
                else L.dense_descriptor_init(h, m, n, n, 16, code, ROW)
            )
            self.sp = a
        else:  # D[n, m] = X[n, k] @ W^T[k, m]
            a = (
                L.dense_descriptor_init(h, n, k, k, 16, code, ROW)
                if xin == "x"
                else L.dense_descriptor_init(h, n, k, n, 16, code, COL)
            )
            b = L.structured_descriptor_init(
                h, k, m, k, 16, code, COL, L.Sparsity.SPARSITY_50_PERCENT
            )
            d = (
                L.dense_descriptor_init(h, n, m, m, 16, code, ROW)
                if yout == "y"
                else L.dense_descriptor_init(h, n, m, n, 16, code, COL)
            )
            self.sp = b
        self.descs = [a, b, d]
        self.sparse_a = sparse == "A"
        self.mm = L.matmul_descriptor_init(h, OP_N, OP_N, a, b, d, d, L.ComputeType.COMPUTE_32F)
        self.sel = L.matmul_alg_selection_init(h, self.mm, L.MatmulAlg.DEFAULT)
        self.plan = L.matmul_plan_init(h, self.mm, self.sel)
        ws = L.matmul_get_workspace(h, self.plan)
        self.ws = torch.empty(max(int(ws), 1), dtype=torch.uint8, device="cuda")
        import ctypes

        self._alpha = ctypes.c_float(1.0)
        self._beta = ctypes.c_float(0.0)
        self.alpha = ctypes.addressof(self._alpha)
        self.beta = ctypes.addressof(self._beta)
        self.search = search

    def compress(self, w: torch.Tensor) -> torch.Tensor:
        L, h = self.L, self.h
        size, buf = L.sp_mma_compressed_size2(h, self.sp)
        out = torch.empty(int(size), dtype=torch.uint8, device="cuda")
        tmp = torch.empty(max(int(buf), 1), dtype=torch.uint8, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        L.sp_mma_compress2(
            h,
            self.sp,
            int(self.sparse_a),
            OP_N,
            w.data_ptr(),
            out.data_ptr(),
            tmp.data_ptr(),
            stream,
        )
        torch.cuda.synchronize()
        return out

    def _args(self, wc, xop, d) -> tuple:
        """The arguments of ``matmul`` and ``matmul_search``: operands in this variant's roles."""
        a, b = (wc, xop) if self.sparse_a else (xop, wc)
        ptrs = (a.data_ptr(), b.data_ptr(), self.beta, d.data_ptr(), d.data_ptr())
        return (self.h, self.plan, self.alpha, *ptrs, self.ws.data_ptr(), 0, 0)

    def run(self, wc, xop, d) -> None:
        self.L.matmul(*self._args(wc, xop, d))

    def do_search(self, wc, xop, d) -> int:
        import ctypes

        L = self.L
        L.matmul_search(*self._args(wc, xop, d))
        v = ctypes.c_int32(-1)
        L.matmul_alg_get_attribute(
            self.h, self.sel, L.MatmulAlgAttribute.CONFIG_ID, ctypes.addressof(v), 4
        )
        return int(v.value)


def child(m: int, n: int, k: int, dtype_name: str, start: int) -> None:
    from nvmath.bindings import cusparseLt as L

    dtype = getattr(torch, dtype_name)
    h = L.init()
    torch.manual_seed(0)
    w = mask24(torch.randn(m, k, device="cuda", dtype=dtype))
    x = torch.randn(n, k, device="cuda", dtype=dtype)
    xt = x.t().contiguous()
    ref = torch.nn.functional.linear(x, w)
    base = dict(m=m, n=n, k=k, dtype=dtype_name)
    if start == 0:
        rows = {
            "dense linear": lambda: torch.nn.functional.linear(x, w),
            "dense W@X^T": lambda: torch.mm(w, xt),
        }
        for name, fn in rows.items():
            print(json.dumps(dict(base, variant=name, ms=cuda_ms(fn), status="ok")), flush=True)
    for i, (name, sparse, xin, yout) in enumerate(VARIANTS):
        for search in (False, True):
            step = 2 * i + int(search)
            if step < start:
                continue
            print(json.dumps({"try": step}), flush=True)
            row = dict(base, variant=name, search=search)
            try:
                v = Variant(L, h, m, n, k, dtype, sparse, xin, yout, search)
            except Exception as exc:
                print(json.dumps(dict(row, status="refused", error=str(exc)[:200])), flush=True)
                continue
            wc = v.compress(w)
            xop = x if xin == "x" else xt
            d = torch.empty(m * n, dtype=dtype, device="cuda")
            if search:
                row["alg"] = v.do_search(wc, xop, d)
            v.run(wc, xop, d)
            torch.cuda.synchronize()
            y = d.view(n, m) if yout == "y" else d.view(m, n).t()
            err = float((y.float() - ref.float()).norm() / ref.float().norm())
            row["err"] = err
            if not err < 1e-2:
                print(json.dumps(dict(row, status="wrong")), flush=True)
                continue
            row["ms"] = cuda_ms(lambda v=v, wc=wc, xop=xop, d=d: v.run(wc, xop, d))
            print(json.dumps(dict(row, status="ok")), flush=True)


def sweep(out) -> None:
    for m, n, k in SHAPES:
        for dt in ("float16", "bfloat16"):
            start = 0
            while True:
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", f"{m},{n},{k},{dt},{start}"],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=False,
                )
                last = None
                for line in proc.stdout.splitlines():
                    rec = json.loads(line)
                    if "try" in rec:
                        last = rec["try"]
                        continue
                    last = None
                    out.write(json.dumps(rec) + "\n")
                    print(json.dumps(rec), flush=True)
                if proc.returncode == 0 or last is None:
                    if proc.returncode:
                        print(proc.stderr[-1500:], flush=True)
                    break
                rec = dict(m=m, n=n, k=k, dtype=dt, step=last, status="crashed")
                out.write(json.dumps(rec) + "\n")
                print(json.dumps(rec), proc.stderr[-300:], flush=True)
                start = last + 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default="variants.jsonl")
    p.add_argument("--child")
    a = p.parse_args()
    if a.child:
        m, n, k, dt, start = a.child.split(",")
        child(int(m), int(n), int(k), dt, int(start))
        return
    with open(a.json, "w") as out:
        print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}))
        sweep(out)


if __name__ == "__main__":
    main()
