"""The benchmark suites: matmul shapes, the LLaMA MLP block, CSR/BSR and the check kernel."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable

import torch
from torch import nn

from explorer.dtypes import dtype_name
from explorer.gpu.library.search import search_algorithm
from explorer.gpu.routes.timing import SLOW_S, call_s, eager_ms, graph_ms, host_us
from explorer.masks import make_mask

__all__ = [
    "FULL_SHAPES",
    "QUICK_SHAPES",
    "bench_check_kernel",
    "bench_matmul",
    "bench_mlp",
    "bench_unstructured",
    "llama_mlp",
]

_LLAMA = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)]  # (out, in)
_SHIPPED = [
    (256, 64),
    (256, 256),
    (512, 784),
    (512, 512),
    (384, 384),
    (1536, 384),
    (384, 1536),
    (576, 576),
    (1536, 576),
    (576, 1536),
    (192, 576),
]
_VIT = [(3072, 768), (768, 3072), (4096, 1024), (1024, 4096)]

#: (out, tokens, in) triples of the full run
FULL_SHAPES: list[tuple[int, int, int]] = (
    [(o, t, i) for (o, i) in _LLAMA for t in (16, 64, 256, 1024, 4096, 16384)]
    + [(8192, 8192, 8192)]
    + [(o, b * 197, i) for (o, i) in _VIT for b in (1, 32)]
    + [(o, t, i) for (o, i) in _SHIPPED for t in (128, 1024)]
)
#: the targets plus a few small layers: fits one device call
QUICK_SHAPES: list[tuple[int, int, int]] = [
    (4096, 1024, 4096),
    (11008, 4096, 4096),
    (8192, 8192, 8192),
    (4096, 16, 4096),
    (1536, 1024, 384),
    (576, 1024, 1536),
]


def mask24(w: torch.Tensor) -> torch.Tensor:
    """Magnitude 2:4 along the last dimension (zeros in place): :func:`explorer.make_mask`.

    Parameters
    ----------
    w : torch.Tensor
        The weight.

    Returns
    -------
    torch.Tensor
    """
    return w.masked_fill(~make_mask(w, "2:4"), 0)


def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _rows_for(
    base: dict, impls: dict[str, Callable], graph: bool, host: bool, host_iters: int = 200
) -> list[dict]:
    rows = []
    for impl, fn in impls.items():
        for mode in ("eager", "graph") if graph else ("eager",):
            r = dict(base, impl=impl, mode=mode)
            try:
                slow = call_s(fn) > SLOW_S  # e.g. a path that rebuilds its plan every call
                if mode == "eager":
                    r["ms"] = eager_ms(fn, iters=2, reps=3, warmup=1) if slow else eager_ms(fn)
                    if host:
                        r["host_us"] = host_us(fn, iters=3 if slow else host_iters)
                else:
                    r["ms"] = graph_ms(fn, iters=2, reps=3) if slow else graph_ms(fn)
                r["status"] = "ok"
            except Exception as exc:  # a failed case is a row of the table, not the end of the run
                r["status"] = "failed"
                r["error"] = f"{type(exc).__name__}: {exc}"[:300]
                torch.cuda.synchronize()
            rows.append(r)
    return rows


def _tflops(rows: list[dict], flops: float) -> None:
    for r in rows:
        if r.get("ms"):
            r["tflops"] = flops / (r["ms"] * 1e-3) / 1e12


def bench_matmul(
    m: int, n: int, k: int, dtype: torch.dtype, graph: bool = True, alg: int = -1
) -> list[dict]:
    """Rows for one ``[n tokens, k] @ [m, k]^T`` problem: dense, torch eager, explorer.

    Parameters
    ----------
    m, n, k : int
        Output features, tokens and input features.
    dtype : torch.dtype
        The dtype (16-bit or int8).
    graph : bool, optional
        Also time CUDA-graph replay.
    alg : int, optional
        The cuSPARSELt algorithm; -1 searches for one.

    Returns
    -------
    list of dict
    """
    from explorer.gpu.library import cusparselt as C
    from explorer.gpu.library import torch_backend as TB
    from explorer.gpu.modules.sparse_linear import SparseLinear

    dev = "cuda"
    base = dict(suite="matmul", m=m, n=n, k=k, dtype=dtype_name(dtype), alg=alg)
    if dtype == torch.int8:
        w = mask24(torch.randint(-127, 128, (m, k), device=dev).float()).to(torch.int8)
        x = torch.randint(-127, 128, (n, k), device=dev).to(torch.int8)
        wt = w.t()  # [k, m] column-major: the layout cuBLASLt's int8 kernels want
        cw = C.compress(w, check=False)
        if alg < 0:  # tune in a child process, as SparseLinear does for 16-bit layers
            try:
                alg = search_algorithm(cw, w, n, out_dtype=torch.int32)["alg"]
            except RuntimeError:
                alg = -1
            base["alg"] = alg
        wc_t = TB.compress(w)
        impls = {
            "dense": lambda: torch._int_mm(x, wt),
            "torch": lambda: TB.sparse_mm(wc_t, x, out_dtype=torch.int32),
            "explorer": lambda: C.matmul(cw, x, out_dtype=torch.int32, alg=alg),
        }
        ref = (x.double() @ w.double().t()) if n * m * k <= 2**33 else None
        y = impls["explorer"]()
    else:
        w = mask24(torch.randn(m, k, device=dev, dtype=dtype))
        x = torch.randn(n, k, device=dev, dtype=dtype)
        lin = nn.Linear(k, m, bias=False, device=dev, dtype=dtype)
        with torch.no_grad():
            lin.weight.copy_(w)
        sl = SparseLinear.from_linear(lin, alg=alg, tune_tokens=(n,) if alg < 0 else ())
        wc_t = TB.compress(w)
        impls = {
            "dense": lambda: nn.functional.linear(x, w),
            "torch": lambda: TB.sparse_mm(wc_t, x),
            "explorer": lambda: sl(x),
        }
        ref = x.float() @ w.float().t()
        y = sl(x)
    base["err"] = _relerr(y, ref) if ref is not None else None
    rows = _rows_for(base, impls, graph, host=True)
    _tflops(rows, 2.0 * m * n * k)
    return rows


class _MLP(nn.Module):
    """LLaMA's SwiGLU block, for when transformers is not installed (never fused)."""

    def __init__(self, d: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, h, bias=False, device="cuda", dtype=dtype)
        self.up_proj = nn.Linear(d, h, bias=False, device="cuda", dtype=dtype)
        self.down_proj = nn.Linear(h, d, bias=False, device="cuda", dtype=dtype)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class _FusedDense(nn.Module):
    """The dense block with gate and up stacked into one cuBLAS call.

    The fair comparison for the explorer's fused sparse block.
    """

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach()
        self.down = mlp.down_proj.weight.detach()

    def forward(self, x):
        g, u = nn.functional.linear(x, self.gate_up).chunk(2, dim=-1)
        return nn.functional.linear(nn.functional.silu(g) * u, self.down)


def llama_mlp(d: int, h: int, dtype: torch.dtype) -> nn.Module:
    """The ``LlamaMLP`` of transformers (what real models run), or an equivalent block without it.

    Parameters
    ----------
    d, h : int
        Hidden and intermediate widths.
    dtype : torch.dtype
        The dtype.

    Returns
    -------
    torch.nn.Module
        The block on the GPU.
    """
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaMLP
    except ImportError:
        return _MLP(d, h, dtype)
    cfg = LlamaConfig(hidden_size=d, intermediate_size=h, hidden_act="silu", mlp_bias=False)
    return LlamaMLP(cfg).to("cuda", dtype)


def bench_mlp(
    tokens: int, dtype: torch.dtype, d: int = 4096, h: int = 11008, graph: bool = True
) -> list[dict]:
    """The LLaMA-7B MLP block (gate, up, down) dense vs 2:4, end to end.

    Rows: ``dense`` (the block as models run it), ``dense fused`` (gate and up in one cuBLAS
    call), ``torch`` (torch's eager ``_cslt`` path, layer by layer), ``explorer per-layer``
    (three tuned :class:`SparseLinear`, ``fuse_mlp=False``) and ``explorer`` (what
    :func:`sparsify` builds by default: one tuned :class:`SparseGatedMLP`).

    Parameters
    ----------
    tokens : int
        Rows of input.
    dtype : torch.dtype
        The dtype.
    d, h : int, optional
        Hidden and intermediate widths.
    graph : bool, optional
        Also time CUDA-graph replay.

    Returns
    -------
    list of dict
    """
    from explorer.gpu import sparsify

    with torch.no_grad():
        dense = llama_mlp(d, h, dtype)
        for lin in (dense.gate_proj, dense.up_proj, dense.down_proj):
            lin.weight.copy_(mask24(lin.weight) * 20)
        x = torch.randn(tokens, d, device="cuda", dtype=dtype)
        ref = dense(x)
        models = {
            "dense": dense,
            "dense fused": _FusedDense(dense),
            "torch": sparsify(dense, backend="torch", inplace=False, fuse_mlp=False).model,
            "explorer per-layer": sparsify(
                dense, inplace=False, fuse_mlp=False, tune_tokens=(tokens,), tokens=tokens
            ).model,
            # wrapped: a root module cannot be swapped in place, its child can
            "explorer": sparsify(
                nn.Sequential(dense), inplace=False, tune_tokens=(tokens,), tokens=tokens
            ).model,
        }
        errs = {k: _relerr(m(x), ref) for k, m in models.items() if k != "dense"}
    base = dict(
        suite="mlp",
        label=f"LLaMA-7B MLP {d}->{h}->{d} @ {tokens} tok",
        m=h,
        n=tokens,
        k=d,
        dtype=dtype_name(dtype),
        err=errs["explorer"],
        block=type(dense).__name__,
    )

    def run(model):
        def f():
            with torch.no_grad():
                return model(x)

        return f

    impls = {k: run(m) for k, m in models.items()}
    rows = _rows_for(base, impls, graph, host=True, host_iters=20)
    for r in rows:
        r["err"] = errs.get(r["impl"], 0.0)
    _tflops(rows, 2.0 * tokens * d * h * 3)
    return rows


def bench_unstructured(
    m: int = 4096,
    k: int = 4096,
    n: int = 1024,
    sparsities: Iterable[float] = (0.5, 0.9, 0.99, 0.999),
    dtype: torch.dtype = torch.float16,
    block: int = 32,
) -> list[dict]:
    """CSR (``torch.sparse.mm``) and BSR against dense, at several sparsities.

    Parameters
    ----------
    m, k, n : int, optional
        Output features, input features and tokens.
    sparsities : Iterable of float, optional
        The fractions of zeros.
    dtype : torch.dtype, optional
        The dtype.
    block : int, optional
        The BSR block size.

    Returns
    -------
    list of dict
    """
    rows = []
    x = torch.randn(k, n, device="cuda", dtype=dtype)
    dense_w = torch.randn(m, k, device="cuda", dtype=dtype)
    t_dense = eager_ms(lambda: dense_w @ x)
    for s in sparsities:
        keep = torch.rand(m, k, device="cuda") >= s
        w = dense_w * keep
        bkeep = torch.rand(m // block, k // block, device="cuda") >= s
        wb = dense_w * bkeep.repeat_interleave(block, 0).repeat_interleave(block, 1)
        for fmt, make in (
            ("csr", lambda w=w: w.to_sparse_csr()),
            ("bsr", lambda wb=wb: wb.to_sparse_bsr((block, block))),
        ):
            r = dict(
                suite="unstructured",
                m=m,
                n=n,
                k=k,
                dtype=dtype_name(dtype),
                impl=fmt,
                mode="eager",
                sparsity=s,
                dense_ms=t_dense,
            )
            try:
                sw = make()
                r["ms"] = eager_ms(lambda sw=sw: torch.sparse.mm(sw, x), iters=5, reps=5, warmup=2)
                r["speedup"] = t_dense / r["ms"]
                r["status"] = "ok"
            except Exception as exc:  # a failed case is a row of the table, not the end of the run
                r["status"] = "failed"
                r["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(r)
    return rows


def bench_check_kernel(gib: float = 1.0) -> list[dict]:
    """The N:M validity kernel over ``gib`` GiB of fp16 weights vs a device copy.

    Parameters
    ----------
    gib : float, optional
        GiB of weights checked.

    Returns
    -------
    list of dict
    """
    from explorer.gpu.cuda import kernels as K

    numel = int(gib * 2**30) // 2
    numel -= numel % 4096
    x = mask24(torch.randn(numel // 4096, 4096, device="cuda", dtype=torch.float16))
    y = torch.empty_like(x)
    hist = torch.zeros(8, dtype=torch.int64, device="cuda")
    first = torch.zeros(1, dtype=torch.int64, device="cuda")
    t_copy = eager_ms(lambda: y.copy_(x), iters=10)
    t_chk = eager_ms(lambda: K.nm_histogram_into(x, 2, 4, hist, first), iters=10)
    nbytes = x.numel() * 2
    copy_bw = 2 * nbytes / (t_copy * 1e-3) / 1e12
    chk_bw = nbytes / (t_chk * 1e-3) / 1e12
    ok = K.nm_histogram(x).valid
    return [
        dict(
            suite="kernel",
            label=f"nm_check 2:4 on {nbytes / 2**30:.2f} GiB fp16",
            impl="nm_check",
            mode="eager",
            ms=t_chk,
            copy_ms=t_copy,
            tbps=chk_bw,
            copy_tbps=copy_bw,
            fraction_of_copy=chk_bw / copy_bw,
            valid=ok,
            status="ok",
        )
    ]


def safe(fn: Callable[[], list[dict]], base: dict, timeout: float | None = None) -> list[dict]:
    """Run one suite entry; a crash (or a timeout, on the main thread) becomes one failed row.

    Parameters
    ----------
    fn : callable
        The suite entry, returning rows.
    base : dict
        The entry's fields, copied into the failed row.
    timeout : float or None, optional
        Seconds before the entry is stopped (on the main thread only).

    Returns
    -------
    list of dict
    """
    import signal
    import threading

    use_alarm = bool(timeout) and threading.current_thread() is threading.main_thread()

    def _alarm(signum, frame):
        raise TimeoutError(f"case took longer than {timeout} s")

    old = signal.signal(signal.SIGALRM, _alarm) if use_alarm else None
    if use_alarm:
        signal.setitimer(signal.ITIMER_REAL, float(timeout))
    try:
        return fn()
    except Exception as exc:  # one case failing (or timing out) becomes a row; the run goes on
        return [
            dict(
                base,
                status="failed",
                error=f"{type(exc).__name__}: {exc}"[:300],
                trace=traceback.format_exc()[-800:],
            )
        ]
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
