"""Host time of a ``SparseLinear`` on its dense route, step by step, against ``nn.Linear``.

A model whose swapped layers all run their dense route should cost what the dense model does.
The BERT-like model eagerly at 4096 tokens does not (docs/gpu.md, the d341b25 run): the same
kernels, about 10 us more host time per swapped layer on an H100 host, while on a CPU the same
route costs less than ``nn.Linear``. This script times, on the GPU host, each step such a call
makes, for the two places an eager call finds its dense route:

* ``mode="eager"``: every clock the layer runs by chose dense, so the call is found in the
  table looked up first and runs ``F.linear`` (no capture check);
* ``mode="auto"`` where a CUDA-graph capture would run sparse (the GPU clock chose sparse): the
  call is found in the second table and asks CUDA whether the stream is capturing first.

Each row is the host time to issue one call (:func:`explorer.gpu.routes.timing.host_us`, the
median of several timings of back-to-back calls), side by side in one process. Run on a GPU::

    python benchmarks/dense_route_host.py --shape 3072x768 --tokens 4096
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch import nn
from torch.nn import functional as F

from explorer.bench.runner import mask24
from explorer.dtypes import parse_dtype
from explorer.gpu.modules.sparse_linear import SparseLinear
from explorer.gpu.routes.timing import host_us


def _masked(out_features: int, in_features: int, dtype: torch.dtype) -> nn.Linear:
    """A CUDA ``nn.Linear`` whose weight keeps the two largest of every four (2:4)."""
    lin = nn.Linear(in_features, out_features).to("cuda", dtype)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    return lin


def dense_route_layer(lin: nn.Linear, tokens: int, mode: str) -> SparseLinear:
    """``lin`` as a ``SparseLinear`` in ``mode`` whose eager calls at ``tokens`` rows run dense.

    The whole-model check's verdict (:meth:`SparseLinear.keep_dense_at`) puts the count on the
    dense route whatever the layer's own timing chose, as ``sparsify`` does for a model whose
    sparse routes did not win.
    """
    layer = SparseLinear.from_linear(lin, keep_dense=True, mode=mode)
    layer.keep_dense_at(tokens)
    return layer


def steps(lin: nn.Linear, layer: SparseLinear, x: torch.Tensor) -> dict[str, object]:
    """``{label: call}``: the dense model's call, the swapped layer's, and each step of it."""
    layer(x)  # the first call decides and remembers its call for this input
    key = (x.shape, x.get_device(), x.dtype)
    table = "first table" if key in layer._dense_any else "second table"
    remembered = layer._dense_any.get(key) or layer._wall_dense.get(key)
    if remembered is None:
        raise RuntimeError("the layer remembered no dense call for this input; see docs/gpu.md")
    w, b = lin.weight, lin.bias
    return {
        "nn.Linear": lambda: lin(x),
        "F.linear, positional": lambda: F.linear(x, w, b),
        f"SparseLinear (dense route, {table})": lambda: layer(x),
        "SparseLinear.run": lambda: layer.run(x),
        "the remembered call alone": lambda: remembered(x),
        "torch.cuda.is_current_stream_capturing()": torch.cuda.is_current_stream_capturing,
        "torch.compiler.is_compiling()": torch.compiler.is_compiling,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="3072x768", help="out x in of the layer")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--repeats", type=int, default=7, help="timings per row (median taken)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark times calls on a CUDA GPU's host; no GPU was found")
    out_features, in_features = (int(v) for v in args.shape.split("x"))
    dtype = parse_dtype(args.dtype)
    lin = _masked(out_features, in_features, dtype)
    x = torch.randn(args.tokens, in_features, device="cuda", dtype=dtype)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.shape} {args.dtype}")
    for mode in ("eager", "auto"):
        calls = steps(lin, dense_route_layer(lin, args.tokens, mode), x)
        times = {k: [] for k in calls}
        for _ in range(args.repeats):
            for label, call in calls.items():  # rows in turn: the host's speed drifts
                times[label].append(host_us(call))
        print(f"\nmode={mode!r}, {args.tokens} tokens: host us per call (median of {args.repeats})")
        for label, ts in times.items():
            print(f"  {label:45s} {statistics.median(ts):7.2f}")


if __name__ == "__main__":
    main()
