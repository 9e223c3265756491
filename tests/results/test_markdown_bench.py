"""The benchmark's table code (CPU only: rows are plain dicts)."""

from __future__ import annotations

import pytest

from explorer.bench import main
from explorer.results.markdown import markdown
from explorer.results.markdown.bench import format_table, format_targets


def _rows(dense=1.0, torch_=4.0, explorer=0.7, graph=0.6, host=15.0, shape=(4096, 1024, 4096)):
    m, n, k = shape
    rows = []
    for impl, ms in (("dense", dense), ("torch", torch_), ("explorer", explorer)):
        rows.append(
            dict(
                suite="matmul",
                m=m,
                n=n,
                k=k,
                dtype="float16",
                impl=impl,
                mode="eager",
                ms=ms,
                host_us=host if impl == "explorer" else 400.0,
                status="ok",
            )
        )
        rows.append(
            dict(
                suite="matmul",
                m=m,
                n=n,
                k=k,
                dtype="float16",
                impl=impl,
                mode="graph",
                ms=graph if impl != "dense" else dense,
                status="ok",
            )
        )
    return rows


def test_markdown():
    assert markdown(["a"], [[None], [1.23456]]).splitlines() == [
        "| a |",
        "| --- |",
        "| - |",
        "| 1.235 |",
    ]


def test_format_table_speedups():
    line = format_table(_rows()).splitlines()[2]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:3] == ["matmul", "4096x4096 @ 1024 tok", "float16"]
    assert cells[5] == "0.25x" and cells[7] == "1.43x" and cells[11] == "1.67x"
    assert cells[12] == "400.0" and cells[13] == "15.0"


def test_failed_rows_show_as_dash():
    rows = _rows()
    rows[4]["status"] = "failed"  # explorer eager
    cells = [c.strip() for c in format_table(rows).splitlines()[2].strip("|").split("|")]
    assert cells[6] == "-" and cells[7] == "-"


def test_targets_verdicts():
    text = format_targets(_rows())
    first = text.splitlines()[2]
    assert "1.43x" in first and first.rstrip(" |").endswith("met")
    assert "not measured" in text.splitlines()[4]
    assert "host cost" in text.splitlines()[-1] and "met" in text.splitlines()[-1]
    slow = format_targets(_rows(explorer=1.2))
    assert slow.splitlines()[2].rstrip(" |").endswith("missed")


def test_cli_rejects_bad_shape(capsys):
    with pytest.raises(SystemExit):
        main(["--shapes", "4096x4096"])
    assert "OUTxTOKENSxIN" in capsys.readouterr().err


def test_models_table_and_ceiling():
    from explorer.bench.models import MODEL_SPECS, ceiling
    from explorer.results.markdown.bench import format_models

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
    from explorer.results.markdown.bench import format_models

    row = dict(suite="models", model="bert-base", dtype="float16", batch=8, seq=512, dense_ms=9.0)
    row["torch_error"] = (
        "one forward took 3024 ms, 243 times dense's 12.45 ms: too slow to time beside it"
    )
    text = format_models([row])
    assert "not timed: one forward took 3024 ms, 243 times dense's 12.45 ms" in text
    assert "fails" not in text
