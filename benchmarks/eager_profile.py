"""cProfile of eager forwards of a whole model, dense and after ``sparsify()``, side by side.

Run on a GPU: ``python benchmarks/eager_profile.py --model phi3-mini --batch 16 --seq 1``.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats

import torch

from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
from explorer.gpu import sparsify


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="phi3-mini")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--tokens", default="", help="token counts to sparsify for, e.g. 4096,16")
    p.add_argument("--tune", action="store_true", help="search untuned shapes (sparsify's default)")
    args = p.parse_args()
    dense = build_model(args.model, torch.bfloat16)
    sparse = copy.deepcopy(dense)
    tokens = (
        tuple(int(t) for t in args.tokens.split(",")) if args.tokens else (args.batch * args.seq,)
    )
    with torch.no_grad():
        rep = sparsify(sparse, filter_fn=sparse_candidate, tokens=tokens, tune=args.tune)
    print(rep)
    print("\n".join(rep.notes))
    vocab = MODEL_SPECS[args.model].config["vocab_size"]
    ids = torch.randint(0, vocab, (args.batch, args.seq), device="cuda")
    with torch.no_grad():
        for name, model in (("dense", dense), ("sparse", sparse)):
            for _ in range(5):
                model(input_ids=ids)
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                model(input_ids=ids)
            torch.cuda.synchronize()
            prof.disable()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.calls):
                model(input_ids=ids)
            end.record()
            end.synchronize()
            print(f"== {name}: {start.elapsed_time(end) / args.calls:.3f} ms per forward")
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
