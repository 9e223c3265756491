"""Whole models at decode sizes: bf16 dense, int4 dense and 2:4 + int4, side by side.

Three copies of one model of :data:`explorer.bench.models.MODEL_SPECS` (random weights, every
Linear but ``lm_head`` pruned 2:4): the bf16 model; "int4 dense", every pruned Linear an
:class:`~explorer.gpu.modules.int4_linear.Int4Linear` kept on torch's int4 weight-only kernel (the
baseline a user deploying int4 has); and ``sparsify(model, dtype="int4")``, which offers each
layer the 2:4 + int4 decode kernel. Each run is timed eagerly and with CUDA graphs
(``torch.compile(mode="reduce-overhead")``, the int4 models set to ``mode="graphs"``), the
three variants in turn for 11 rounds; speedups are medians of paired ratios. Run on a GPU::

    python benchmarks/int4_models.py --model llama-8b --runs 16x1,1x1 --json int4_models.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch
from torch import nn

from explorer.bench import environment
from explorer.bench.models import MODEL_SPECS, build_model
from explorer.gpu import set_mode, sparsify
from explorer.gpu.modules.int4_linear import Int4Linear
from explorer.gpu.routes.timing import interleaved_runs, paired_ratio


def _pruned(module: nn.Module, name: str) -> bool:
    return name.split(".")[-1] != "lm_head"


def int4_dense(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every pruned Linear on torch's int4 kernel (no decode route)."""
    model = copy.deepcopy(model)
    for name, mod in list(model.named_modules()):
        if isinstance(mod, nn.Linear) and type(mod) is nn.Linear and _pruned(mod, name):
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, Int4Linear.from_linear(mod, decode=False))
    return model


def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-8b", choices=sorted(MODEL_SPECS))
    p.add_argument("--runs", default="16x1,1x1")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    runs = [tuple(int(v) for v in r.split("x")) for r in args.runs.split(",")]
    counts = tuple(sorted({b * s for b, s in runs}, reverse=True))
    dense = build_model(args.model, torch.bfloat16)
    variants = {"bf16 dense": dense, "int4 dense": int4_dense(dense)}
    sparse = copy.deepcopy(dense)
    with torch.no_grad():
        report = sparsify(sparse, filter_fn=_pruned, dtype="int4", tokens=counts)
    print(repr(report))
    variants["2:4 int4"] = sparse
    vocab = MODEL_SPECS[args.model].config.get("vocab_size", 32000)
    rows = []
    for batch, seq in runs:
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
        row = {"model": args.model, "batch": batch, "seq": seq}
        with torch.no_grad():
            ref = variants["bf16 dense"](input_ids=ids).logits
            for key in ("int4 dense", "2:4 int4"):
                row[f"{key} relerr"] = _relerr(variants[key](input_ids=ids).logits, ref)
        for how in ("eager", "graphs"):
            torch._dynamo.reset()
            fns = {}
            for key, model in variants.items():
                if how == "graphs" and key != "bf16 dense":
                    set_mode(model, "graphs")
                run = torch.compile(model, mode="reduce-overhead") if how == "graphs" else model

                def call(run=run, ids=ids):
                    with torch.no_grad():
                        return run(input_ids=ids)

                for _ in range(3):  # compile, warm up, record the graph
                    call()
                fns[key] = call
            torch.cuda.synchronize()
            timed = interleaved_runs(fns, rounds=11, iters=5)
            for key, times in timed.items():
                row[f"{how} {key} ms"] = statistics.median(times)
            base, int4 = timed["bf16 dense"], timed["int4 dense"]
            row[f"{how} int4 dense over bf16"] = paired_ratio(base, int4)
            row[f"{how} 2:4 int4 over bf16"] = paired_ratio(base, timed["2:4 int4"])
            row[f"{how} 2:4 int4 over int4 dense"] = paired_ratio(int4, timed["2:4 int4"])
            for model in variants.values():
                set_mode(model, "auto")
        torch._dynamo.reset()
        print(
            f"{args.model} {batch}x{seq}: "
            + ", ".join(f"{k} {v:.3g}" for k, v in row.items() if isinstance(v, float))
        )
        rows.append(row)
    if args.json:
        args.json.write_text(json.dumps({"env": environment(), "rows": rows}, default=str))


if __name__ == "__main__":
    main()
