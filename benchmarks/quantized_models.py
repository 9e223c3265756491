"""Whole models, quantized: bf16 dense, the same precision dense, and 2:4 at that precision.

Three copies of one model of :data:`explorer.bench.models.MODEL_SPECS` (random weights, every
Linear but ``lm_head`` pruned 2:4): the bf16 model; the baseline a user deploying the precision
has, every pruned Linear run dense at it (``--dtype int4``: an
:class:`~explorer.gpu.modules.int4_linear.Int4Linear` kept on torch's int4 weight-only kernel;
``--dtype float8_e4m3fn``: an :class:`~explorer.gpu.modules.fp8_dense.Fp8DenseLinear` on
``torch._scaled_mm``; ``--dtype int8-weights``: an ``Int4Linear`` of int8 codes kept on its dense
route, the weight dequantized to 16 bits once, since torch has no CUDA int8 weight-only kernel
with group scales); and ``sparsify(model, dtype=...)``, which offers each layer the 2:4 kernel
at that precision and keeps the faster. Each run is timed in the modes of ``--modes`` (default
all three): eagerly, compiled in ``torch.compile``'s default mode (each model as the user has
it after ``sparsify``), and with CUDA graphs (``torch.compile(mode="reduce-overhead")``, the
sparsified model set to ``mode="graphs"``), the three variants in turn for 11 rounds; speedups
are medians of paired ratios. Run on a GPU::

    python benchmarks/quantized_models.py --dtype int4 --model llama-8b --runs 16x1,1x1
    python benchmarks/quantized_models.py --dtype float8_e4m3fn --runs 4x1024,1x4096

``--db PATH`` records each run in a results store as it finishes (quantized ``bench-models``
rows, :mod:`explorer.results.quantized_speed`: one per precision, pattern and mode, with the
speed-up over bf16 dense and over the same precision dense), with this machine's provenance
and ``--commit``. The store is opened before anything is timed; an existing store gains rows,
anything else at that path is refused. ``--from-json FILE --db PATH`` records a run already
measured (its ``--json`` file), with the provenance of the machine that measured it; it needs
no GPU::

    python benchmarks/quantized_models.py --from-json fp8.json --db measured.db

``--layers N`` builds the model with N transformer layers instead of the spec's few (``--layers
32`` is a whole LLaMA-3-8B-like model, where the dense bf16 head weighs less); its rows name the
model ``"llama-8b, 32 layers"``. ``--layer-by-layer`` also times a fourth variant, 2:4 with no
q/k/v or gate/up stacked (``sparsify(..., fuse_qkv=False, fuse_mlp=False)``), side by side with the
others: what stacking the layers gains. ``--ordinary-launches`` times another variant, the 2:4
model with every kernel launched in order (``SPARSITY_EXPLORER_OVERLAP=0`` while it is built and
warmed up), side by side: what overlapped launches gain (:mod:`explorer.gpu.cuda.launch`).

``--group-size G`` (``int4`` and ``int8-weights``) quantizes every pruned Linear in groups of G
columns (32, 64 or a multiple of 128; round to nearest, given to both quantized copies as the
scales a joint prune-and-quantize records) instead of sparsify's default 128; its rows name the
model ``"llama-8b, groups of 64"``::

    python benchmarks/quantized_models.py --dtype int4 --group-size 64 --runs 16x1,1x1 --generate

``--dtype bfloat16`` measures 2:4 in 16 bits the same way: the "same precision dense" variant is
then an unchanged copy of the bf16 model (an A/A control: equal work timed in turn), and the 2:4
model is ``sparsify(model, decode=True)``, which also offers each layer the explorer's decode
kernel at 1 to 64 tokens. With ``--layers 32`` it answers whether ``decode=True`` pays on a whole
8B-like model, where the benchmark suite's four layers give the dense head more weight::

    python benchmarks/quantized_models.py --dtype bfloat16 --layers 32 --runs 16x1,1x1

``--generate`` also times Hugging Face ``generate()`` as a user serves the model: greedy, a
32-token prompt and 128 new tokens, at batch 1 and 16 (``--batches`` for others), with the
dynamic cache (eager) and with ``cache_implementation="static"`` (transformers compiles the step
with CUDA graphs; the quantized models are set to ``mode="graphs"``), the three variants in turn
for five rounds, each starting one variant further on
(:func:`explorer.bench.generate.interleaved_generate`); tokens per second, speedups as medians of
the rounds' paired ratios, and the share of generated tokens the 2:4 model shares with the
same precision dense one. Those rows go to the ``--json`` file under ``"generate"``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
from pathlib import Path

import torch
from torch import nn

from explorer.bench import environment
from explorer.bench.generate import interleaved_generate
from explorer.bench.models import MODEL_SPECS, build_model
from explorer.gpu import set_mode, sparsify
from explorer.gpu.cuda.launch import OVERLAP_ENV
from explorer.gpu.routes.timing import interleaved_runs, paired_ratio
from explorer.gpu.swap import precision_dense
from explorer.gpu.swap.precision_dense import DENSE_PRECISIONS
from explorer.lowbit import compress_int4, compress_int8
from explorer.results.quantized_speed import (
    benchmark_keys,
    benchmark_provenance,
    rows_from_benchmark,
)
from explorer.results.store import ResultStore
from explorer.results.store.provenance import provenance


def _pruned(module: nn.Module, name: str) -> bool:
    return name.split(".")[-1] != "lm_head"


#: ``--layer-by-layer``: sparsify's options that keep every layer apart.
UNSTACKED = {"fuse_qkv": False, "fuse_mlp": False}

#: ``--generate``: batch sizes, prompt length and new tokens per sequence.
GENERATE_BATCHES, PROMPT, NEW_TOKENS = (1, 16), 32, 128

#: ``--modes``: how the forwards run (:data:`~explorer.results.model_speed.SPEED_MODES`).
MODES = ("eager", "compile", "graphs")


def parse_modes(text: str) -> tuple[str, ...]:
    """``--modes``: comma-separated execution modes, in the order given.

    Examples
    --------
    >>> parse_modes("graphs,compile")
    ('graphs', 'compile')
    >>> parse_modes("jit")
    Traceback (most recent call last):
    ...
    ValueError: --modes 'jit': expected some of eager, compile, graphs, comma-separated
    """
    modes = tuple(m.strip() for m in text.split(","))
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"--modes {text!r}: expected some of {', '.join(MODES)}, comma-separated")
    return modes


#: The precisions timed: bf16 (the dense variant is an unchanged copy, an A/A control) and the
#: lower ones with a dense baseline (:mod:`explorer.gpu.swap.precision_dense`).
DTYPES = ("bfloat16", *DENSE_PRECISIONS)


def sparsify_options(dtype: str) -> dict:
    """``sparsify``'s precision options for ``dtype``: 16 bits with the decode kernel offered.

    Examples
    --------
    >>> sparsify_options("int4"), sparsify_options("bfloat16")
    ({'dtype': 'int4'}, {'decode': True})
    """
    return {"decode": True} if dtype == "bfloat16" else {"dtype": dtype}


def parse_batches(text: str) -> tuple[int, ...]:
    """``--batches``: comma-separated positive batch sizes.

    Examples
    --------
    >>> parse_batches("1,8")
    (1, 8)
    >>> parse_batches("0")
    Traceback (most recent call last):
    ...
    ValueError: --batches '0': expected positive whole numbers, comma-separated, e.g. 1,8
    """
    try:
        batches = tuple(int(b) for b in text.split(","))
    except ValueError:
        batches = ()
    if not batches or min(batches) < 1:
        raise ValueError(
            f"--batches {text!r}: expected positive whole numbers, comma-separated, e.g. 1,8"
        )
    return batches


#: ``--group-size``: how each precision rounds a weight to its codes (and finds its scales).
_COMPRESS = {"int4": compress_int4, "int8-weights": compress_int8}


def group_scales(model: nn.Module, dtype: str, group_size: int) -> dict[str, torch.Tensor]:
    """Round-to-nearest scales of every pruned Linear of ``model`` in groups of ``group_size``."""
    compress = _COMPRESS[dtype]
    return {
        fqn: compress(mod.weight.detach().float(), group_size=group_size).scales
        for fqn, mod in model.named_modules()
        if isinstance(mod, nn.Linear) and _pruned(mod, fqn)
    }


def dense_at(model: nn.Module, dtype: str, scales: dict | None = None) -> nn.Module:
    """A copy of ``model`` with every pruned Linear run dense at ``dtype`` (no 2:4 route)."""
    if dtype == "bfloat16":
        return copy.deepcopy(model)
    dense, summary = precision_dense.dense_at(model, dtype, _pruned, scales)
    for fqn, why in summary.kept:
        print(f"{fqn}: kept bf16 in the {dtype} dense model ({why})")
    return dense


@contextlib.contextmanager
def ordinary_launches(enabled: bool = True):
    """Launchers made inside launch every kernel in order (where ``enabled``)."""
    before = os.environ.get(OVERLAP_ENV)
    if enabled:
        os.environ[OVERLAP_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OVERLAP_ENV, None)
        else:
            os.environ[OVERLAP_ENV] = before


def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def generate_rows(
    variants: dict,
    model: str,
    dtype: str,
    keys: tuple[str, str],
    vocab: int,
    batches: tuple[int, ...] = GENERATE_BATCHES,
    on_row=None,
) -> list[dict]:
    """Tokens per second of ``generate()`` for bf16 dense, the precision dense and 2:4 at it.

    ``keys`` names the precision dense and the 2:4 variants of ``variants``; ``on_row(rows)``, if
    given, is called with the rows so far after each one (so a run stopped early keeps them).
    """
    base_key, sparse_key = keys
    gen = torch.Generator(device="cuda").manual_seed(7)
    rows = []
    for batch in batches:
        ids = torch.randint(1, vocab, (batch, PROMPT), device="cuda", generator=gen)
        for cache in ("dynamic", "static"):
            static = cache == "static"
            row = {"model": model, "dtype": dtype, "batch": batch, "prompt": PROMPT}
            row.update(new_tokens=NEW_TOKENS, cache=cache)
            quantized = [m for k, m in variants.items() if k != "bf16 dense"]
            if static:
                torch._dynamo.reset()
                for m in quantized:  # the compiled step runs in CUDA graphs
                    set_mode(m, "graphs")
            try:
                timed = interleaved_generate(variants, ids, NEW_TOKENS, static, rounds=5)
            except Exception as exc:  # a refused run is a result to show, not a crash
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                timed = {}
            finally:
                for m in quantized:
                    set_mode(m, "auto")
            for key, (ms, _, _) in timed.items():
                row[f"{key} tok/s"] = batch * NEW_TOKENS / (ms / 1e3)
            if timed:
                base, same, sparse = (timed[k][1] for k in ("bf16 dense", base_key, sparse_key))
                row[f"{base_key} over bf16"] = paired_ratio(base, same)
                row[f"{sparse_key} over bf16"] = paired_ratio(base, sparse)
                row[f"{sparse_key} over {base_key}"] = paired_ratio(same, sparse)
                equal = timed[sparse_key][2] == timed[base_key][2]
                row[f"{sparse_key} tokens equal to {base_key}"] = float(equal.float().mean())
            print(
                f"generate {model} batch {batch} {cache}: "
                + ", ".join(f"{k} {v:.3g}" for k, v in row.items() if isinstance(v, float))
                + (f" ({row['error']})" if "error" in row else ""),
                flush=True,
            )
            rows.append(row)
            if on_row is not None:
                on_row(rows)
    torch._dynamo.reset()
    return rows


def import_json(path: Path, db: str, commit: str | None = None) -> int:
    """Record the rows of a ``--json`` file in the store ``db``; return how many."""
    data = json.loads(Path(path).read_text())
    env = dict(data.get("env") or {}) if isinstance(data, dict) else {}
    if commit:
        env["commit"] = commit
    rows = rows_from_benchmark(data)  # checked before the store is opened
    with ResultStore(db) as store:
        store.record_many({**r, "provenance": benchmark_provenance(env)} for r in rows)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-8b", choices=sorted(MODEL_SPECS))
    p.add_argument("--dtype", default="int4", choices=sorted(DTYPES))
    p.add_argument(
        "--runs", help="batch x seq, comma-separated (default: fp8 4x1024,1x4096, else 16x1,1x1)"
    )
    p.add_argument("--json", type=Path)
    p.add_argument("--db", help="record the rows in this results store (appended to)")
    p.add_argument("--commit", help="the commit measured, recorded with the rows")
    p.add_argument("--from-json", type=Path, help="record this --json file's rows in --db")
    p.add_argument("--generate", action="store_true", help="also time generate() (tokens/s)")
    p.add_argument(
        "--layer-by-layer",
        action="store_true",
        help="also time 2:4 with q/k/v and gate/up not stacked (sparsify's fuse_qkv/fuse_mlp off)",
    )
    p.add_argument(
        "--layers", type=int, help="transformer layers instead of the spec's (32: a whole 8B model)"
    )
    p.add_argument(
        "--group-size",
        type=int,
        help="int4 / int8-weights: columns per scale (32, 64 or a multiple of 128; default 128)",
    )
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        help="execution modes to time, comma-separated (default %(default)s)",
    )
    p.add_argument(
        "--ordinary-launches",
        action="store_true",
        help="also time the 2:4 model with every kernel launched in order",
    )
    p.add_argument(
        "--batches",
        default=",".join(map(str, GENERATE_BATCHES)),
        help="--generate's batch sizes, comma-separated (default %(default)s)",
    )
    args = p.parse_args(argv)
    try:
        batches = parse_batches(args.batches)
        modes = parse_modes(args.modes)
    except ValueError as exc:
        p.error(str(exc))
    command = "python benchmarks/quantized_models.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    if args.from_json is not None:
        if not args.db:
            p.error("--from-json needs --db PATH, the results store to record its rows in")
        count = import_json(args.from_json, args.db, args.commit)
        print(f"recorded {count} rows of {args.from_json} in {args.db}")
        return 0
    store = ResultStore(args.db) if args.db else None  # refused now, not after the timing
    measured = {**provenance(), "measured_by": command.strip()}
    if args.commit:
        measured["commit"] = args.commit
    spec = args.runs or ("4x1024,1x4096" if args.dtype == "float8_e4m3fn" else "16x1,1x1")
    runs = [tuple(int(v) for v in r.split("x")) for r in spec.split(",")]
    base_key, sparse_key = benchmark_keys(args.dtype)
    options = sparsify_options(args.dtype)
    counts = {b * s for b, s in runs}
    if args.generate:
        counts |= set(batches) | {b * PROMPT for b in batches}
    counts = tuple(sorted(counts, reverse=True))
    if args.layers is not None and args.layers < 1:
        p.error(f"--layers {args.layers}: expected a positive number of layers")
    if args.group_size is not None and args.dtype not in _COMPRESS:
        p.error(f"--group-size is for --dtype {' or '.join(_COMPRESS)}, not {args.dtype}")
    # another model than the spec's: named apart in the store
    name = ", ".join(
        [args.model]
        + ([f"{args.layers} layers"] if args.layers is not None else [])
        + ([f"groups of {args.group_size}"] if args.group_size is not None else [])
    )
    dense = build_model(args.model, torch.bfloat16, layers=args.layers)
    scales = None
    if args.group_size is not None:
        scales = group_scales(dense, args.dtype, args.group_size)
        options = {**options, "int4_scales": scales}
    variants = {"bf16 dense": dense, base_key: dense_at(dense, args.dtype, scales)}
    sparse = copy.deepcopy(dense)
    with torch.no_grad():
        report = sparsify(sparse, filter_fn=_pruned, tokens=counts, **options)
    print(repr(report))
    variants[sparse_key] = sparse
    if args.layer_by_layer:  # the same, with no layers stacked: what stacking gains
        single = copy.deepcopy(dense)
        with torch.no_grad():
            sparsify(single, filter_fn=_pruned, tokens=counts, **options, **UNSTACKED)
        variants[f"{sparse_key} layer by layer"] = single
    ordinary = f"{sparse_key} ordinary launches"
    if args.ordinary_launches:  # the same, launched in order: what overlapped launches gain
        in_order = copy.deepcopy(dense)
        with torch.no_grad(), ordinary_launches():
            sparsify(in_order, filter_fn=_pruned, tokens=counts, **options)
        variants[ordinary] = in_order
    vocab = MODEL_SPECS[args.model].config.get("vocab_size", 32000)
    rows = []
    env = {**environment(), "time": measured["time"], "command": command.strip()}
    env.update({"commit": args.commit} if args.commit else {})

    def write_json(generated: list[dict] | tuple = ()) -> None:
        """Write what is measured so far: a run stopped by a time limit keeps its rows."""
        if args.json:
            data = {"env": env, "rows": rows, **({"generate": generated} if generated else {})}
            args.json.write_text(json.dumps(data, default=str))

    for batch, seq in runs:
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
        row = {"model": args.model, "dtype": args.dtype, "batch": batch, "seq": seq}
        if args.layers is not None:
            row.update(layers=args.layers)
        if args.group_size is not None:
            row.update(group_size=args.group_size)
        row.update(model=name)
        with torch.no_grad():
            ref = variants["bf16 dense"](input_ids=ids).logits
            for key in (base_key, sparse_key):
                row[f"{key} relerr"] = _relerr(variants[key](input_ids=ids).logits, ref)
        for how in modes:
            torch._dynamo.reset()
            fns = {}
            for key, model in variants.items():
                if how == "graphs" and key != "bf16 dense":
                    set_mode(model, "graphs")
                run = model  # eager
                if how != "eager":  # the default mode, or CUDA graphs
                    run = torch.compile(model, mode="reduce-overhead" if how == "graphs" else None)

                def call(run=run, ids=ids):
                    with torch.no_grad():
                        return run(input_ids=ids)

                with ordinary_launches(key == ordinary):
                    for _ in range(3):  # compile, warm up, record the graph
                        call()
                fns[key] = call
            torch.cuda.synchronize()
            timed = interleaved_runs(fns, rounds=11, iters=5, lead_in=1)
            for key, times in timed.items():
                row[f"{how} {key} ms"] = statistics.median(times)
            base, same = timed["bf16 dense"], timed[base_key]
            row[f"{how} {base_key} over bf16"] = paired_ratio(base, same)
            row[f"{how} {sparse_key} over bf16"] = paired_ratio(base, timed[sparse_key])
            row[f"{how} {sparse_key} over {base_key}"] = paired_ratio(same, timed[sparse_key])
            if args.ordinary_launches:
                row[f"{how} {sparse_key} over {ordinary}"] = paired_ratio(
                    timed[ordinary], timed[sparse_key]
                )
            if args.layer_by_layer:
                single = timed[f"{sparse_key} layer by layer"]
                row[f"{how} {sparse_key} layer by layer over {base_key}"] = paired_ratio(
                    same, single
                )
            for model in variants.values():
                set_mode(model, "auto")
        torch._dynamo.reset()
        print(
            f"{row['model']} {batch}x{seq}: "
            + ", ".join(f"{k} {v:.3g}" for k, v in row.items() if isinstance(v, float))
        )
        rows.append(row)
        write_json()
        if store is not None:
            prov = {**measured, "time": provenance()["time"]}  # when this run finished
            store.record_many({**r, "provenance": prov} for r in rows_from_benchmark([row]))
    if store is not None:
        store.close()
        print(f"recorded {len(rows)} runs in {args.db}")
    generated = []
    if args.generate:
        keys = (base_key, sparse_key)
        generated = generate_rows(variants, name, args.dtype, keys, vocab, batches, write_json)
    write_json(generated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
