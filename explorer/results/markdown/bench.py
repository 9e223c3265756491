"""The benchmark's Markdown: its tables, the target check and the whole page (CPU only).

Rows are the plain dicts :func:`explorer.bench.run_bench` yields.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from explorer.results.markdown import markdown, speedup_cell
from explorer.results.markdown.models import format_models
from explorer.results.markdown.serving import format_generate, format_host

__all__ = [
    "TARGETS",
    "format_decode",
    "format_mlp",
    "format_table",
    "format_targets",
    "render_markdown",
]

#: (label, suite, shape (m, n, k) or None, dtype, impl compared, minimum speedup over dense)
TARGETS = (
    ("fp16 4096x4096, 1024 tokens", "matmul", (4096, 1024, 4096), "float16", 1.3),
    ("bf16 4096x4096, 1024 tokens", "matmul", (4096, 1024, 4096), "bfloat16", 1.3),
    ("fp16 11008x4096, 4096 tokens", "matmul", (11008, 4096, 4096), "float16", 1.4),
    ("bf16 11008x4096, 4096 tokens", "matmul", (11008, 4096, 4096), "bfloat16", 1.4),
    ("fp16 8192^3", "matmul", (8192, 8192, 8192), "float16", 1.5),
    ("bf16 8192^3", "matmul", (8192, 8192, 8192), "bfloat16", 1.5),
    ("int8 8192^3", "matmul", (8192, 8192, 8192), "int8", 1.8),
    ("fp16 LLaMA-7B MLP block, 4096 tokens", "mlp", (11008, 4096, 4096), "float16", 1.35),
    ("bf16 LLaMA-7B MLP block, 4096 tokens", "mlp", (11008, 4096, 4096), "bfloat16", 1.35),
)
HOST_TARGET_US = 25.0


def _key(r: dict) -> tuple:
    return (
        r.get("suite"),
        r.get("label") or "",
        r.get("m"),
        r.get("n"),
        r.get("k"),
        r.get("dtype"),
    )


def _pivot(rows: list[dict]) -> OrderedDict:
    groups: OrderedDict = OrderedDict()
    for r in rows:
        if r.get("suite") not in ("matmul", "mlp") or r.get("model"):
            continue
        groups.setdefault(_key(r), {})[(r.get("impl"), r.get("mode"))] = r
    return groups


def _ms(g: dict, impl: str, mode: str):
    r = g.get((impl, mode))
    return r.get("ms") if r and r.get("status", "ok") == "ok" else None


def _speed(g: dict, impl: str, mode: str):
    d, s = _ms(g, "dense", mode), _ms(g, impl, mode)
    return d / s if d and s else None


def format_table(rows: list[dict]) -> str:
    """Dense vs torch eager cuSPARSELt vs the explorer's cached plans, eager and graph replay.

    Times are milliseconds per call; ``x`` columns are speedups over dense in the same mode.

    Parameters
    ----------
    rows : list[dict]
        Benchmark rows.

    Returns
    -------
    str

    Examples
    --------
    >>> rows = [dict(suite="matmul", m=8, n=8, k=8, dtype="float16", impl=i, mode=md, ms=t)
    ...         for i, t in (("dense", 1.0), ("explorer", 0.5)) for md in ("eager", "graph")]
    >>> print(format_table(rows).splitlines()[2])
    | matmul | 8x8 @ 8 tok | float16 | 1.000 | - | - | 0.500 | 2.00x | 1.000 | - | 0.500 | 2.00x | - | - |
    """
    header = [
        "suite",
        "shape (out x in @ tokens)",
        "dtype",
        "dense",
        "torch eager",
        "x",
        "explorer",
        "x",
        "dense graph",
        "torch graph",
        "explorer graph",
        "x",
        "host us torch",
        "host us explorer",
    ]
    out = []
    for key, g in _pivot(rows).items():
        suite, label, m, n, k, dtype = key
        shape = label or f"{m}x{k} @ {n} tok"
        sx = _speed(g, "explorer", "eager")
        tx = _speed(g, "torch", "eager")
        gx = _speed(g, "explorer", "graph")
        ht = (g.get(("torch", "eager")) or {}).get("host_us")
        he = (g.get(("explorer", "eager")) or {}).get("host_us")
        out.append(
            [
                suite,
                shape,
                dtype,
                _ms(g, "dense", "eager"),
                _ms(g, "torch", "eager"),
                f"{tx:.2f}x" if tx else None,
                _ms(g, "explorer", "eager"),
                f"{sx:.2f}x" if sx else None,
                _ms(g, "dense", "graph"),
                _ms(g, "torch", "graph"),
                _ms(g, "explorer", "graph"),
                f"{gx:.2f}x" if gx else None,
                f"{ht:.1f}" if ht else None,
                f"{he:.1f}" if he else None,
            ]
        )
    return markdown(header, out)


def format_targets(rows: list[dict]) -> str:
    """The benchmark's speed-up targets against the measured ones (explorer eager, torch eager, graph).

    Parameters
    ----------
    rows : list[dict]
        Benchmark rows.

    Returns
    -------
    str

    Examples
    --------
    >>> print(format_targets([]).splitlines()[2])
    | fp16 4096x4096, 1024 tokens | 1.30x | - | - | - | not measured |
    """
    piv = _pivot(rows)
    out = []
    for label, suite, (m, n, k), dtype, goal in TARGETS:
        g = next(
            (v for kk, v in piv.items() if kk[0] == suite and kk[2:] == (m, n, k, dtype)), None
        )
        if g is None:
            out.append([label, f"{goal:.2f}x", None, None, None, "not measured"])
            continue
        sx, tx, gx = (
            _speed(g, "explorer", "eager"),
            _speed(g, "torch", "eager"),
            _speed(g, "explorer", "graph"),
        )
        verdict = "met" if sx and sx >= goal else "missed"
        out.append(
            [
                label,
                f"{goal:.2f}x",
                f"{sx:.2f}x" if sx else None,
                f"{tx:.2f}x" if tx else None,
                f"{gx:.2f}x" if gx else None,
                verdict,
            ]
        )
    host = [
        r.get("host_us")
        for r in rows
        if r.get("impl") == "explorer"
        and r.get("mode") == "eager"
        and r.get("host_us")
        and r.get("suite") == "matmul"
    ]
    if host:
        host.sort()
        med = host[len(host) // 2]
        out.append(
            [
                f"host cost per sparse call (median of {len(host)} shapes)",
                f"<= {HOST_TARGET_US:.0f} us",
                f"{med:.1f} us",
                None,
                None,
                "met" if med <= HOST_TARGET_US else "missed",
            ]
        )
    return markdown(
        ["target", "goal", "explorer eager", "torch eager", "explorer graph", "verdict"], out
    )


def format_mlp(rows: list[dict]) -> str:
    """Every variant of the MLP block: time, speedup over the dense block and the fused one.

    Parameters
    ----------
    rows : list[dict]
        Benchmark rows; those of suite ``mlp`` are used.

    Returns
    -------
    str

    Examples
    --------
    >>> rows = [dict(suite="mlp", label="b", dtype="float16", impl=i, mode="eager", ms=t)
    ...         for i, t in (("dense", 2.0), ("dense fused", 1.6), ("explorer", 1.0))]
    >>> print(format_mlp(rows).splitlines()[4])
    | b | float16 | explorer | 1.000 | 2.00x | 1.60x | - | - |
    """
    out = []
    for key, g in _pivot(rows).items():
        if key[0] != "mlp":
            continue
        d, df = _ms(g, "dense", "eager"), _ms(g, "dense fused", "eager")
        impls = list(OrderedDict.fromkeys(impl for impl, _ in g))
        for impl in impls:
            ms, gms = _ms(g, impl, "eager"), _ms(g, impl, "graph")
            dg = _ms(g, "dense", "graph")
            out.append(
                [
                    key[1],
                    key[5],
                    impl,
                    ms,
                    f"{d / ms:.2f}x" if d and ms else None,
                    f"{df / ms:.2f}x" if df and ms else None,
                    gms,
                    f"{dg / gms:.2f}x" if dg and gms else None,
                ]
            )
    return markdown(
        [
            "block",
            "dtype",
            "implementation",
            "eager ms",
            "x dense",
            "x dense fused",
            "graph ms",
            "x dense (graph)",
        ],
        out,
    )


def _pct(v) -> str:
    return "-" if v is None else f"{v:.0%}"


def format_decode(rows: list[dict]) -> str:
    """The per-layer decode table: the decode kernel (16-bit and int8) and cuSPARSELt over dense.

    Parameters
    ----------
    rows : list[dict]
        Benchmark rows; those of suite ``decode`` and case ``layer`` are used.

    Returns
    -------
    str

    Examples
    --------
    >>> print(format_decode([dict(suite="decode", case="layer", label="4096x4096@1",
    ...     dtype="bfloat16", dense_ms=0.0163, decode_speedup=1.44, decode_int8_speedup=1.37,
    ...     cusparselt_speedup=0.27, decode_bw=0.69, dense_bw=0.85)]).splitlines()[2])
    | 4096x4096@1 | bfloat16 | 16.3 | 1.44x | 1.37x | 0.27x | 69% | 85% |
    """
    out = [
        [
            r["label"],
            r.get("dtype"),
            None if r.get("dense_ms") is None else f"{r['dense_ms'] * 1e3:.1f}",
            speedup_cell(r.get("decode_speedup")),
            speedup_cell(r.get("decode_int8_speedup")),
            speedup_cell(r.get("cusparselt_speedup")),
            _pct(r.get("decode_bw")),
            _pct(r.get("dense_bw")),
        ]
        for r in rows
        if r.get("suite") == "decode" and r.get("case") == "layer"
    ]
    return markdown(
        [
            "layer (out x in @ tokens)",
            "dtype",
            "dense us",
            "decode 2:4",
            "int8 2:4",
            "cuSPARSELt",
            "decode share of copy bandwidth",
            "dense share",
        ],
        out,
    )


def render_markdown(rows: list[dict], env: dict, command: str) -> str:
    """The whole generated Markdown page (targets, matmul table, CSR/BSR, kernel).

    Parameters
    ----------
    rows : list[dict]
        Benchmark rows.
    env : dict
        The environment (GPU, versions), listed at the top.
    command : str
        The command that generated the page, named at the top.

    Returns
    -------
    str
    """
    parts = [
        "# Benchmark: dense vs 2:4 sparse (generated)",
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        "Do not edit by hand: rerun the command.",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
    ]
    if any(r.get("suite") in ("matmul", "mlp", "unstructured", "kernel") for r in rows):
        parts += [
            "Layer rows: milliseconds per call (median of 7 CUDA-event timings of 20 back-to-back "
            "calls after warm-up); `graph` is CUDA-graph replay of the same calls; `x` is the "
            "speedup over dense cuBLAS in the same mode; host us is the host time to issue one "
            "call.",
            "",
        ]
    models = [r for r in rows if r.get("suite") == "models" and r.get("model")]
    if models:
        parts += [
            "## Whole models",
            "",
            "Every `nn.Linear` but `lm_head` pruned 2:4 (random weights), then `sparsify()`. "
            "Eager first, the variants in turn, 11 rounds of 3 forwards after an untimed one; "
            "compiled: each variant beside dense alone, timed so. `x`: median of the rounds' "
            "paired ratios to the dense masked model; `A/A`: an unchanged dense copy timed the "
            "same way. `ceiling`: the dense time with the sparse layers' measured time (estimate)."
            ' Compile default: `torch.compile(model)`; CUDA graphs: `mode="reduce-overhead"`, '
            'sparse models in `mode="graphs"`. Decode steps: 1 token per sequence, no KV cache. '
            "`torch 2:4`: `to_sparse_semi_structured`, eager. `decode=True` also offers each "
            "layer the explorer's decode kernel at 1 to 64 tokens.",
            "",
            format_models(rows),
            "",
        ]
        for r in models:
            for key, how in (
                ("timings", "sparsify()"),
                ("timings_decode", "sparsify(decode=True)"),
            ):
                if r.get(key):
                    parts += [
                        f"<details><summary>{r['model']} {r['dtype']}: per-layer times measured "
                        f"by {how}</summary>",
                        "",
                        r[key],
                        "",
                        "</details>",
                        "",
                    ]
    if any(r.get("suite") == "generate" for r in rows):
        parts += [
            "## `generate()`",
            "",
            "Hugging Face `model.generate`, greedy, a fixed prompt, tokens per second over the "
            "dense model's; first-token rows time a 1024-token prompt. `tokens equal to dense`: "
            "the share of generated tokens equal to the dense model's (random weights make "
            "near-ties, so it is low without being wrong).",
            "",
            format_generate(rows),
            "",
        ]
    if any(r.get("suite") == "host" for r in rows):
        parts += ["## Host time per call", "", format_host(rows), ""]
    if any(r.get("suite") == "decode" for r in rows):
        parts += [
            "## Decode: the explorer's 2:4 decode kernel per layer",
            "",
            "LLaMA-3-8B layer shapes at 1 to 64 tokens. Medians of CUDA-graph replays; each "
            "implementation cycles through copies of its weight that together hold three times "
            "the L2 cache, so weights come from memory as in a whole model. Ratios are over "
            "dense cuBLAS in the same run; `int8 2:4` is weight-only int8 (16-bit "
            "activations); `cuSPARSELt` is its default algorithm. Bandwidth shares count the "
            "bytes a call must move over the device-to-device copy bandwidth measured in the "
            "same run (read plus written; reads alone can go faster, so dense can exceed 100%).",
            "",
            format_decode(rows),
            "",
        ]
    if any(r.get("suite") in ("matmul", "mlp") for r in rows):
        parts += [
            "## Targets",
            "",
            format_targets(rows),
            "",
            "## Matmuls and the MLP block",
            "",
            format_table(rows),
            "",
        ]
    if any(r.get("suite") == "mlp" for r in rows):
        parts += [
            "## The MLP block, every variant",
            "",
            "`dense fused` stacks gate and up into one cuBLAS call, the same fusion as "
            "`explorer` (`SparseGatedMLP`, what `sparsify` builds); `explorer per-layer` is "
            "three tuned `SparseLinear` (`fuse_mlp=False`).",
            "",
            format_mlp(rows),
            "",
        ]
    uns = [r for r in rows if r.get("suite") == "unstructured"]
    if uns:
        parts += [
            "## Unstructured CSR and block-sparse BSR (4096x4096 @ 1024 tokens, fp16)",
            "",
            markdown(
                ["format", "sparsity", "dense ms", "sparse ms", "speedup", "status"],
                [
                    [
                        r["impl"],
                        f"{r['sparsity']:.1%}",
                        r.get("dense_ms"),
                        r.get("ms"),
                        f"{r['speedup']:.2f}x" if r.get("speedup") else None,
                        r.get("status") if r.get("status") == "ok" else r.get("error"),
                    ]
                    for r in uns
                ],
            ),
            "",
        ]
    ker = [r for r in rows if r.get("suite") == "kernel" and r.get("status") == "ok"]
    if ker:
        parts += [
            "## N:M validity kernel vs device copy",
            "",
            markdown(
                ["kernel", "ms", "TB/s read", "copy TB/s (read+write)", "share"],
                [
                    [r["label"], r["ms"], r["tbps"], r["copy_tbps"], f"{r['fraction_of_copy']:.0%}"]
                    for r in ker
                ],
            ),
            "",
        ]
    failed = [r for r in rows if r.get("status") == "failed"]
    if failed:
        parts += [
            "## Failed rows",
            "",
            markdown(
                ["suite", "case", "impl", "mode", "error"],
                [
                    [
                        r.get("suite"),
                        r.get("label")
                        or f"{r.get('m')}x{r.get('k')}@{r.get('n')} {r.get('dtype')}",
                        r.get("impl"),
                        r.get("mode"),
                        (r.get("error") or "")[:120],
                    ]
                    for r in failed
                ],
            ),
            "",
        ]
    return "\n".join(parts)
