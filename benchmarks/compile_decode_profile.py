"""Why a model compiled in ``torch.compile``'s default mode decodes slower after ``sparsify()``.

Compiles the dense model and its sparsified copy side by side (both kept compiled), times them
interleaved at decode sizes (medians of paired ratios), and for one forward of each reports what
the compiler produced: graphs, graph breaks, recompiles, kernel launches, the host time of the
whole forward and the ops that take it. Run on a GPU::

    python benchmarks/compile_decode_profile.py --model llama-8b --runs 16x1,1x1
    python benchmarks/compile_decode_profile.py --model phi3-mini --decode

``--decode`` sparsifies with ``decode=True`` (the decode kernel kept beside the dense weight).
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch

from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
from explorer.dtypes import parse_dtype
from explorer.gpu import sparsify
from explorer.gpu.routes.timing import interleaved_runs, paired_ratio


def _profile(fn, label: str, top: int = 8) -> None:
    """One profiled call of ``fn``: host time, kernel launches and the costliest host ops."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = prof.key_averages()
    launches = sum(e.count for e in events if "LaunchKernel" in e.key or "cuLaunch" in e.key)
    kernels = sum(e.count for e in events if e.device_type.name == "CUDA")
    print(f"  {label}: {launches} kernel launches, {kernels} GPU kernels")
    by_cpu = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    for e in by_cpu:
        print(f"    {e.key[:70]:70s} calls {e.count:5d} self cpu {e.self_cpu_time_total:9.0f} us")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-8b", choices=sorted(MODEL_SPECS))
    p.add_argument("--runs", default="16x1,1x1")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--decode", action="store_true", help="sparsify with decode=True")
    args = p.parse_args()
    dtype = parse_dtype(args.dtype)
    runs = [tuple(int(v) for v in r.split("x")) for r in args.runs.split(",")]
    spec = MODEL_SPECS[args.model]
    dense = build_model(args.model, dtype)
    sparse = copy.deepcopy(dense)
    with torch.no_grad():
        tokens = tuple(sorted({b * s for b, s in runs}))
        report = sparsify(sparse, filter_fn=sparse_candidate, tokens=tokens, decode=args.decode)
    print(repr(report))
    kinds = {}
    for name, mod in sparse.named_modules():
        if hasattr(mod, "traces_dense"):
            kinds.setdefault(type(mod).__name__, []).append(name)
    for kind, names in kinds.items():
        print(f"{kind}: {len(names)} modules")
    from torch._dynamo.utils import counters

    compiled = {}
    for label, model in (("dense", dense), ("sparse", sparse)):
        counters.clear()
        compiled[label] = torch.compile(model)
        compiled[label + " eager"] = model
    for batch, seq in runs:
        vocab = spec.config.get("vocab_size", 32000)
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
        n = batch * seq
        for name, mod in sparse.named_modules():
            if type(mod).__name__ == "SparseLinear":
                traced = mod.traces_dense(n)
                if not traced:
                    print(f"  {name}: not traced dense at {n} tokens")

        def call(model, ids=ids):
            def f():
                with torch.no_grad():
                    return model(input_ids=ids)

            return f

        fns = {k: call(m) for k, m in compiled.items()}
        for label in ("dense", "sparse"):
            counters.clear()
            for _ in range(3):
                fns[label]()
            torch.cuda.synchronize()
            stats = {k: dict(v) for k, v in counters.items() if v}
            print(f"{batch}x{seq} {label} compile counters: {stats}")
        times = interleaved_runs(fns, rounds=11, iters=5)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{batch}x{seq}: "
            + ", ".join(f"{k} {v:.3f} ms" for k, v in med.items())
            + f" | compiled sparse/dense {paired_ratio(times['dense'], times['sparse']):.2f}x"
            + f" | eager {paired_ratio(times['dense eager'], times['sparse eager']):.2f}x"
        )
        for label in ("dense", "sparse"):
            _profile(fns[label], f"{batch}x{seq} compiled {label}")


if __name__ == "__main__":
    main()
