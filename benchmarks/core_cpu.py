"""Time make_mask and check_pattern on a LLaMA-sized fp16 weight on the CPU.

Usage: python benchmarks/core_cpu.py [--rows 4096] [--cols 11008] [--repeats 15]
Prints a markdown table of medians (and the torch thread count: the CI machine has 2 cores).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

import explorer


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=11008)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    torch.manual_seed(0)
    weight = torch.randn(args.rows, args.cols).to(torch.float16)
    mask = explorer.make_mask(weight)
    pruned = weight * mask
    cases = [
        ("make_mask(w, '2:4')", lambda: explorer.make_mask(weight)),
        ("check_pattern(pruned w, '2:4')", lambda: explorer.check_pattern(pruned)),
        ("check_pattern(bool mask, '2:4')", lambda: explorer.check_pattern(mask)),
        ("check_pattern(dense w, '2:4')", lambda: explorer.check_pattern(weight)),
        (
            "naive per-group count (reference)",
            lambda: ((pruned != 0).view(-1, 4).sum(1) <= 2).all(),
        ),
    ]
    print(
        f"{args.rows} x {args.cols} float16 on {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.repeats}"
    )
    print()
    print("| operation | median ms |")
    print("|---|---|")
    for name, fn in cases:
        print(f"| {name} | {median_ms(fn, args.repeats):.1f} |")


if __name__ == "__main__":
    main()
