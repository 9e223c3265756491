"""The whole-model table of the benchmark's Markdown (CPU only)."""

from __future__ import annotations

import pytest

from explorer.results.markdown.models import format_models


def test_models_table_and_ceiling():
    from explorer.bench.models import MODEL_SPECS, ceiling

    assert ceiling(10.0, 5.0, 2.5) == pytest.approx(10.0 / 7.5)
    assert ceiling(10.0, 12.0, 1.0) is None  # layers slower than the whole: not measured right
    rows = [
        dict(
            suite="models",
            model="llama-1b",
            dtype="bfloat16",
            batch=16,
            seq=1,
            dense_ms=5.0,
            speedup=0.99,
            control_speedup=0.96,
            dense_compiled_ms=2.0,
            speedup_compiled=1.01,
            control_speedup_compiled=0.98,
            speedup_default=1.06,
            control_speedup_default=1.02,
            ceiling=1.0,
            torch_error="NotImplementedError: expand",
            relerr=2e-3,
        ),
        dict(suite="matmul", m=1, n=1, k=1, dtype="float16"),
    ]
    text = format_models(rows)
    assert "llama-1b" in text and "fails: NotImplementedError" in text and "matmul" not in text
    header, _, row = text.splitlines()[:3]
    cells = dict(zip(header.split(" | "), row.split(" | "), strict=True))
    # the A/A control sits beside the eager speedup it qualifies
    assert cells["sparsify() eager"] == "0.99x" and cells["dense copy eager (A/A)"] == "0.96x"
    assert cells["sparsify() CUDA graphs"] == "1.01x (A/A 0.98x)"  # the graphs column's noise
    assert cells["sparsify() compile default"] == "1.06x (A/A 1.02x)"  # and the default mode's
    assert all(spec.runs for spec in MODEL_SPECS.values())


def test_a_torch_column_left_out_for_its_time_says_not_timed_and_how_slow():
    row = dict(suite="models", model="bert-base", dtype="float16", batch=8, seq=512, dense_ms=9.0)
    row["torch_error"] = (
        "one forward took 3024 ms, 243 times dense's 12.45 ms: too slow to time beside it"
    )
    text = format_models([row])
    assert "not timed: one forward took 3024 ms, 243 times dense's 12.45 ms" in text
    assert "fails" not in text
