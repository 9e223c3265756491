"""Where a decode step's GPU time goes, dense against ``sparsify(decode=True)``, kernel by kernel.

A layer's route is chosen from its own timing; this script checks that choice inside the whole
model. For one model of :data:`explorer.bench.models.MODEL_SPECS` it captures one forward at
``batch x 1`` tokens in a CUDA graph, for the dense model and for the model after
``sparsify(decode=True)`` set to ``mode="graphs"`` (and, with ``--also-plain``, after
``sparsify()`` alone; with ``--compiled`` each is compiled with
``mode="reduce-overhead"`` instead of captured by hand), times the replays side by side (CUDA events, medians of interleaved
rounds), then profiles a few replays of each and prints the GPU time per kernel name: a kernel
slower in the model than in its layer's own timing, or a kernel the dense model does not run,
shows here. Run on a GPU::

    python benchmarks/decode_in_context.py --model phi3-mini --batch 1 --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from explorer.bench import environment
from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
from explorer.dtypes import parse_dtype
from explorer.gpu.routes.timing import interleaved_runs, paired_ratio


def captured(model, ids):
    """A CUDA graph of ``model(input_ids=ids)`` (no cache), after warm-up on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(input_ids=ids, use_cache=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        model(input_ids=ids, use_cache=False)
    return graph


class Compiled:
    """``torch.compile(model, mode="reduce-overhead")`` at ``ids``, warmed, called as a replay."""

    def __init__(self, model, ids, use_cache: bool = False):
        self.fn, self.ids = torch.compile(model, mode="reduce-overhead"), ids
        self.use_cache = use_cache
        for _ in range(4):
            self.replay()
        torch.cuda.synchronize()

    def replay(self):
        with torch.no_grad():
            return self.fn(input_ids=self.ids, use_cache=self.use_cache)


def host_us(graph, iters: int = 20) -> float:
    """Host microseconds per replay call of ``graph`` (the GPU's queue absorbs the work)."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(iters):
        graph.replay()
    spent = time.perf_counter() - began
    torch.cuda.synchronize()
    return spent / iters * 1e6


def kernels(graph, replays: int = 5) -> dict[str, float]:
    """GPU microseconds per replay of each kernel name in ``graph``, from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for evt in prof.key_averages():
        us = getattr(evt, "self_device_time_total", 0) or getattr(evt, "self_cuda_time_total", 0)
        if us > 0:
            out[evt.key] = out.get(evt.key, 0.0) + us / replays
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="phi3-mini", choices=sorted(MODEL_SPECS))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--also-plain", action="store_true", help="also time sparsify() alone")
    p.add_argument(
        "--compiled", action="store_true", help='torch.compile(mode="reduce-overhead") instead'
    )
    p.add_argument(
        "--use-cache", action="store_true", help="compiled calls build a KV cache, as by default"
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    from explorer.gpu import set_mode, sparsify

    dtype = parse_dtype(args.dtype)
    dense = build_model(args.model, dtype)
    variants = {"dense": dense}
    kinds = {"decode": True, **({"plain": False} if args.also_plain else {})}
    for name, decode in kinds.items():
        model = copy.deepcopy(dense)
        with torch.no_grad():
            rep = sparsify(
                model, filter_fn=sparse_candidate, tokens=(4096, 16, args.batch), decode=decode
            )
        set_mode(model, "graphs")
        print(f"[{name}] {rep!r}", file=sys.stderr)
        print(rep.timing_table(), file=sys.stderr)
        variants[name] = model
    vocab = MODEL_SPECS[args.model].config.get("vocab_size", 30522)
    ids = torch.randint(0, vocab, (args.batch, 1), device="cuda")
    if args.compiled:
        graphs = {name: Compiled(m, ids, args.use_cache) for name, m in variants.items()}
    else:
        graphs = {name: captured(model, ids) for name, model in variants.items()}
    # side by side: every variant in turn each round, 20 replays between CUDA events
    fns = {name: graph.replay for name, graph in graphs.items()}
    times = interleaved_runs(fns, rounds=args.rounds, iters=20, warmup=1)
    result = {"env": environment(), "model": args.model, "batch": args.batch, "rows": {}}
    for name, t in times.items():
        row = result["rows"][name] = {
            "ms": statistics.median(t),
            "speedup": paired_ratio(times["dense"], t),
            "host_us": statistics.median(host_us(graphs[name]) for _ in range(5)),
            "kernels_us": kernels(graphs[name]),
        }
        print(
            f"{name}: {row['ms']:.4f} ms, {row['speedup']:.3f}x, "
            f"host {row['host_us']:.1f} us a call"
        )
    for name, row in result["rows"].items():
        print(f"== {name}: GPU us per replay by kernel (top 12)")
        top = sorted(row["kernels_us"].items(), key=lambda kv: -kv[1])[:12]
        for key, us in top:
            print(f"  {us:9.1f}  {key[:110]}")
        print(f"  {sum(row['kernels_us'].values()):9.1f}  (all kernels)")
    if args.json:
        args.json.write_text(json.dumps(result, default=str, indent=1))


if __name__ == "__main__":
    main()
