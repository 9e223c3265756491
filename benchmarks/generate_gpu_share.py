"""How much of a static-cache ``generate()`` step is GPU work, and how much of that is products.

A ``generate`` step's speedup is bounded by the part of its time that the sparse products can
shorten. This script builds the model (``--layers`` layers), sparsifies a copy with
``decode=True`` for the batch's decode and prefill token counts, sets it to ``mode="graphs"``
and times ``model.generate(cache_implementation="static")`` of dense and sparse in turn
(:func:`explorer.bench.generate.interleaved_generate`). Then, after all timing, it profiles one
``generate`` of each and splits each step's kernel time into matrix products (the projections
and ``lm_head``) and the rest, and times ``lm_head`` alone. From these:

* wall ms per step (timed), GPU kernel ms per step, and the part of the wall the GPU is busy;
* the bound on the speedup if every swapped projection took no time at all (an estimate: the
  step's wall time less the dense products' time, ``lm_head``'s kept).

Run on a GPU::

    python benchmarks/generate_gpu_share.py --model llama-8b --layers 32 --batch 8
"""

from __future__ import annotations

import argparse
import copy

import torch

from explorer.bench.generate import generate_kwargs, interleaved_generate
from explorer.bench.kernel_profile import kernel_times
from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
from explorer.dtypes import parse_dtype
from explorer.gpu import set_mode, sparsify
from explorer.gpu.routes.timing import eager_ms, paired_ratio


def lm_head_ms(model, batch: int, dtype: torch.dtype) -> float:
    """CUDA-event milliseconds per call of the model's ``lm_head`` on ``batch`` rows (median)."""
    head = model.get_output_embeddings()
    x = torch.randn(batch, head.in_features, dtype=dtype, device="cuda")
    return eager_ms(lambda: head(x), iters=10, reps=5, warmup=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-8b", choices=sorted(MODEL_SPECS))
    p.add_argument("--layers", type=int, help="transformer layers (default: the spec's)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new", type=int, default=128, help="tokens generated per sequence")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    if not torch.cuda.is_available():
        p.error("no CUDA GPU here: generate and the profiles need one. Hint: run on a GPU")
    dtype = parse_dtype(args.dtype)
    dense = build_model(args.model, dtype, args.layers)
    sparse = copy.deepcopy(dense)
    with torch.no_grad():
        tokens = (args.batch, args.batch * args.prompt)
        print(sparsify(sparse, filter_fn=sparse_candidate, tokens=tokens, decode=True))
    set_mode(sparse, "graphs")
    vocab = MODEL_SPECS[args.model].config["vocab_size"]
    gen = torch.Generator(device="cuda").manual_seed(7)
    ids = torch.randint(1, vocab, (args.batch, args.prompt), device="cuda", generator=gen)
    models = {"dense": dense, "sparse": sparse}
    timed = interleaved_generate(models, ids, args.new, static=True, rounds=args.rounds)
    ratio = paired_ratio(timed["dense"][1], timed["sparse"][1])
    kw = generate_kwargs(ids, args.new, static=True)
    with torch.no_grad():
        head = lm_head_ms(dense, args.batch, dtype)
        kernels = {k: kernel_times(lambda m=m: m.generate(ids, **kw)) for k, m in models.items()}
    print(f"tokens/s speedup of decode=True, timed in turn: {ratio:.3f}x")
    print("| model | wall ms a step | GPU ms a step | GPU busy | products ms | other kernels ms |")
    print("|---|---|---|---|---|---|")
    steps = args.new
    for key, k in kernels.items():
        wall = timed[key][0] / steps
        gpu, mm = k.total_ms / steps, k.matmul_ms / steps
        print(f"| {key} | {wall:.3f} | {gpu:.3f} | {gpu / wall:.0%} | {mm:.3f} | {gpu - mm:.3f} |")
    wall = timed["dense"][0] / steps
    projections = kernels["dense"].matmul_ms / steps - head
    swapped = kernels["sparse"].matmul_ms / steps - head
    print(f"lm_head alone at {args.batch} rows: {head:.3f} ms (dense, kept dense by sparsify)")
    print(
        f"swapped projections a step (products less lm_head): dense {projections:.3f} ms, "
        f"sparse {swapped:.3f} ms, {projections / swapped:.2f}x"
    )
    print(
        f"bound if every swapped projection took no time (estimate): {wall / (wall - projections):.2f}x"
        f" ({projections:.3f} ms of dense projections in a {wall:.3f} ms step)"
    )
    for key, k in kernels.items():
        print(f"== {key}: {k!r}; the kernels with the most time a generate call:")
        for name, us, n in k.top(12):
            print(f"  {us / 1000:9.3f} ms  {n:6.0f} x  {name[:110]}")


if __name__ == "__main__":
    main()
