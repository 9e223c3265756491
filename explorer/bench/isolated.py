"""One model per process: the speed a user who runs one model sees.

The benchmark suites (:mod:`explorer.bench.generate`, the models suite) time dense and sparse
models side by side in one process. For compiled models that method has moved the figure:
``decode=True`` at batch 8 on the LLaMA-like model read 1.23x with four compiled models in
one process (90418f4) and 1.03x with each compiled beside dense alone (6c7dae1). (Dynamo keeps
the compiled frames of every model of a class in one cache per code object; on a CPU a second
model's entry added nothing to a call, so that is not the reason.) A user runs one model. This module times each model in a process of its own (``multiprocessing``'s spawn
start: nothing compiled, captured or cached in memory is shared), dense and the variant
alternating, the order flipped each repeat so that a drift of the machine falls on both alike
(dense, variant, variant, dense, ...). Each process builds the benchmark model from the same
seed (the same weights), sparsifies it if asked, warms up and times ``rounds`` timings with
CUDA events. The speedup is the median over repeats of the ratio of the two processes' median
times; ``control`` (dense again, in its own process) gives the noise of that comparison.
Algorithm tables searched by one process are read by the next from the cache on disk, as for
a user who reruns a script.

What it cannot settle: a host-bound step. On an H100 host the same dense Phi-3-like model's
compiled 1 x 1 step took 1.1 ms in one process and 1.8-2.0 ms in another (docs/gpu.md), a
spread far wider than the few percent such steps differ by; there the in-process pairs of the
benchmark suites are the figure.

Two workloads:

* ``generate``: greedy ``model.generate`` of ``new_tokens`` tokens, dynamic or static cache
  (a static cache compiles and captures the step in the warm-up call);
* ``step``: one forward of ``batch x seq`` tokens, eager, ``torch.compile(model)`` in its
  default mode or ``mode="reduce-overhead"``; a timing is ``iters`` back-to-back steps.

Run on a GPU::

    python -m explorer.bench.isolated --model llama-8b --variants control,decode
    python -m explorer.bench.isolated --workload step --model phi3-mini --batch 1 --seq 1 \
        --compile default --variants control,explorer
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "STEP_MODES",
    "VARIANTS",
    "WORKLOADS",
    "isolated_pairs",
    "process_order",
    "time_in_process",
]

#: What a process may run: the dense model, its unchanged copy (the A/A control), ``sparsify()``
#: and ``sparsify(decode=True)``.
VARIANTS = ("dense", "control", "explorer", "decode")


def process_order(variant: str, repeats: int) -> list[str]:
    """The processes to run, in order: dense and ``variant`` alternating, flipped each repeat.

    Parameters
    ----------
    variant : str
        The model timed against dense.
    repeats : int
        Pairs of processes.

    Returns
    -------
    list of str
        ``2 * repeats`` names.

    Examples
    --------
    >>> process_order("decode", 3)
    ['dense', 'decode', 'decode', 'dense', 'dense', 'decode']
    """
    order = []
    for r in range(repeats):
        pair = ["dense", variant]
        order += pair if r % 2 == 0 else pair[::-1]
    return order


#: The workloads a process may time (see the module's docstring).
WORKLOADS = ("generate", "step")

#: How a ``step`` workload runs the model: eagerly or through ``torch.compile`` in a mode.
STEP_MODES = ("eager", "default", "reduce-overhead")


def time_in_process(job: dict) -> dict:
    """Run in a fresh process: build ``job["variant"]``, warm up, time its workload.

    Parameters
    ----------
    job : dict
        ``model``, ``dtype`` (a name), ``variant`` (one of :data:`VARIANTS`), ``batch``,
        ``rounds`` and ``workload`` (one of :data:`WORKLOADS`; ``"generate"`` if absent). For
        ``generate``: ``cache`` (``"dynamic"`` or ``"static"``), ``prompt``, ``new_tokens``.
        For ``step``: ``seq``, ``compile`` (one of :data:`STEP_MODES`), ``iters``.

    Returns
    -------
    dict
        ``ms``: the timings' milliseconds (a ``generate`` call, or one step); ``tokens``: the
        last call's new token ids, or a step's greedy next token per sequence (lists); or
        ``error``: what failed.
    """
    import torch

    from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
    from explorer.dtypes import parse_dtype
    from explorer.gpu import set_mode, sparsify

    try:
        workload = job.get("workload", "generate")
        if workload not in WORKLOADS:
            raise ValueError(f"workload {workload!r} unknown; expected one of {WORKLOADS}")
        spec = MODEL_SPECS[job["model"]]
        model = build_model(job["model"], parse_dtype(job["dtype"]))
        if workload == "generate":
            graphs = job["cache"] == "static"
            tokens = tuple(sorted({job["batch"] * job["prompt"], job["batch"]}))
        else:
            graphs = job["compile"] == "reduce-overhead"
            tokens = (job["batch"] * job["seq"],)
        if job["variant"] in ("explorer", "decode"):
            with torch.no_grad():
                sparsify(
                    model,
                    filter_fn=sparse_candidate,
                    tokens=tokens,
                    decode=job["variant"] == "decode",
                )
            if graphs:
                set_mode(model, "graphs")  # the step runs in CUDA graphs, as the docs ask
        gen = torch.Generator(device="cuda").manual_seed(7)
        length = job["prompt"] if workload == "generate" else job["seq"]
        ids = torch.randint(
            1, spec.config["vocab_size"], (job["batch"], length), device="cuda", generator=gen
        )
        with torch.no_grad():
            if workload == "generate":
                return _timed_generations(model, ids, job)
            return _timed_steps(model, ids, job)
    except Exception as exc:  # a failure is a result to report, not a crash
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def _timed_generations(model, ids, job: dict) -> dict:
    """``job["rounds"]`` greedy generations after one warm-up (which compiles a static step)."""
    from explorer.bench.generate import generate_kwargs, timed_generate

    kw = generate_kwargs(ids, job["new_tokens"], job["cache"] == "static")
    model.generate(ids, **kw)  # warm-up: a static cache compiles and captures the step
    ms, out = [], None
    for _ in range(job["rounds"]):
        t, out = timed_generate(model, ids, kw)
        ms.append(t)
    return {"ms": ms, "tokens": out[:, ids.shape[1] :].tolist()}


def _timed_steps(model, ids, job: dict) -> dict:
    """``job["rounds"]`` timings of ``job["iters"]`` back-to-back forwards, per forward."""
    import torch

    mode = job["compile"]
    if mode not in STEP_MODES:
        raise ValueError(f"compile={mode!r} unknown; expected one of {STEP_MODES}")
    run = (
        model if mode == "eager" else torch.compile(model, mode=None if mode == "default" else mode)
    )
    for _ in range(5):  # compile, warm up, record the CUDA graph
        logits = run(input_ids=ids).logits
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(job["rounds"]):
        torch.cuda.synchronize()
        start.record()
        for _ in range(job["iters"]):
            logits = run(input_ids=ids).logits
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end) / job["iters"])
    return {"ms": ms, "tokens": logits[:, -1].argmax(-1)[:, None].tolist()}


def _spawned(job: dict) -> dict:
    """:func:`time_in_process` in a new process (spawn: no CUDA state is inherited)."""
    import importlib
    import multiprocessing

    # by its importable name: run as ``python -m``, this module is ``__main__`` here, and the
    # child must find the function by the name it is pickled with
    target = importlib.import_module("explorer.bench.isolated").time_in_process
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(target, (job,))


def isolated_pairs(
    job: dict,
    variant: str,
    repeats: int = 3,
    run: Callable[[dict], dict] = _spawned,
    log: Callable[[str], object] = print,
) -> dict:
    """Time ``variant`` against dense, each in processes of their own.

    Parameters
    ----------
    job : dict
        What :func:`time_in_process` needs, without ``variant``.
    variant : str
        One of :data:`VARIANTS` but ``"dense"``.
    repeats : int, optional
        Pairs of processes (at least 1).
    run : callable, optional
        Runs one job and returns its result; by default in a new process.
    log : callable, optional
        Receives one line per process.

    Returns
    -------
    dict
        ``speedup`` (median over repeats of dense's median time over the variant's, or None),
        ``ratios`` (one per repeat), ``dense_ms`` and ``variant_ms`` (each process's median),
        ``agreement`` (share of new tokens equal to dense's, last pair), ``errors``.

    Examples
    --------
    >>> fake = lambda job: {"ms": [10.0 if job["variant"] == "dense" else 8.0], "tokens": [[1]]}
    >>> isolated_pairs({"rounds": 1}, "decode", 2, run=fake, log=lambda line: None)["speedup"]
    1.25
    """
    if variant not in VARIANTS or variant == "dense":
        raise ValueError(
            f"variant {variant!r} is not one to time against dense; expected one of {VARIANTS[1:]}"
        )
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: at least one pair of processes is needed")
    medians: dict[str, list[float]] = {"dense": [], variant: []}
    ratios: list[float] = []
    tokens: dict[str, list] = {}
    errors = []
    order = process_order(variant, repeats)
    for r in range(repeats):
        pair = {}
        for name in order[2 * r : 2 * r + 2]:
            result = run({**job, "variant": name})
            if "error" in result:
                errors.append(f"{name}: {result['error']}")
                log(f"[isolated] {name}: failed, {result['error']}")
                continue
            pair[name] = statistics.median(result["ms"])
            medians[name].append(pair[name])
            tokens[name] = result["tokens"]
            log(f"[isolated] {name}: {pair[name]:.3f} ms a timing (median of the process)")
        if len(pair) == 2:  # a repeat counts only where both of its processes ran
            ratios.append(pair["dense"] / pair[variant])
    agreement = None
    if "dense" in tokens and variant in tokens:
        flat_d = [t for row in tokens["dense"] for t in row]
        flat_v = [t for row in tokens[variant] for t in row]
        same = sum(a == b for a, b in zip(flat_d, flat_v, strict=True))
        agreement = same / max(1, len(flat_d))
    return {
        "speedup": statistics.median(ratios) if ratios else None,
        "ratios": ratios,
        "dense_ms": medians["dense"],
        "variant_ms": medians[variant],
        "agreement": agreement,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> None:
    """The command line (see the module's docstring).

    Parameters
    ----------
    argv : list of str, optional
        The arguments; ``sys.argv[1:]`` by default.
    """
    from explorer.bench.models import MODEL_SPECS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="generate", choices=WORKLOADS)
    p.add_argument("--model", default="llama-8b", choices=sorted(MODEL_SPECS))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--cache", default="static", choices=("dynamic", "static"), help="generate")
    p.add_argument("--prompt", type=int, default=32, help="generate: prompt tokens")
    p.add_argument("--new-tokens", type=int, default=128, help="generate: tokens generated")
    p.add_argument("--seq", type=int, default=1, help="step: tokens per sequence")
    p.add_argument("--compile", default="default", choices=STEP_MODES, help="step: how it runs")
    p.add_argument("--iters", type=int, default=20, help="step: back-to-back steps per timing")
    p.add_argument("--variants", default="control,decode", help="comma-separated, not dense")
    p.add_argument("--repeats", type=int, default=3, help="pairs of processes per variant")
    p.add_argument("--rounds", type=int, default=5, help="timings per process")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    job = dict(workload=args.workload, model=args.model, dtype=args.dtype, batch=args.batch,
               rounds=args.rounds)  # fmt: skip
    if args.workload == "generate":
        job.update(cache=args.cache, prompt=args.prompt, new_tokens=args.new_tokens)
        where = f"{args.model} generate, batch {args.batch}, {args.cache} cache"
    else:
        job.update(seq=args.seq, compile=args.compile, iters=args.iters)
        where = f"{args.model} step {args.batch}x{args.seq}, {args.compile}"
    results = {}
    for variant in args.variants.split(","):
        res = isolated_pairs(job, variant.strip(), args.repeats)
        results[variant] = res
        if res["speedup"] is None:
            print(f"{where}, one model per process: {variant} not measured; "
                  + "; ".join(res["errors"]))  # fmt: skip
            continue
        if args.workload == "generate":
            rates = [args.batch * args.new_tokens / (ms / 1e3) for ms in res["dense_ms"]]
            dense = ", ".join(f"{t:.0f}" for t in rates) + " tokens/s"
        else:
            dense = ", ".join(f"{ms:.3f}" for ms in res["dense_ms"]) + " ms a step"
        print(
            f"{where}, one model per process: {variant} {res['speedup']:.2f}x over dense "
            f"(ratios {', '.join(f'{r:.3f}' for r in res['ratios'])}; dense {dense}; "
            f"agreement {res['agreement']})"
        )
    if args.json:
        args.json.write_text(json.dumps({"job": job, "results": results}, indent=1))


if __name__ == "__main__":
    main()
