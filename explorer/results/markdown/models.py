"""The benchmark's whole-model table: dense against ``sparsify()`` in every execution mode."""

from __future__ import annotations

from explorer.results.markdown import markdown, speedup_cell

__all__ = ["error_cell", "format_models"]


def error_cell(error: str) -> str:
    """A cell for a column whose row holds an error instead of a time.

    A variant left out of the timing for its time (the models benchmark's
    ``compiled_pairs.too_slow_to_time``, whose reason starts "one forward took") reads "not
    timed"; any other error reads "fails", with the exception's name.

    Parameters
    ----------
    error : str
        The row's ``*_error`` value.

    Returns
    -------
    str
        The text before the first colon, after "not timed: " or "fails: ".

    Examples
    --------
    >>> error_cell("NotImplementedError: expand")
    'fails: NotImplementedError'
    >>> error_cell("one forward took 3024 ms, 243 times dense's 12.45 ms: too slow")
    "not timed: one forward took 3024 ms, 243 times dense's 12.45 ms"
    """
    left_out = error.startswith("one forward took")
    return ("not timed: " if left_out else "fails: ") + error.split(":")[0]


def format_models(rows: list[dict]) -> str:
    """Whole models, dense and sparse: eager, compile default and CUDA graphs, with the ceiling.

    Parameters
    ----------
    rows : list[dict]
        Benchmark rows; those of suite ``models`` are used.

    Returns
    -------
    str

    Examples
    --------
    >>> print(format_models([dict(suite="models", model="m", dtype="bfloat16", batch=4, seq=8,
    ...     dense_ms=2.0, speedup=1.1, control_speedup=0.97, relerr=1e-3)]).splitlines()[2])
    | m | bfloat16 | 4 x 8 | 2.000 | 1.10x | 0.97x | - | - | - | - | - | - | 1.0e-03 |
    """
    out = []
    for r in rows:
        if r.get("suite") != "models" or not r.get("model"):
            continue
        torch_cell = speedup_cell(r.get("torch_speedup"))
        if r.get("torch_error"):
            torch_cell = error_cell(r["torch_error"])
        # each compile mode's speed-up with its A/A (the dense copy timed beside) where measured
        comp = speedup_cell(r.get("speedup_compiled"), r.get("control_speedup_compiled"))
        if r.get("explorer_compiled_error"):
            comp = error_cell(r["explorer_compiled_error"])
        default = speedup_cell(r.get("speedup_default"), r.get("control_speedup_default"))
        if r.get("explorer_default_error"):
            default = error_cell(r["explorer_default_error"])
        keys = ("decode_speedup", "decode_speedup_default", "decode_speedup_compiled")
        dec = (
            " / ".join(speedup_cell(r.get(k)) for k in keys) if any(r.get(k) for k in keys) else "-"
        )
        out.append(
            [
                r["model"],
                r.get("dtype"),
                f"{r.get('batch')} x {r.get('seq')}",
                r.get("dense_ms"),
                speedup_cell(r.get("speedup")),
                speedup_cell(r.get("control_speedup")),
                default,
                r.get("dense_compiled_ms"),
                comp,
                dec,
                speedup_cell(r.get("ceiling_compiled") or r.get("ceiling")),
                torch_cell,
                "-" if r.get("relerr") is None else f"{r['relerr']:.1e}",
            ]
        )
    return markdown(
        [
            "model",
            "dtype",
            "batch x seq",
            "dense eager ms",
            "sparsify() eager",
            "dense copy eager (A/A)",
            "sparsify() compile default",
            "dense CUDA-graphs ms",
            "sparsify() CUDA graphs",
            "decode=True eager / default / graphs",
            "ceiling (estimate)",
            "torch 2:4 eager",
            "rel. error",
        ],
        out,
    )
