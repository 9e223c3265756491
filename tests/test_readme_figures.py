"""Every speed figure the README quotes is a measured row of the shipped reference database.

A figure such as ``1.18x`` must equal (to the digits quoted) a speedup recorded in
``explorer/data/reference.db`` by a row that names the commit it was measured on, and the
README must name that commit and that GPU, so a reader can tell where the number comes from.
The same holds for the docs sections that hold the tables the README's figures come from
(``FIGURE_PAGES``), heading by heading: a figure must be a row of a commit and GPU named under
the innermost heading it stands under, so that a diagnostic's ratio cannot pass for a row of some
other commit the long section also names.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

import pytest

from explorer.results.store.location import reference_path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The docs sections that hold the speed tables the README links to, by page and heading.
FIGURE_PAGES = {
    "docs/gpu.md": (
        "What was measured",
        "Measured per layer (H100, commit 13196b2, one run)",
    ),
    "docs/gpu-runs.md": ("Whole models in every mode: earlier runs",),
}
#: Ratios under those headings that are not rows of the database, each with what it is, by page
#: and innermost heading.
NOT_MEASURED = {
    ("docs/gpu-runs.md", "An earlier run (H100, commit cc09f94)"): {
        "1.38": "the 8B-like model's decode step bounded by its weight bytes alone (an estimate)",
        "1.07": "a ceiling (estimate) column entry, computed from layer times, not a speedup row",
        "0.89": "the BERT-like model before the fix, dced48c, read off a printed table (modes table)",
        "0.78": "the same BERT-like rows of dced48c, compiled (modes table)",
    },
    (
        "docs/gpu.md",
        "Two H200s at commits eda6ef1 and 5eea9bd: the whole 32-layer model's `generate()`, "
        "where its step goes, host time",
    ): {
        "1.27": "generate() of the 32-layer model on 4ab5443 (H100), read off its log",
    },
    (
        "docs/gpu.md",
        "The benchmark's rounds on an H200 (commit 515775e): all four models",
    ): {
        "1.25": "the 8B-like model's decode=True target under CUDA graphs",
    },
    (
        "docs/gpu.md",
        "The guard change on an H200 (commits 45daee3 and 9d99c85): all four models",
    ): {
        "1.25": "the 8B-like model's decode=True target under CUDA graphs",
        "1.007": "compiled_step_guards.py on 45daee3, a diagnostic's paired ratio (A/A)",
        "1.009": "the same diagnostic's A/A at 1 x 1",
        "0.977": "the same diagnostic in a second process, 1 x 1",
        "0.961": "the same, its second reading at 1 x 1",
        "0.988": "the same, 16 x 1",
        "0.940": "a one-off variant holding the dense weight as nn.Parameter, not shipped",
    },
    (
        "docs/gpu.md",
        "Compiled decode steps: the graph is the dense one's, the difference is guards (H200, "
        "commits e0d835c and 05e182d)",
    ): {
        "0.930": "a diagnostic's paired ratio (e0d835c: a compiled step beside its nn.Linear twin)",
        "0.938": "the same diagnostic on 05e182d, 16 x 1",
        "0.932": "a diagnostic on e0d835c, dense, sparsified and A/A compiled in one process",
    },
    (
        "docs/gpu.md",
        "The H200 run (commits 21bbbd4 and 681c491): four models with no tuning table, "
        "`generate()`, host time",
    ): {
        "0.94": "models_in_modes.py on 6d043b1, a decode=True reading not recorded",
    },
    (
        "docs/gpu.md",
        "Two H200s at commits 2ea12b4 and a86a03c: eager calls through the compiled operator",
    ): {
        "1.08": "generate() at batch 1 on a86a03c, decode=True, off the log of a run cut short",
        "0.94": "the same log, sparsify()",
        "0.96": "the same log, an A/A copy",
    },
    (
        "docs/gpu.md",
        "Two H200s at commit 5b0d725: the suite in full on the landed commit, Qwen2-like float16 "
        "decode steps",
    ): {
        "0.951": "a diagnostic on 5b0d725: the float16 Phi-3-like compiled step, lowest of 12 pairs",
        "0.983": "the same diagnostic, highest of the 12 pairs",
        "0.986": "the same diagnostic: 8B-like and Qwen2-like bf16, sparsified for decode alone",
        "1.041": "the same, highest",
        "1.085": "the same diagnostic: the 8B-like compiled 16 x 1 step, every layer traced dense",
        "1.123": "the same, highest",
    },
    ("docs/gpu-runs.md", "How the targets stood before 5b0d725"): {
        "1.08": "generate() at batch 1 on a86a03c, decode=True, off the log of a run cut short",
    },
    ("docs/gpu.md", "Measured per layer (H100, commit 13196b2, one run)"): {
        "1.78": "16/9, the 16-bit decode kernel's limit over dense",
        "3.2": "16/5, the int8 decode kernel's limit over dense",
        "2.5": "the int8 decode kernel's target",
    },
}
#: A speed ratio as prose writes it: 1.18x, 0.80x, 1.2×.
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)\s?[x×](?!\w)")


def readme_figures(text: str) -> list[str]:
    """The speed figures quoted in ``text``, as written.

    Examples
    --------
    >>> readme_figures("1.02x / 1.18x, a 2x bound, 4x1024 tokens, 0.8× here")
    ['1.02', '1.18', '0.8']
    """
    return FIGURE.findall(text)


def measured_speedups(db: Path) -> list[dict]:
    """Every speedup recorded in ``db``: value, metric, commit, GPU and the row's label."""
    found = []
    # immutable: SQLite writes no -wal/-shm files beside the shipped database
    con = sqlite3.connect(f"file:{quote(str(Path(db).resolve()))}?mode=ro&immutable=1", uri=True)
    try:
        rows = con.execute(
            "SELECT id, kind, config, metrics, provenance, gpu FROM results WHERE status = 'ok'"
        ).fetchall()
    finally:
        con.close()
    for row_id, kind, config, metrics, provenance, gpu in rows:
        metrics, provenance = json.loads(metrics or "{}"), json.loads(provenance or "{}")
        label = json.loads(config or "{}").get("label", kind)
        for key, value in metrics.items():
            if "speedup" in key and isinstance(value, int | float):
                found.append(
                    {
                        "id": row_id,
                        "value": float(value),
                        "metric": key,
                        "commit": provenance.get("commit"),
                        "gpu": gpu or provenance.get("gpu") or "",
                        "label": label,
                    }
                )
    return found


def section(text: str, heading: str) -> str:
    r"""The section of Markdown ``text`` under ``heading``, heading included, up to the next
    heading of the same or a higher level ("" when there is no such heading).

    Examples
    --------
    >>> section("# T\n## A\none\n### B\ntwo\n## C\nthree\n", "A")
    '## A\none\n### B\ntwo\n'
    """
    found = re.search(rf"(?m)^(#+) {re.escape(heading)}[ \t]*$", text)
    if found is None:
        return ""
    level = len(found.group(1))
    end = re.compile(rf"(?m)^#{{1,{level}}} ").search(text, found.end())
    return text[found.start() : end.start() if end else len(text)]


def subsections(text: str) -> list[tuple[str, str]]:
    r"""``(heading, text)`` for each heading of Markdown ``text``: the text under it, heading
    included, up to the next heading of any level (text before the first heading is left out).

    Examples
    --------
    >>> subsections("# T\nintro\n## A\none\n### B\ntwo\n")
    [('T', '# T\nintro\n'), ('A', '## A\none\n'), ('B', '### B\ntwo\n')]
    """
    heads = list(re.finditer(r"(?m)^#+ (.*?)[ \t]*$", text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return [(h.group(1), text[h.start() : end]) for h, end in zip(heads, ends, strict=True)]


def _gpu_named(gpu: str, text: str) -> bool:
    """Whether ``text`` names the GPU by its model (``H100`` for "NVIDIA H100 80GB HBM3")."""
    models = re.findall(r"\b[A-Z]\d{2,4}[A-Za-z]*\b", gpu)
    return any(m in text for m in models)


def test_the_pattern_finds_ratios_only():
    assert readme_figures("4 x 1024 tokens, 2x bound, 1.34x and 0.80 x") == ["1.34", "0.80"]


@pytest.fixture(scope="module")
def speedups():
    db = reference_path()
    if db is None:
        pytest.fail("explorer/data/reference.db is missing; it ships with the package")
    return measured_speedups(db)


def _problems(figures: list[str], text: str, speedups: list[dict], where: str) -> list[str]:
    """What is wrong with each figure of ``text``: unmeasured, or measured but not named there."""
    problems = []
    for figure in figures:
        digits = len(figure.split(".")[1])
        close = [s for s in speedups if abs(s["value"] - float(figure)) <= 0.5 * 10**-digits]
        labelled = [
            s for s in close if s["commit"] and s["commit"] in text and _gpu_named(s["gpu"], text)
        ]
        if not close:
            problems.append(f"{figure}x: no speedup in the reference database rounds to it")
        elif not labelled:
            rows = ", ".join(
                f"#{s['id']} {s['label']} ({s['commit'] or 'no commit'})" for s in close
            )
            problems.append(
                f"{figure}x: matches {rows}, but none is named with its commit and GPU in {where}"
            )
    return problems


def test_every_readme_speed_figure_is_a_measured_row(speedups):
    text = README.read_text(encoding="utf-8")
    figures = readme_figures(text)
    assert figures, "the README quotes no speed figure; update this test if that is intended"
    problems = _problems(figures, text, speedups, "the README")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("page", "heading"),
    [(page, heading) for page, headings in FIGURE_PAGES.items() for heading in headings],
)
def test_every_speed_figure_of_the_docs_tables_is_a_measured_row(speedups, page, heading):
    text = section((ROOT / page).read_text(encoding="utf-8"), heading)
    assert text, f"{page} has no section {heading!r}; update FIGURE_PAGES if it moved"
    assert readme_figures(text), f"{page}, {heading!r} quotes no speed figure; update FIGURE_PAGES"
    problems, measured = [], 0
    for sub, body in subsections(text):
        figures = readme_figures(body)
        bounds = NOT_MEASURED.get((page, sub), {})
        missing = sorted(set(bounds) - set(figures))
        assert not missing, f"NOT_MEASURED lists {missing}, which {page}, {sub!r} no longer quotes"
        rows = [f for f in figures if f not in bounds]
        measured += len(rows)
        problems += _problems(rows, body, speedups, f"{page}, under {sub!r}")
    assert measured, f"{page}, {heading!r} quotes no measured speed figure"
    assert not problems, "\n".join(problems)


def test_every_not_measured_entry_names_a_heading_of_a_figure_page():
    headings = {
        (page, sub)
        for page, tops in FIGURE_PAGES.items()
        for top in tops
        for sub, _ in subsections(section((ROOT / page).read_text(encoding="utf-8"), top))
    }
    assert not set(NOT_MEASURED) - headings, set(NOT_MEASURED) - headings


def test_the_readme_links_to_every_section_that_holds_its_figures():
    text = README.read_text(encoding="utf-8")
    for page in FIGURE_PAGES:
        assert f"]({page}#" in text, f"the README does not link to {page}"
