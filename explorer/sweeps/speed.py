"""The speed cell: one layer-speed row per distinct layer shape, timed by the benchmark."""

from __future__ import annotations

import importlib.util

import torch

from explorer.sweeps.grid import SPEED_PATTERNS
from explorer.sweeps.loading import bundle_for, layer_filter

__all__ = ["speed_cell"]


def _skipped(config: dict, reason: str) -> list[dict]:
    return [{"kind": "layer-speed", "config": config, "status": "skipped", "error": reason}]


def speed_cell(config: dict) -> list[dict]:
    """Time the layer shapes of a cell's layer set, or say why they cannot be timed here.

    Parameters
    ----------
    config : dict
        The speed cell's configuration (``model``, ``pattern``, ``layers``, ``dtype``,
        ``tokens``).

    Returns
    -------
    list[dict]
        One ``layer-speed`` row per distinct layer shape, or one skipped row with the reason.

    Examples
    --------
    >>> speed_cell({"cell": "speed", "pattern": "4:8"})[0]["error"]
    "no sparse kernel for pattern '4:8'"
    """
    # 1. Guard: speed rows need a CUDA GPU, the GPU extra and the benchmark module.
    if config["pattern"] not in SPEED_PATTERNS:
        return _skipped(config, f"no sparse kernel for pattern {config['pattern']!r}")
    if not torch.cuda.is_available():
        return _skipped(config, "no CUDA GPU here: speed rows need one (accuracy rows are kept)")
    if importlib.util.find_spec("nvmath") is None:
        return _skipped(
            config,
            'the GPU extra is missing (nvmath-python): pip install "sparsity-explorer[gpu]"',
        )
    try:
        from explorer.bench import run_bench
    except ImportError as exc:
        return _skipped(config, f"the benchmark is not available ({exc})")
    # 2. The model's distinct layer shapes in this layer set, with how often each occurs.
    bundle = bundle_for(config)
    from explorer.pruning.calibration import selected_linears

    chosen, _ = selected_linears(
        bundle.model,
        layer_filter(
            config["layers"], bundle.filter_fn, bundle.model, config["dtype"], config["tokens"]
        ),
    )
    shapes: dict[tuple[int, int], list[str]] = {}
    for fqn, mod in chosen.items():
        shapes.setdefault((mod.out_features, mod.in_features), []).append(fqn)
    if not shapes:
        raise ValueError(f"layer set {config['layers']!r} selects no nn.Linear layers")
    # 3. Time every shape at this token count (dense cuBLAS, torch eager, the explorer's plans).
    if config["dtype"] not in _BENCH_DTYPES:
        raise ValueError(
            f"dtype {config['dtype']!r} has no 2:4 sparse kernel to time; the benchmark "
            f"covers {', '.join(_BENCH_DTYPES)}"
        )
    problems = [(out, config["tokens"], inp) for out, inp in shapes]
    if config["dtype"] != "int8":
        _search_together(problems, config["dtype"])
    rows = run_bench(shapes=problems, dtypes=[config["dtype"]], suites=["matmul"], progress=False)
    # 4. One layer-speed row per shape, labelled with the layers that have it.
    return [
        _layer_row(config, shape, names, [r for r in rows if (r.get("m"), r.get("k")) == shape])
        for shape, names in shapes.items()
    ]


_BENCH_DTYPES = ("float16", "bfloat16", "int8")


def _search_together(problems: list[tuple[int, int, int]], dtype: str) -> None:
    """Search the algorithm of every shape the benchmark will time, in one child process.

    Each problem is searched within the search budget, so that the benchmark finds them all in this
    GPU's table instead of starting a child per shape and layout.
    """
    from explorer.gpu.library.batch_search import tune_problems
    from explorer.gpu.library.cusparselt import padded_tokens
    from explorer.gpu.library.tuning import Problem

    torch_dtype = getattr(torch, dtype)
    tune_problems(
        [
            Problem(out, padded_tokens(tokens, torch_dtype), inp, dtype, layout)
            for out, tokens, inp in problems
            for layout in ("cc", "cr")
        ],
        progress=False,
    )


def _layer_row(config: dict, shape: tuple[int, int], names: list[str], rows: list[dict]) -> dict:
    # Pivot the benchmark's rows (one per implementation and mode) into one row of times.
    cfg = {**config, "shape": list(shape), "layer_names": names, "count": len(names)}
    times, errors = {}, []
    for r in rows:
        if r.get("dtype") != config["dtype"]:
            continue
        suffix = "" if r.get("mode") == "eager" else f"_{r.get('mode')}"
        if r.get("status", "ok") == "ok" and r.get("ms"):
            times[f"{r.get('impl')}{suffix}_ms"] = float(r["ms"])
            if r.get("host_us"):
                times[f"{r.get('impl')}_host_us"] = float(r["host_us"])
        else:
            errors.append(f"{r.get('impl')} {r.get('mode')}: {r.get('error', 'failed')}")
    metrics = dict(times)
    for name, sparse in (("", "explorer"), ("_graph", "explorer"), ("_torch", "torch")):
        suffix = "_graph" if name == "_graph" else ""
        dense, fast = times.get(f"dense{suffix}_ms"), times.get(f"{sparse}{suffix}_ms")
        if dense and fast:
            metrics[f"speedup{name}"] = dense / fast
    metrics["dense_ms"] = times.get("dense_ms")
    metrics["sparse_ms"] = times.get("explorer_ms")
    if "speedup" not in metrics:
        reason = "; ".join(errors) or "the benchmark returned no timing for this shape"
        return {
            "kind": "layer-speed",
            "config": cfg,
            "metrics": metrics,
            "status": "failed",
            "error": reason,
        }
    return {
        "kind": "layer-speed",
        "config": cfg,
        "metrics": metrics,
        "error": "; ".join(errors) or None,
    }
