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
