"""cProfile of ``model.generate`` at batch 1 (dynamic cache, eager), dense against ``sparsify()``.

Run on a GPU: ``python benchmarks/generate_profile.py --model llama-8b --new 32``.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import time

import torch

from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
from explorer.gpu import sparsify


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-8b")
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--decode", action="store_true")
    args = p.parse_args()
    dense = build_model(args.model, torch.bfloat16)
    sparse = copy.deepcopy(dense)
    with torch.no_grad():
        print(sparsify(sparse, filter_fn=sparse_candidate, tokens=(32, 1), decode=args.decode))
    vocab = MODEL_SPECS[args.model].config["vocab_size"]
    ids = torch.randint(1, vocab, (1, 32), device="cuda")
    kw = dict(
        max_new_tokens=args.new,
        min_new_tokens=args.new,
        do_sample=False,
        pad_token_id=0,
        attention_mask=torch.ones_like(ids),
    )
    with torch.no_grad():
        for name, model in (("dense", dense), ("sparse", sparse), ("dense", dense)):
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            print(f"== {name}: {(time.perf_counter() - t0) / args.new * 1e3:.3f} ms per token")
        for name, model in (("dense", dense), ("sparse", sparse)):
            prof = cProfile.Profile()
            prof.enable()
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            prof.disable()
            print(f"== profile {name}")
            stats = pstats.Stats(prof).sort_stats("tottime")
            stats.print_stats(14)
            if name == "sparse":
                stats.sort_stats("cumulative").print_stats("explorer", 14)


if __name__ == "__main__":
    main()
