"""Where an eager forward's time goes, dense and after ``sparsify()``, side by side.

For each model, after five untimed forwards:

* the forward's time, both models timed in turn over ``--rounds`` rounds of ``--calls``
  back-to-back forwards (CUDA events, the median of the rounds' paired ratios), before any
  profiler runs;
* the GPU's own time per forward: the summed duration of its kernels under ``torch.profiler``,
  and how many there are (if the two models' kernel times agree and their forwards do not, the
  difference is host time);
* a cProfile of the same forwards, sorted by each function's own time, taken for both models
  before any ``torch.profiler`` session (a CUDA profiler session can leave the process's later
  launches slower; both models are timed in turn again at the end to show by how much).

Run on a GPU: ``python benchmarks/eager_profile.py --model phi3-mini --batch 16 --seq 1``;
``--decode`` sparsifies with ``decode=True`` (the decode kernel offered to every layer).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import statistics

import torch

from explorer.bench.kernel_profile import kernel_times
from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
from explorer.dtypes import parse_dtype
from explorer.gpu import sparsify
from explorer.gpu.routes.timing import interleaved_runs, paired_ratio


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="phi3-mini", choices=sorted(MODEL_SPECS))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--tokens", default="", help="token counts to sparsify for, e.g. 4096,16")
    p.add_argument("--tune", action="store_true", help="search untuned shapes (sparsify's default)")
    p.add_argument("--decode", action="store_true", help="sparsify(decode=True)")
    p.add_argument("--dtype", default="bfloat16", help="the model's dtype: bfloat16 or float16")
    args = p.parse_args()
    if not torch.cuda.is_available():
        p.error("no CUDA GPU here: sparsify and the timed forwards need one. Hint: run on a GPU")
    dense = build_model(args.model, parse_dtype(args.dtype))
    sparse = copy.deepcopy(dense)
    tokens = (
        tuple(int(t) for t in args.tokens.split(",")) if args.tokens else (args.batch * args.seq,)
    )
    with torch.no_grad():
        rep = sparsify(
            sparse, filter_fn=sparse_candidate, tokens=tokens, tune=args.tune, decode=args.decode
        )
    print(rep)
    print("\n".join(rep.notes))
    vocab = MODEL_SPECS[args.model].config.get("vocab_size", 30522)
    ids = torch.randint(0, vocab, (args.batch, args.seq), device="cuda")
    calls = {"dense": forward(dense, ids), "sparse": forward(sparse, ids)}
    with torch.no_grad():
        runs = interleaved_runs(calls, rounds=args.rounds, iters=args.calls, lead_in=1)
    print(
        f"== timed in turn ({args.rounds} rounds of {args.calls} forwards, before any profiling):"
        f" dense {statistics.median(runs['dense']):.3f} ms, sparse "
        f"{statistics.median(runs['sparse']):.3f} ms a forward, "
        f"{paired_ratio(runs['dense'], runs['sparse']):.3f}x of dense"
    )
    with torch.no_grad():
        # every cProfile before any torch.profiler session: one may leave later launches slower
        for name, call in calls.items():
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                call()
            torch.cuda.synchronize()
            prof.disable()
            print(f"== {name}: cProfile of {args.calls} forwards")
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        for name, call in calls.items():
            k = kernel_times(call, args.calls)
            print(
                f"== {name}: GPU kernels {k.total_ms:.3f} ms in {k.launches:.0f} kernels a forward"
            )
        after = interleaved_runs(calls, rounds=args.rounds, iters=args.calls, lead_in=1)
    print(
        "== timed in turn again, after the profiler sessions: dense "
        f"{statistics.median(after['dense']):.3f} ms, sparse "
        f"{statistics.median(after['sparse']):.3f} ms a forward"
    )


def forward(model, ids: torch.Tensor):
    """``model(input_ids=ids)`` as a call without arguments."""

    def call():
        return model(input_ids=ids)

    return call


if __name__ == "__main__":
    main()
