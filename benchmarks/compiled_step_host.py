"""Where a compiled step spends its host time: dense, an unchanged copy (A/A) and ``sparsify()``.

The models benchmark reads the Phi-3-mini-like decode steps 3-5% below dense under
``torch.compile`` (both modes) while every layer runs its dense route there and the GPU time per
step is the same, so the difference is on the host side of a step. This script compiles the same
variants side by side in one process, as the benchmark does, and measures for each, in turn over
rounds (the benchmark's order rule, :func:`explorer.gpu.routes.timing.round_order`):

* ``step ms``: CUDA events around ``--iters`` back-to-back steps, per step (the benchmark's number);
* ``host us``: how long the Python call takes to return, with the GPU idle before it
  (synchronised): Dynamo's guards, the CUDA-graph tree's bookkeeping and the launches;
* under the profiler, per step: the CPU time of Dynamo's cache lookup (guard evaluation) and the
  CPU events that take the most time.

Each mode is compiled in its own round of ``torch._dynamo.reset()``: ``default``
(``torch.compile(model)``) and ``reduce-overhead`` (CUDA graphs, the sparse model set to
``mode="graphs"`` as the docs ask). ``--skip-guard-eval`` times the compiled variants under
``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``, which evaluates only the guards that
tell the cache entries apart: if the gap closes there, guards are its cause (on a CPU the dense
Phi-3-like model's lookup went from 349 to 68 us a call that way). Run on a GPU::

    python benchmarks/compiled_step_host.py --model phi3-mini --runs 16x1,1x1 --json host.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from explorer.bench import environment
from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
from explorer.gpu import set_mode, sparsify
from explorer.gpu.routes.timing import eager_ms, paired_ratio, round_order

#: The profiler's name for Dynamo's cache lookup (guard evaluation) before a compiled frame runs.
CACHE_LOOKUP = "TorchDynamo Cache Lookup"


def host_us(call, calls: int = 20) -> float:
    """Median microseconds ``call()`` takes to return, the GPU idle before each call."""
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def profiled(call, steps: int = 10, top: int = 6) -> dict:
    """CPU microseconds per step of Dynamo's cache lookup, and of the costliest CPU events."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            call()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        totals[event.key] += event.self_cpu_time_total / steps
    lookup = sum(us for name, us in totals.items() if CACHE_LOOKUP in name)
    costly = sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    return {"cache_lookup_us": lookup, "top_cpu_us": {name: round(us, 1) for name, us in costly}}


def measure(fns: dict, rounds: int, iters: int) -> dict[str, dict]:
    """Every variant's step times, host times and profile, the variants in turn each round."""
    names = list(fns)
    steps: dict[str, list[float]] = {n: [] for n in names}
    hosts: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in round_order(names, r):
            steps[name].append(eager_ms(fns[name], iters=iters, reps=1, warmup=0))
            hosts[name].append(host_us(fns[name], calls=5))
    out = {}
    for name in names:
        out[name] = {
            "step_ms": statistics.median(steps[name]),
            "host_us": statistics.median(hosts[name]),
            "steps": steps[name],
            **profiled(fns[name]),
        }
    base = steps[names[0]]
    for name in names[1:]:
        out[name]["over_dense"] = paired_ratio(base, steps[name])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="phi3-mini", choices=sorted(MODEL_SPECS))
    p.add_argument("--runs", default="16x1,1x1", help="batch x seq, comma-separated")
    p.add_argument("--modes", default="default,reduce-overhead", help="torch.compile modes")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--iters", type=int, default=3, help="back-to-back steps per timing")
    p.add_argument("--decode", action="store_true", help="also sparsify(decode=True)")
    p.add_argument(
        "--skip-guard-eval",
        action="store_true",
        help="time under torch.compiler.set_stance(skip_guard_eval_unsafe=True)",
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("compiled_step_host.py: no CUDA GPU visible; nothing to time.", file=sys.stderr)
        return 2
    runs = [tuple(int(v) for v in r.split("x")) for r in args.runs.split(",")]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    counts = tuple(sorted({b * s for b, s in runs}, reverse=True))
    dense = build_model(args.model, torch.bfloat16)
    variants = {"dense": dense, "dense copy (A/A)": copy.deepcopy(dense)}
    sparse = copy.deepcopy(dense)
    with torch.no_grad():
        print(repr(sparsify(sparse, filter_fn=sparse_candidate, tokens=counts)))
    variants["sparsify()"] = sparse
    if args.decode:
        with_decode = copy.deepcopy(dense)
        with torch.no_grad():
            sparsify(with_decode, filter_fn=sparse_candidate, tokens=counts, decode=True)
        variants["decode=True"] = with_decode
    vocab = MODEL_SPECS[args.model].config.get("vocab_size", 32000)
    rows = []
    for batch, seq in runs:
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
        for mode in modes:
            torch._dynamo.reset()
            graphs = mode == "reduce-overhead"
            fns = {}
            for name, model in variants.items():
                if graphs and name not in ("dense", "dense copy (A/A)"):
                    set_mode(model, "graphs")
                compiled = torch.compile(model, mode=None if mode == "default" else mode)

                def call(compiled=compiled):
                    with torch.no_grad():
                        return compiled(input_ids=ids)  # noqa: B023 (ids of this run)

                for _ in range(3):  # compile, warm up, record the graph
                    call()
                fns[name] = call
            stance = torch.compiler.set_stance(skip_guard_eval_unsafe=args.skip_guard_eval)
            with stance:  # the default stance unless --skip-guard-eval
                found = measure(fns, args.rounds, args.iters)
            for model in variants.values():
                set_mode(model, "auto")
            skipped = ", guards skipped" * args.skip_guard_eval
            print(f"\n{args.model} {batch}x{seq}, compile mode {mode}{skipped}:")
            for name, m in found.items():
                ratio = f"{m['over_dense']:.3f}x" if "over_dense" in m else "base"
                print(
                    f"  {name:<18} step {m['step_ms']:.4f} ms ({ratio}), "
                    f"host {m['host_us']:.1f} us,"
                    f" cache lookup {m['cache_lookup_us']:.1f} us"
                )
                for event, us in m["top_cpu_us"].items():
                    print(f"      {us:9.1f} us  {event[:90]}")
            rows.append({"model": args.model, "batch": batch, "seq": seq, "mode": mode,
                         "skip_guard_eval": args.skip_guard_eval, **found})  # fmt: skip
    torch._dynamo.reset()
    if args.json:
        args.json.write_text(json.dumps({"env": environment(), "rows": rows}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
