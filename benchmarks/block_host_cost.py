"""Host and GPU time of one decoder layer's parts in a whole model, dense against sparse.

A whole-model eager forward at decode sizes is host-bound: each part costs its host time. This
times the parts of layer 0 of a models-suite architecture as the model calls them (the q/k/v
trio, ``o_proj``, the MLP) after ``sparsify()``, side by side with the dense model's, at the
token counts given. Run on a GPU::

    python benchmarks/block_host_cost.py --model qwen2-1.5b --tokens 16,1
"""

from __future__ import annotations

import argparse
import copy

import torch

from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
from explorer.dtypes import parse_dtype
from explorer.gpu import sparsify
from explorer.gpu.routes.timing import host_us, interleaved_ms


def _parts(model, x):
    layer = model.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    parts = {"mlp": lambda: mlp(x), "o_proj": lambda: attn.o_proj(x)}
    x2 = x.reshape(-1, x.shape[-1])
    if hasattr(mlp, "gate_up"):  # the fused block's products, each as the block calls it
        h = torch.zeros(x2.shape[0], mlp.down.in_features, dtype=x.dtype, device=x.device)
        parts["mlp: gate+up product"] = lambda: mlp.gate_up.run(x2)
        parts["mlp: down product"] = lambda: mlp.down.run(h)
    else:
        h = torch.zeros(x2.shape[0], mlp.down_proj.in_features, dtype=x.dtype, device=x.device)
        parts["mlp: gate+up product"] = lambda: (mlp.gate_proj(x2), mlp.up_proj(x2))
        parts["mlp: down product"] = lambda: mlp.down_proj(h)
    if hasattr(attn, "q_proj"):
        parts["q,k,v"] = lambda: (attn.q_proj(x), attn.k_proj(x), attn.v_proj(x))
    else:
        parts["qkv_proj"] = lambda: attn.qkv_proj(x)
    return parts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2-1.5b")
    p.add_argument("--tokens", default="16,1")
    p.add_argument("--sparsify-tokens", default="4096,16")
    p.add_argument("--dtype", default="bfloat16", help="the model's dtype: bfloat16 or float16")
    args = p.parse_args()
    dtype = parse_dtype(args.dtype)
    dense = build_model(args.model, dtype)
    sparse = copy.deepcopy(dense)
    counts = tuple(int(t) for t in args.sparsify_tokens.split(","))
    with torch.no_grad():
        print(sparsify(sparse, filter_fn=sparse_candidate, tokens=counts))
    d = MODEL_SPECS[args.model].config["hidden_size"]
    print("| part | tokens | dense host us | sparse host us | dense wall ms | sparse wall ms |")
    print("|---|---|---|---|---|---|")
    with torch.no_grad():
        for t in (int(v) for v in args.tokens.split(",")):
            x = torch.randn(t, 1, d, device="cuda", dtype=dtype)
            pd, ps = _parts(dense, x), _parts(sparse, x)
            for name in pd:
                hd, hs = host_us(pd[name], iters=300), host_us(ps[name], iters=300)
                walls = interleaved_ms({"d": pd[name], "s": ps[name]})
                print(
                    f"| {name} | {t} | {hd:.1f} | {hs:.1f} | {walls['d']:.4f} | {walls['s']:.4f} |"
                )
            ids = torch.randint(0, 1000, (t, 1), device="cuda")
            whole = {
                "d": lambda ids=ids: dense(input_ids=ids),
                "s": lambda ids=ids: sparse(input_ids=ids),
            }
            walls = interleaved_ms(whole)
            hd, hs = host_us(whole["d"], iters=30), host_us(whole["s"], iters=30)
            print(
                f"| whole model | {t} | {hd:.1f} | {hs:.1f} | {walls['d']:.4f} | {walls['s']:.4f} |"
            )


if __name__ == "__main__":
    main()
