"""The benchmark page's ``generate()`` and host-cost sections (CPU only: rows are plain dicts)."""

from __future__ import annotations

from explorer.results.markdown.bench import render_markdown
from explorer.results.markdown.serving import format_generate, format_host

GENERATE = [
    dict(
        suite="generate",
        model="m",
        dtype="bfloat16",
        batch=8,
        cache="static",
        new_tokens=128,
        dense_tok_s=3000.0,
        control_speedup=1.01,
        explorer_speedup=0.93,
        decode_speedup=1.06,
        explorer_agreement=0.2,
        decode_agreement=0.3,
    ),
    dict(
        suite="generate",
        model="m",
        dtype="bfloat16",
        batch=1,
        seq=1024,
        new_tokens=1,
        dense_ttft_ms=10.08,
        explorer_ttft_speedup=0.91,
        decode_ttft_speedup=None,
    ),
]
HOST = [
    dict(suite="host", label="decode launch 1024x1024", dtype="bfloat16", n=1,
         dense_host_us=23.4, explorer_host_us=23.0),
]  # fmt: skip


def test_generate_rows_first_then_the_first_token_rows():
    lines = format_generate(GENERATE).splitlines()
    assert lines[0].split(" | ")[5] == "dense copy (A/A)"
    assert lines[2] == "| m | bfloat16 | 8 | static | 3000 | 1.01x | 0.93x | 1.06x | 0.20 / 0.30 |"
    # a row without the control (older runs) shows "-" there
    assert lines[3] == (
        "| m | bfloat16 | 1 | first token, 1024-token prompt | 10.08 ms | - | 0.91x | - | - |"
    )


def test_host_rows_skip_what_was_not_measured():
    rows = [*HOST, dict(suite="host", label="x", dtype="bfloat16", n=1, dense_host_us=None)]
    assert format_host(rows).splitlines()[2:] == [
        "| decode launch 1024x1024 | bfloat16 | 1 | 23.4 | 23.0 |"
    ]


def test_the_page_shows_generate_and_host_and_no_layer_sections_for_them():
    page = render_markdown([*GENERATE, *HOST], {"device": "H100"}, "bench --suites generate,host")
    assert "## `generate()`" in page and "| m | bfloat16 | 8 | static | 3000 |" in page
    assert "## Host time per call" in page and "| decode launch 1024x1024 |" in page
    # no matmul rows: none of the layer tables, targets or their explanation
    assert "Layer rows:" not in page and "## Targets" not in page
