"""``generate()`` on a whole model: dense against ``sparsify()`` and ``decode=True``, chosen batches.

``sparsity-explorer bench --suites generate`` builds each model with its spec's few layers,
which keeps the suite short but lets the dense ``lm_head`` weigh more than it does in the real
model (60% of the LLaMA-3-8B-like spec's layer weights), so a decode gain reads smaller there.
This script builds the model with ``--layers`` layers (32: a whole LLaMA-3-8B-like model) and
times the batches named, each with a dynamic and a static cache, as the suite does
(:func:`explorer.bench.generate.bench_generate`); the rows name the model with its layers.
Run on a GPU::

    python benchmarks/generate_in_full.py --model llama-8b --layers 32 --batches 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from explorer.bench import environment
from explorer.bench.generate import bench_generate
from explorer.bench.models import MODEL_SPECS
from explorer.dtypes import parse_dtype
from explorer.results.markdown.serving import format_generate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-8b", choices=sorted(MODEL_SPECS))
    p.add_argument("--layers", type=int, help="transformer layers (default: the spec's)")
    p.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    p.add_argument("--new", type=int, default=128, help="tokens generated per sequence")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument(
        "--caches", default="dynamic,static", help="comma-separated: dynamic, static or both"
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.layers is not None and args.layers < 1:
        p.error(f"--layers {args.layers}: expected a positive number of layers")
    try:
        batches = tuple(int(b) for b in args.batches.split(","))
    except ValueError:
        p.error(f"--batches {args.batches!r}: expected comma-separated integers, e.g. 1,8")
    caches = {c for c in args.caches.split(",") if c}
    if not caches or caches - {"dynamic", "static"}:
        p.error(f"--caches {args.caches!r}: expected dynamic, static or dynamic,static")
    if not torch.cuda.is_available():
        p.error("no CUDA GPU here: sparsify and generate() need one. Hint: run on a GPU")
    env = environment()
    rows = bench_generate(
        args.model,
        parse_dtype(args.dtype),
        batches=batches,
        new_tokens=args.new,
        log=sys.stderr,
        layers=args.layers,
        dynamic="dynamic" in caches,
        static="static" in caches,
    )
    if args.json:
        words = sys.argv[1:] if argv is None else argv  # named by a page made from these rows
        command = " ".join(["python benchmarks/generate_in_full.py", *words])
        kept = {"env": env, "command": command, "rows": rows}
        args.json.write_text(json.dumps(kept, default=str))
    print(format_generate(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
