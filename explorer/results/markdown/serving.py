"""The benchmark's serving tables: ``generate()`` tokens per second and host time per call."""

from __future__ import annotations

from explorer.results.markdown import markdown, speedup_cell

__all__ = ["format_generate", "format_host"]


def format_generate(rows: list[dict]) -> str:
    """The ``generate()`` table: tokens/s dense and the speedups of the sparse variants.

    The speedups of an unchanged dense copy (the A/A control: the noise of equal work),
    ``sparsify()`` and ``decode=True``, with their token agreement; time to first token rows last.

    Parameters
    ----------
    rows : list[dict]
        Benchmark rows; those of suite ``generate`` are used.

    Returns
    -------
    str

    Examples
    --------
    >>> print(format_generate([dict(suite="generate", model="m", dtype="bfloat16", batch=8,
    ...     cache="static", new_tokens=128, dense_tok_s=900.0, explorer_speedup=1.1,
    ...     decode_speedup=1.3, explorer_agreement=0.9, control_speedup=1.01)]).splitlines()[2])
    | m | bfloat16 | 8 | static | 900 | 1.01x | 1.10x | 1.30x | 0.90 / - |
    """
    out = []
    for r in rows:
        if r.get("suite") != "generate" or r.get("new_tokens") == 1:
            continue
        agree = " / ".join(
            "-" if r.get(k) is None else f"{r[k]:.2f}"
            for k in ("explorer_agreement", "decode_agreement")
        )
        out.append(
            [
                r.get("model"),
                r.get("dtype"),
                r.get("batch"),
                r.get("cache"),
                "-" if r.get("dense_tok_s") is None else f"{r['dense_tok_s']:.0f}",
                speedup_cell(r.get("control_speedup")),
                speedup_cell(r.get("explorer_speedup")),
                speedup_cell(r.get("decode_speedup")),
                agree,
            ]
        )
    for r in rows:
        if r.get("suite") == "generate" and r.get("new_tokens") == 1:
            out.append(
                [
                    r.get("model"),
                    r.get("dtype"),
                    r.get("batch"),
                    f"first token, {r.get('seq')}-token prompt",
                    f"{r.get('dense_ttft_ms', 0):.2f} ms",
                    speedup_cell(r.get("control_ttft_speedup")),
                    speedup_cell(r.get("explorer_ttft_speedup")),
                    speedup_cell(r.get("decode_ttft_speedup")),
                    "-",
                ]
            )
    return markdown(
        [
            "model",
            "dtype",
            "batch",
            "cache",
            "dense tokens/s",
            "dense copy (A/A)",
            "sparsify()",
            "decode=True",
            "tokens equal to dense",
        ],
        out,
    )


def format_host(rows: list[dict]) -> str:
    """The host-cost table: microseconds per call, dense and the explorer's.

    Parameters
    ----------
    rows : list[dict]
        Benchmark rows; those of suite ``host`` are used.

    Returns
    -------
    str

    Examples
    --------
    >>> print(format_host([dict(suite="host", label="decode launch", dtype="bfloat16", n=1,
    ...     dense_host_us=25.0, explorer_host_us=9.0)]).splitlines()[2])
    | decode launch | bfloat16 | 1 | 25.0 | 9.0 |
    """
    out = [
        [
            r.get("label"),
            r.get("dtype"),
            r.get("n"),
            f"{r['dense_host_us']:.1f}",
            f"{r['explorer_host_us']:.1f}",
        ]
        for r in rows
        if r.get("suite") == "host" and r.get("dense_host_us") is not None
    ]
    return markdown(
        ["host time per call", "dtype", "tokens", "dense / torch us", "explorer us"], out
    )
