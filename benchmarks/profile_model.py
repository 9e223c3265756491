"""Where a whole model's time goes, dense against sparsify(): host time per forward, GPU time
per forward, and the top GPU kernels and host operators (torch.profiler), side by side.

Run on a GPU: ``python benchmarks/profile_model.py --model llama-1b --dtype float16 --batch 4
--seq 1024``.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch.profiler import ProfilerActivity, profile

from explorer.bench.models import build_model, sparse_candidate
from explorer.gpu import sparsify


def profile_one(name, model, ids, steps=5):
    def fwd():
        with torch.no_grad():
            model(input_ids=ids)

    for _ in range(3):
        fwd()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fwd()
    host = (time.perf_counter() - t0) / steps * 1e3  # host issue time (async launches)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps * 1e3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fwd()
        torch.cuda.synchronize()
    events = prof.key_averages()
    gpu = sum(e.self_device_time_total for e in events) / steps / 1e3
    print(f"== {name}: wall {wall:.2f} ms/forward, host issue {host:.2f} ms, GPU busy {gpu:.2f} ms")
    print(events.table(sort_by="self_device_time_total", row_limit=12, max_name_column_width=60))
    print(events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama-1b")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--python", action="store_true", help="also cProfile the host side")
    a = p.parse_args()
    dtype = getattr(torch, a.dtype)
    dense = build_model(a.model, dtype)
    sparse = copy.deepcopy(dense)
    rep = sparsify(sparse, filter_fn=sparse_candidate, tokens=(a.batch * a.seq,))
    print(repr(rep))
    ids = torch.randint(0, 1000, (a.batch, a.seq), device="cuda")
    profile_one("dense", dense, ids)
    profile_one("sparsify()", sparse, ids)
    if a.python:
        import cProfile
        import pstats

        for name, model in (("dense", dense), ("sparsify()", sparse)):
            with torch.no_grad():
                model(input_ids=ids)
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(5):
                    model(input_ids=ids)
                prof.disable()
            print(f"== host profile, {name}, 5 forwards")
            pstats.Stats(prof).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    main()
