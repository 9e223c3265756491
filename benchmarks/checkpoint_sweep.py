"""A sweep of a local checkpoint on a GPU, its measured speeds checked against the benchmark's.

Writes a random LLaMA-like ``save_pretrained`` folder (8 layers, hidden 2048, MLP 8192, 32
heads, 8 KV heads; the word-level tokenizer of :mod:`explorer.models.tiny`) and a text file,
sweeps it by path over magnitude, wanda and sparsegpt at 2:4 (accuracy rows and ``model-speed``
rows of each pruned model), then, in the same process, times the same architecture with
``bench --suite models``'s harness (:func:`explorer.bench.models.bench_whole_model`: random
weights masked 2:4) at the shapes the sweep timed. The agreement is checked against the
benchmark's ``model_speed_<mode>`` column: the same whole-model timing the sweep calls, in the
same mode, on the benchmark's random-weight model. The benchmark's own column for the nearest
mode (``torch.compile`` with CUDA graphs for ``graphs``, which also fuses the non-matmul work)
is printed beside it. Prints the report's table and writes the HTML report. Run on a GPU::

    python benchmarks/checkpoint_sweep.py --out /tmp/ckpt --tokens 4096,16 --mode graphs

``--quantize int4`` (or ``int8``) adds the sweep's jointly quantized SparseGPT cells, which the
sweep times at their precision (bf16 dense, dense at the precision, 2:4 at it:
:func:`explorer.bench.quantized_model_speed.measure_quantized_speed`), and prints their points as
the trade-off plot draws them; ``--skip-bench`` leaves out the benchmark's side::

    python benchmarks/checkpoint_sweep.py --out /tmp/ck4 --tokens 16,1 --methods sparsegpt \
        --quantize int4 --group-size 64 --skip-bench --layers 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from explorer.bench.models import MODEL_SPECS, ModelSpec, bench_whole_model
from explorer.models.tiny import sample_text, save_tiny_llama
from explorer.results.html import write_report
from explorer.results.model_speed import measured_speed
from explorer.results.quantized_points import quantized_points
from explorer.results.store import ResultStore
from explorer.sweeps import sweep

SIZES = dict(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=8,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=4096,
)
SEQ_LEN = 256  # from_pretrained's window: the sweep's example input is [batch, 256] token ids
BENCH_KEY = {"graphs": "speedup_compiled", "compile": "speedup_default", "eager": "speedup"}


def bench_shape(tokens: int) -> tuple[int, int]:
    """The (batch, sequence) a sweep times at ``tokens``: whole windows, or one short row."""
    if tokens <= SEQ_LEN:
        return 1, tokens
    return -(-tokens // SEQ_LEN), SEQ_LEN


def print_quantized(rows) -> None:
    """The quantized points of the sweep, as the trade-off plot draws them, and their times."""
    lines = ["| point | score | tokens, mode | over bf16 dense | over same precision dense |"]
    lines.append("|---|---|---|---|---|")
    for point in quantized_points(rows):
        if point.speedup is None:
            lines.append(f"| {point.label} | {point.score:.4g} | {point.details.get('why')} | | |")
            continue
        lines.append(
            f"| {point.label} | {point.score:.4g} | {point.tokens}, {point.mode} | "
            f"{point.speedup:.3f}x | {point.speedup_same:.3f}x |"
        )
    print("\n".join(lines), flush=True)
    for row in rows.where(kind="bench-models"):
        c, m = row.config, row.metrics
        print(f"{c['label']} {c['precision']} {c['pattern']} {c['mode']}: {m}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="a new folder for every file")
    p.add_argument("--tokens", default="4096,16")
    p.add_argument("--mode", default="graphs", choices=sorted(BENCH_KEY))
    p.add_argument("--methods", default="magnitude,wanda,sparsegpt")
    p.add_argument("--calibration-samples", type=int, default=16)
    p.add_argument("--quantize", default="", help="joint formats of the SparseGPT cells: int4,int8")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--layers", type=int, default=SIZES["num_hidden_layers"], help="decoder layers")
    p.add_argument("--skip-bench", action="store_true", help="no benchmark run beside the sweep")
    args = p.parse_args()
    tokens = tuple(int(t) for t in args.tokens.split(","))
    args.out.mkdir(parents=True, exist_ok=False)
    began = time.perf_counter()
    if args.layers < 1:
        p.error(f"--layers {args.layers}: expected a positive number of layers")
    SIZES["num_hidden_layers"] = args.layers
    folder = save_tiny_llama(args.out / f"llama-{args.layers}x2048", **SIZES)
    corpus = args.out / "corpus.txt"
    corpus.write_text(sample_text(4000), encoding="utf-8")
    print(f"checkpoint written in {time.perf_counter() - began:.0f} s: {folder}", flush=True)
    db = args.out / "results.db"
    began = time.perf_counter()
    result = sweep(
        str(folder),
        methods=args.methods,
        patterns="2:4",
        dtypes="bfloat16",
        tokens=args.tokens,
        text=corpus,
        db=db,
        progress=False,
        calibration_samples=args.calibration_samples,
        speed_mode=args.mode,
        quantize=args.quantize or (),
        group_size=args.group_size,
    )
    print(f"sweep took {time.perf_counter() - began:.0f} s: {result!r}", flush=True)
    with ResultStore(db) as store:
        rows = store.query(sweep_id=result.sweep_id, include_reference=False)
    for row in rows.where(status="failed"):
        print(f"FAILED {row.kind} {row.config}: {row.error}", flush=True)

    if args.quantize:
        print_quantized(rows)
    if args.skip_bench:
        report = write_report(db, args.out / "report.html", include_reference=False)
        print(f"report: {report}", flush=True)
        return
    # The benchmark's harness on the same architecture, at the shapes the sweep timed.
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    runs = tuple(bench_shape(n) for n in tokens)
    MODEL_SPECS["checkpoint-arch"] = ModelSpec(
        "llama", dict(SIZES, vocab_size=vocab), runs, "the swept checkpoint's architecture"
    )
    bench_rows = bench_whole_model(
        "checkpoint-arch",
        torch.bfloat16,
        compiled=args.mode != "eager",
        torch_path=False,
        runs=runs,
        decode_kernel=False,
        model_speed_modes=(args.mode,),
    )
    bench = {r["n"]: r.get(f"model_speed_{args.mode}") for r in bench_rows}
    own = {r["n"]: r.get(BENCH_KEY[args.mode]) for r in bench_rows}
    print(f"bench rows: {json.dumps(bench_rows, default=str)}", flush=True)

    lines = [f"| method | metrics | {' | '.join(f'{n} tokens' for n in tokens)} |"]
    lines.append("|---" * (2 + len(tokens)) + "|")
    worst = 0.0
    for kind in ("dense", "prune"):
        for row in rows.where(kind=kind, status="ok"):
            cells = []
            for n in tokens:
                speed = measured_speed(rows, of_cell=row.cell_key, tokens=n, mode=args.mode)
                if speed is None or speed.tokens != n:
                    cells.append("not measured")  # the dense cell has no sparse model
                    continue
                ref = bench.get(n)
                gap = None if ref is None else abs(speed.speedup - ref)
                worst = max(worst, gap or 0.0)
                context = f", bench {BENCH_KEY[args.mode]} {own[n]:.3f}x" if own.get(n) else ""
                cells.append(
                    f"{speed.speedup:.3f}x (bench {ref:.3f}x, gap {gap:.3f}{context})"
                    if gap is not None
                    else f"{speed.speedup:.3f}x (no bench figure{context})"
                )
            metrics = ", ".join(
                f"{k} {v:.4g}"
                for k, v in sorted(row.metrics.items())
                if isinstance(v, float) and k in ("perplexity", "sparsity", "prune_seconds")
            )
            lines.append(
                f"| {row.config.get('method', 'dense')} | {metrics} | {' | '.join(cells)} |"
            )
    print("\n".join(lines), flush=True)
    print(f"largest gap between sweep and bench speedups: {worst:.3f}", flush=True)
    report = write_report(db, args.out / "report.html", include_reference=False)
    print(f"report: {report}", flush=True)


if __name__ == "__main__":
    main()
