"""What a ``SparseLinear`` on its traced dense route adds to a compiled call, on a CPU.

A model compiled in ``torch.compile``'s default mode runs decode sizes as traced dense matmuls
(:meth:`explorer.gpu.routes.dispatch.Decision.compiled_dense`), so its graph is the dense
model's; what a ``SparseLinear`` can add is host time: Dynamo's guards on the attributes it
reads while tracing (its decisions, its mode's state), checked on every call. This script
compiles a stack of ``nn.Linear`` layers and the same stack as ``SparseLinear`` layers told to
trace dense at the timed token count, and prints for each the number of guard checks Dynamo
installed and the median time of a compiled call, side by side. No GPU is needed: on that
route the compressed operand is never read, so a placeholder stands in for it. Run::

    python benchmarks/compiled_guards_cpu.py --layers 16 --width 64

``--device cuda`` runs the same stacks in bf16 on a GPU, where a call of such tiny layers is
host time alone: what the compiled model's host pays there, on the host that runs it::

    python benchmarks/compiled_guards_cpu.py --device cuda --rounds 7
"""

from __future__ import annotations

import argparse
import io
import logging
import statistics
import time

import torch
from torch import nn

from explorer.gpu.modules.sparse_linear import SparseLinear
from explorer.gpu.routes.dispatch import DENSE, Decision, Route

#: Guard kinds as Dynamo's guard log names them; one per installed check.
GUARD_KINDS = ("MATCH", "CHECK", "GUARD", "DICT_CONTAINS")


def traced_dense_stack(dense: nn.Sequential, tokens: int) -> nn.Sequential:
    """``dense``'s layers as ``SparseLinear`` layers whose decision at ``tokens`` is dense."""
    layers = []
    for linear in dense:
        layer = SparseLinear(
            linear.in_features,
            linear.out_features,
            torch.zeros(8, dtype=torch.uint8, device=linear.weight.device),  # never read there
            None if linear.bias is None else linear.bias.detach().clone(),
            linear.weight.dtype,
            dense_weight=linear.weight.detach().clone(),
        )
        dense_wins = Decision({DENSE: 0.010, Route("sparse", "cc"): 0.020}, {})
        layer.decisions_made.remember(tokens, dense_wins, op_ms=0.03, dense=True)
        layers.append(layer)
    return nn.Sequential(*layers)


def compiled_with_guards(
    model: nn.Module, x: torch.Tensor, backend: str = "inductor"
) -> tuple[nn.Module, int]:
    """``model`` compiled and called once on ``x``, and the guard checks Dynamo installed.

    Parameters
    ----------
    model : torch.nn.Module
        The model to compile (Dynamo's caches are reset first).
    x : torch.Tensor
        Its input.
    backend : str, default "inductor"
        ``torch.compile``'s backend; ``"eager"`` installs the same guards without generating code.

    Returns
    -------
    tuple
        The compiled model and its number of guard checks.
    """
    torch._dynamo.reset()
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger("torch._dynamo").addHandler(handler)
    torch._logging.set_logs(guards=True)
    try:
        compiled = torch.compile(model, backend=backend)
        with torch.no_grad():
            compiled(x)
    finally:
        torch._logging.set_logs()
        logging.getLogger("torch._dynamo").removeHandler(handler)
    guards = sum(
        1
        for line in log.getvalue().splitlines()
        if "+- " in line and any(k in line for k in GUARD_KINDS)
    )
    return compiled, guards


def guards_and_call_us(model: nn.Module, x: torch.Tensor, calls: int) -> tuple[int, float]:
    """Guard checks Dynamo installs for ``model`` compiled, and its median call (microseconds)."""
    compiled, guards = compiled_with_guards(model, x)
    times = []
    with torch.no_grad():
        for _ in range(50):
            compiled(x)
        if x.is_cuda:
            torch.cuda.synchronize()  # from here on a call's time is its host time
        for _ in range(calls):
            start = time.perf_counter()
            compiled(x)
            times.append((time.perf_counter() - start) * 1e6)
    return guards, statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--tokens", type=int, default=1)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3, help="each model compiled and timed per round")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU here. Hint: run on a GPU machine, or drop --device")
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    dense = nn.Sequential(*[nn.Linear(args.width, args.width) for _ in range(args.layers)])
    dense = dense.to(args.device, dtype)
    models = {
        "nn.Linear": dense,
        "SparseLinear, traced dense": traced_dense_stack(dense, args.tokens),
    }
    x = torch.randn(args.tokens, args.width, device=args.device, dtype=dtype)
    found: dict[str, list[tuple[int, float]]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            found[name].append(guards_and_call_us(model, x, args.calls))
    base = statistics.median(us for _, us in found["nn.Linear"])
    where = "CPU" if args.device == "cpu" else torch.cuda.get_device_name()
    print(
        f"{args.layers} layers of {args.width}x{args.width}, {args.tokens} tokens, "
        f"{str(dtype).removeprefix('torch.')}, {where}:"
    )
    for name, runs in found.items():
        us = statistics.median(u for _, u in runs)
        extra = (us - base) / args.layers
        print(
            f"  {name:<28} {runs[0][0]:5d} guard checks, {us:8.1f} us a call ({extra:+.2f} us a layer)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
