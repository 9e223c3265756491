"""Host time per call of the explorer's modules against the torch calls they replace.

Eager notebooks and ``torch.compile``'s default mode pay the host's time to issue every call;
on a fast GPU a decode step is often bound by it. This suite measures the microseconds one call
costs on the host, issuing the calls while the GPU is held busy so that none waits for it
(:func:`explorer.gpu.routes.timing.host_us`):

- the decode kernel's launch against ``F.linear`` on the same layer (1 and 16 tokens);
- one ``SparseLinear`` eager call (its fast path) against ``nn.Linear``;
- the Python op ``explorer::sparse_forward`` and, where it is built, the compiled operator
  ``explorer::sparse_call`` (:mod:`explorer.gpu.cuda.native`) called by themselves, and one
  layer under ``torch.compile``'s default mode against the same model compiled dense (the
  difference is the op's cost);
- a fused q/k/v call against three ``nn.Linear`` calls, and the fused SwiGLU block against the
  dense gate, up, activation, multiply and down.
"""

from __future__ import annotations

import torch
from torch import nn

from explorer.dtypes import dtype_name

__all__ = ["bench_host_cost"]


class _Attention(nn.Module):
    def __init__(self, d: int, kv: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.q_proj = nn.Linear(d, d, bias=False, dtype=dtype, device="cuda")
        self.k_proj = nn.Linear(d, kv, bias=False, dtype=dtype, device="cuda")
        self.v_proj = nn.Linear(d, kv, bias=False, dtype=dtype, device="cuda")

    def forward(self, x):
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)


class _SwiGLU(nn.Module):
    def __init__(self, d: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, h, bias=False, dtype=dtype, device="cuda")
        self.up_proj = nn.Linear(d, h, bias=False, dtype=dtype, device="cuda")
        self.down_proj = nn.Linear(h, d, bias=False, dtype=dtype, device="cuda")
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class _Holder(nn.Module):
    """A root to sparsify a block in (a block that is the root itself is not fused)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x):
        return self.block(x)


def _pruned(model: nn.Module) -> nn.Module:
    from explorer.bench.runner import mask24

    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Linear):
                mod.weight.copy_(mask24(mod.weight))
    return model.eval()


def _row(label: str, dtype: torch.dtype, tokens: int, dense_us: float, sparse_us: float) -> dict:
    return dict(
        suite="host",
        label=label,
        dtype=dtype_name(dtype),
        n=tokens,
        m=0,
        k=0,
        dense_host_us=dense_us,
        explorer_host_us=sparse_us,
        ratio=sparse_us / dense_us if dense_us else None,
        status="ok",
    )


def bench_host_cost(dtype: torch.dtype = torch.bfloat16, d: int = 1024, log=None) -> list[dict]:
    """Host microseconds per call, dense and explorer side by side (see the module).

    The layers are small (``d`` = 1024 by default), as in a decode step. The GPU is held busy
    while each call is issued (:func:`~explorer.gpu.routes.timing.host_us`), so a call whose
    kernels take longer than its host work still measures its host work; a call that waits for
    the GPU counts its wait.

    Parameters
    ----------
    dtype : torch.dtype, optional
        The layers' dtype.
    d : int, optional
        The layers' width.
    log : file-like, optional
        Where progress lines are printed; None prints nothing.

    Returns
    -------
    list of dict
        One row per comparison: ``dense_host_us``, ``explorer_host_us`` and their ratio.
    """
    import copy

    from explorer.gpu import SparseGatedMLP, SparseLinear, SparseQKV
    from explorer.gpu.cuda import decode as D
    from explorer.gpu.routes.timing import host_us

    say = (lambda msg: print(f"[host] {msg}", file=log, flush=True)) if log else (lambda m: 0)
    rows = []
    torch.manual_seed(0)
    lin = _pruned(nn.Linear(d, d, bias=False, dtype=dtype, device="cuda"))
    w = lin.weight.detach()
    packed = D.pack(w)
    with torch.no_grad():
        for tokens in (1, 16):
            x = torch.randn(tokens, d, dtype=dtype, device="cuda")
            call = D.DecodeCall(packed, None, tokens, dtype)
            rows.append(
                _row(
                    f"decode launch {d}x{d}",
                    dtype,
                    tokens,
                    host_us(lambda x=x: nn.functional.linear(x, w)),
                    host_us(lambda x=x, call=call: call(x)),
                )
            )
            rows.append(
                _row(
                    f"decode_matmul (checked API) {d}x{d}",
                    dtype,
                    tokens,
                    host_us(lambda x=x: nn.functional.linear(x, w)),
                    host_us(lambda x=x: D.decode_matmul(x, packed)),
                )
            )
        for tokens in (16, 4096):
            x = torch.randn(1, tokens, d, dtype=dtype, device="cuda")
            sl = SparseLinear.from_linear(lin)  # no dense copy: the sparse route's own cost
            sl(x)
            rows.append(
                _row(
                    f"eager SparseLinear {d}x{d}",
                    dtype,
                    tokens,
                    host_us(lambda x=x: lin(x)),
                    host_us(lambda x=x, sl=sl: sl(x)),
                )
            )
        x = torch.randn(16, 1, d, dtype=dtype, device="cuda")
        attn = _pruned(_Attention(d, d // 4, dtype))
        parts = SparseQKV.from_modules(attn.q_proj, attn.k_proj, attn.v_proj).parts()
        rows.append(
            _row(
                "eager q/k/v: three nn.Linear against one SparseQKV",
                dtype,
                16,
                host_us(lambda: attn(x)),
                host_us(lambda: tuple(p(x) for p in parts)),
            )
        )
        mlp = _pruned(_SwiGLU(d, int(d * 3.5), dtype))
        fused = SparseGatedMLP.from_modules(mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        rows.append(
            _row(
                "eager SwiGLU: gate, up, SiLU, multiply, down against SparseGatedMLP",
                dtype,
                16,
                host_us(lambda: mlp(x)),
                host_us(lambda: fused(x)),
            )
        )
        # the compiled op called by itself: what each sparse call adds under torch.compile
        sl = SparseLinear.from_linear(lin)
        x = torch.randn(16, d, dtype=dtype, device="cuda")
        sl(x)
        op = torch.ops.explorer.sparse_forward
        rows.append(
            _row(
                f"explorer::sparse_forward op against F.linear, {d}x{d}",
                dtype,
                16,
                host_us(lambda: nn.functional.linear(x, w)),
                host_us(lambda: op(x, sl.op_id)),
            )
        )
        rows += _compiled_operator_rows(lin, w, d, dtype)
        # one layer compiled in the default mode: the difference is the op against aten::mm
        x = torch.randn(16, d, dtype=dtype, device="cuda")
        times = []
        for model in (_Holder(copy.deepcopy(lin)), _Holder(SparseLinear.from_linear(lin))):
            torch._dynamo.reset()
            fn = torch.compile(model)
            for _ in range(3):
                fn(x)
            times.append(host_us(lambda fn=fn: fn(x)))
        torch._dynamo.reset()
        rows.append(_row(f"torch.compile default, one {d}x{d} layer", dtype, 16, *times))
    for r in rows:
        say(
            f"{r['label']} at {r['n']} tokens: dense {r['dense_host_us']:.1f} us, explorer "
            f"{r['explorer_host_us']:.1f} us"
        )
    return rows


def _compiled_operator_rows(lin: nn.Linear, w: torch.Tensor, d: int, dtype: torch.dtype) -> list:
    """``explorer::sparse_call`` (the compiled operator) against ``F.linear``, where it is loaded.

    At 16 tokens on cuSPARSELt (row-major layout) and at 1 token on the decode kernel, each
    after the one call that sets its program up; a row's label says when Python served it.
    """
    from explorer.gpu import SparseLinear
    from explorer.gpu.cuda import native
    from explorer.gpu.routes.timing import host_us

    if not native.load():
        return []
    rows = []
    op = torch.ops.explorer.sparse_call
    for tokens, options, what in (
        (16, {"layout": "cc"}, "cuSPARSELt"),
        (1, {"decode": True}, "decode kernel"),
    ):
        sl = SparseLinear.from_linear(lin, keep_dense=False, mode="compile", **options)
        x = torch.randn(tokens, d, dtype=dtype, device="cuda")
        op(x, sl.op_id)  # Python decides the route and sets the program up
        served = "C++" if native.counts(sl.op_id)["programs"] else "Python"
        rows.append(
            _row(
                f"explorer::sparse_call op ({what}, served by {served}) against F.linear, {d}x{d}",
                dtype,
                tokens,
                host_us(lambda x=x: nn.functional.linear(x, w)),
                host_us(lambda x=x, sl=sl: op(x, sl.op_id)),
            )
        )
    return rows
