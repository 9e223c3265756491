"""Is a deep copy of a model slower to run eagerly than the model itself? A control for
benchmarks that compare a model with a sparsified deep copy of it.

Run on a GPU: ``python benchmarks/copy_control.py --model qwen2-1.5b --runs 16x1,1x1``.
"""

from __future__ import annotations

import argparse
import copy

import torch

from explorer.bench.models import MODEL_SPECS, build_model
from explorer.gpu.routes.timing import interleaved_ms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2-1.5b")
    p.add_argument("--runs", default="16x1,1x1")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    dense = build_model(args.model, torch.bfloat16)
    twin = copy.deepcopy(dense)
    vocab = MODEL_SPECS[args.model].config["vocab_size"]
    with torch.no_grad():
        for run in args.runs.split(","):
            b, s = (int(v) for v in run.split("x"))
            ids = torch.randint(0, vocab, (b, s), device="cuda")
            for i in range(args.repeat):
                ms = interleaved_ms(
                    {
                        "model": lambda ids=ids: dense(input_ids=ids),
                        "deep copy": lambda ids=ids: twin(input_ids=ids),
                    }
                )
                print(
                    f"{args.model} {run} #{i}: model {ms['model']:.3f} ms, deep copy "
                    f"{ms['deep copy']:.3f} ms, model/copy {ms['model'] / ms['deep copy']:.3f}"
                )


if __name__ == "__main__":
    main()
