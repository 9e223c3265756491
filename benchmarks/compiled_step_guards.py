"""Why a compiled decode step of a sparsified model runs slower than dense when its graph is dense's.

In ``torch.compile``'s default mode a decode step is paced by the host, and a model whose
swapped layers all trace the dense matmul there compiles to the dense model's graph; what can
still differ is host time before the graph runs, above all Dynamo's guards (docs/gpu.md,
"Compiled decode steps"). For one benchmark model and each decode run this script prints:

* the graphs Dynamo makes of the dense and the sparsified model (graphs, graph breaks, calls of
  the explorer's op, calls in all);
* the guard checks each installs, and those of the *twin*: the dense model's structure holding
  the sparsified layers' own dense weight tensors (same memory, ``nn.Linear`` code);
* each of sparsified, twin and an A/A copy compiled beside dense alone and timed in turn
  (:func:`explorer.gpu.routes.timing.interleaved_runs`, a lead-in call per turn, medians of the
  rounds' paired ratios), then the same with guard evaluation skipped
  (``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``: a diagnostic, unsafe in use);
* Dynamo's cache lookup per step under the profiler, dense against sparsified.

``--decode`` sparsifies with ``decode=True`` (the decode kernel offered to every layer). Run on a
GPU::

    python benchmarks/compiled_step_guards.py --model phi3-mini --runs 16x1,1x1
"""

from __future__ import annotations

import argparse
import copy
import runpy
import statistics
from pathlib import Path

import torch
from torch import nn

from explorer.gpu.modules.sparse_linear import SparseLinear
from explorer.gpu.routes.timing import interleaved_runs, paired_ratio

_GUARDS = runpy.run_path(str(Path(__file__).with_name("compiled_guards_cpu.py")), run_name="guards")


def twin(dense: nn.Module, sparse: nn.Module) -> nn.Module:
    """A copy of ``dense`` whose layers hold the dense weight tensors of ``sparse``'s layers.

    Parameters
    ----------
    dense : torch.nn.Module
        The dense model.
    sparse : torch.nn.Module
        The same model after ``sparsify`` (or any swap to ``SparseLinear`` at the same names).

    Returns
    -------
    torch.nn.Module
        ``nn.Linear`` code on the sparsified layers' own tensors (not copies).
    """
    model = copy.deepcopy(dense)
    linears = dict(model.named_modules())
    for name, layer in sparse.named_modules():
        if isinstance(layer, SparseLinear) and layer.dense_kept:
            linear = linears[name]
            linear.weight = nn.Parameter(layer.dense_weight(), requires_grad=False)
            if layer.bias is not None:
                linear.bias = nn.Parameter(layer.bias, requires_grad=False)
    return model


def graph_summary(model: nn.Module, *args, **kwargs) -> tuple[int, int, int, int]:
    """``(graphs, graph breaks, calls of explorer::sparse_forward, calls)`` Dynamo makes of a call.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    *args, **kwargs
        Its inputs.

    Returns
    -------
    tuple of int
    """
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            found = torch._dynamo.explain(model)(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    calls = [
        str(node.target)
        for graph in found.graphs
        for node in graph.graph.nodes
        if node.op == "call_function"
    ]
    ops = sum("sparse_forward" in c for c in calls)
    return found.graph_count, found.graph_break_count, ops, len(calls)


def _beside_dense(dense, variant, ids, rounds: int, skip_guards: bool) -> tuple[float, float]:
    """Dense and ``variant`` compiled alone together, timed in turn: (dense ms, ratio)."""
    torch._dynamo.reset()
    pair = {"dense": torch.compile(dense), "variant": torch.compile(variant)}

    def step(model):
        def run():
            with torch.no_grad():
                return model(ids)

        return run

    calls = {k: step(m) for k, m in pair.items()}
    for call in calls.values():  # compiled before the stance: it refuses to compile
        for _ in range(3):
            call()
    with torch.compiler.set_stance("default", skip_guard_eval_unsafe=skip_guards):
        runs = interleaved_runs(calls, rounds=rounds, iters=5, lead_in=1)
    torch._dynamo.reset()
    return statistics.median(runs["dense"]), paired_ratio(runs["dense"], runs["variant"])


def cache_lookup_us(model: nn.Module, ids: torch.Tensor, steps: int = 40) -> float:
    """Dynamo's cache lookup per compiled step under the profiler (microseconds; inflated)."""
    from torch.profiler import ProfilerActivity, profile

    torch._dynamo.reset()
    compiled = torch.compile(model)
    with torch.no_grad():
        for _ in range(5):
            compiled(ids)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                compiled(ids)
            torch.cuda.synchronize()
    torch._dynamo.reset()
    total = sum(e.cpu_time_total for e in prof.key_averages() if "Cache Lookup" in e.key)
    return total / steps


def main(argv: list[str] | None = None) -> int:
    from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
    from explorer.gpu import sparsify

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="phi3-mini", choices=sorted(MODEL_SPECS))
    p.add_argument("--runs", default="16x1,1x1", help="batch x sequence runs to compile")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--decode", action="store_true", help="sparsify(decode=True) instead")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("no CUDA GPU here: sparsify and the timed steps need one. Hint: run on a GPU")
    runs = [tuple(int(v) for v in r.split("x")) for r in args.runs.split(",")]
    spec = MODEL_SPECS[args.model]
    counts = tuple(sorted({b * s for b, s in spec.runs}, reverse=True))
    dense = build_model(args.model, torch.bfloat16)
    sparse = copy.deepcopy(dense)
    with torch.no_grad():
        report = sparsify(sparse, filter_fn=sparse_candidate, tokens=counts, decode=args.decode)
    with_decode = ", decode=True" * args.decode
    print(f"{args.model}, sparsified for {counts} tokens{with_decode}: {report!r}")
    variants = {"sparsified": sparse, "twin": twin(dense, sparse), "A/A": copy.deepcopy(dense)}
    vocab = spec.config.get("vocab_size", 30522)
    for batch, seq in runs:
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
        print(f"\n{batch} x {seq}")
        for name, model in (("dense", dense), ("sparsified", sparse)):
            graphs, breaks, ops, calls = graph_summary(model, ids)
            print(f"  {name:10s} {graphs} graph(s), {breaks} breaks, {ops} op calls, {calls} calls")
        for name, model in (("dense", dense), *variants.items()):
            if name != "A/A":
                guards = _GUARDS["compiled_with_guards"](model, ids, backend="eager")[1]
                print(f"  {name:10s} {guards} guard checks")
        for skip in (False, True):
            label = "guards skipped" if skip else "guards checked"
            for name, model in variants.items():
                dense_ms, ratio = _beside_dense(dense, model, ids, args.rounds, skip)
                print(f"  {label}: {name:10s} {ratio:.3f}x of dense ({dense_ms:.3f} ms)")
        for name, model in (("dense", dense), ("sparsified", sparse)):
            print(f"  profiled cache lookup, {name}: {cache_lookup_us(model, ids):.0f} us a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
