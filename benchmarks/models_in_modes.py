"""Whole models dense against ``sparsify()`` in every execution mode, for chosen runs.

``sparsity-explorer bench --suites models`` times each model at all of its runs; this script
times the runs named on the command line (batch x sequence), so one GPU session can cover
several architectures. Run on a GPU::

    python benchmarks/models_in_modes.py --models qwen2-1.5b,llama-8b --runs 4x1024,16x1,1x1 \\
        --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from explorer.bench import environment
from explorer.bench.models import bench_whole_model
from explorer.dtypes import parse_dtype
from explorer.results.markdown.models import format_models


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="qwen2-1.5b,llama-8b")
    p.add_argument("--runs", default="4x1024,1x4096,16x1,1x1")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    runs = tuple(tuple(int(v) for v in r.split("x")) for r in args.runs.split(","))
    dtype = parse_dtype(args.dtype)
    rows: list[dict] = []
    env = environment()
    # named by a page made from these rows (``bench --from-json``)
    command = " ".join(["python benchmarks/models_in_modes.py", *sys.argv[1:]])

    def keep(row: dict | None = None) -> None:
        """Write every row reached so far: a run stopped by a time limit keeps its rows."""
        if row is not None:
            rows.append(row)
        if args.json:
            kept = {"env": env, "command": command, "rows": rows}
            args.json.write_text(json.dumps(kept, default=str))

    for name in args.models.split(","):
        # the rows it returns are the ones passed to keep, completed after their last run
        bench_whole_model(name, dtype, runs=runs, log=sys.stderr, on_row=keep)
        torch.cuda.empty_cache()
        keep()
    print(format_models(rows))


if __name__ == "__main__":
    main()
