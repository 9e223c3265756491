"""Time make_mask and check_pattern on a LLaMA-sized fp16 weight on the CPU, idle and contended.

Usage: python benchmarks/core_cpu.py [--rows 4096] [--cols 11008] [--repeats 15]
                                     [--rounds 3] [--busy torch|python|none] [--max-ratio 8]

Prints two markdown tables of medians (and the torch thread count: the CI machine has 2 cores).
The first times every operation as it is. The second is the contended case: the same
operations while another process keeps the cores busy (``--busy torch``: a torch matmul loop
on torch's default threads, like a second notebook kernel; ``--busy python``: one spinning
Python process), with the thread policy of ``explorer._threads`` and without it (torch's
default threads, as before the policy), and the contended / idle ratios. The four runs
alternate ``--rounds`` times so that other load on a shared machine falls on
all of them; each cell is the median over rounds of the median of ``--repeats`` calls. The
exit status is 1 when a contended / idle ratio with the policy exceeds ``--max-ratio``, so the
cliff of oversubscribed threads (20-60x) cannot come back unseen.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import subprocess
import sys
import time

import torch

import explorer
from explorer import _threads

BUSY = {
    "torch": "import torch\nx = torch.randn(2000, 2000)\nwhile True:\n    x @ x\n",
    "python": "while True:\n    pass\n",
}


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


@contextlib.contextmanager
def busy_process(kind: str):
    """Another process that keeps the CPU busy while the block runs."""
    if kind == "none":
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", BUSY[kind]])
    try:
        time.sleep(1.0)  # let it start and fill its threads
        yield
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def policy(enabled: bool):
    """With ``enabled=False``, torch's default threads whatever the load (no thread policy)."""
    if enabled:
        yield
        return
    saved = _threads.fair_thread_count
    _threads.fair_thread_count = torch.get_num_threads
    try:
        yield
    finally:
        _threads.fair_thread_count = saved


def contended(cases, args) -> int:
    modes = {
        "idle": (False, True),
        "contended": (True, True),
        "idle, no policy": (False, False),
        "contended, no policy": (True, False),
    }
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for mode, (loaded, enabled) in modes.items():
            with busy_process(args.busy if loaded else "none"), policy(enabled):
                for name, fn in cases:
                    times.setdefault((name, mode), []).append(median_ms(fn, args.repeats))
    print()
    print(
        f"Contended: another process busy ({args.busy}); median over {args.rounds} rounds of "
        f"the median of {args.repeats} calls"
    )
    print()
    print(
        "| operation | idle ms | contended ms | ratio | no policy: idle ms | contended ms | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, _ in cases:
        idle, busy, idle_before, busy_before = (statistics.median(times[(name, m)]) for m in modes)
        worst = max(worst, busy / idle)
        print(
            f"| {name} | {idle:.0f} | {busy:.0f} | {busy / idle:.1f}x | {idle_before:.0f} "
            f"| {busy_before:.0f} | {busy_before / idle_before:.1f}x |"
        )
    if worst > args.max_ratio:
        print(
            f"\ncontended / idle reached {worst:.1f}x, above --max-ratio {args.max_ratio:g}: "
            "threads wait on busy cores again (see explorer/_threads.py)",
            file=sys.stderr,
        )
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=11008)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", choices=("torch", "python", "none"), default="torch")
    parser.add_argument("--max-ratio", type=float, default=8.0)
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
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{_threads.available_cores()} cores; median of {args.repeats}"
    )
    print()
    print("| operation | median ms |")
    print("|---|---|")
    for name, fn in cases:
        print(f"| {name} | {median_ms(fn, args.repeats):.1f} |")
    if args.busy == "none":
        return 0
    return contended([cases[0], cases[3]], args)


if __name__ == "__main__":
    sys.exit(main())
