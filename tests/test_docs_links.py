"""Every relative link in README.md and docs/*.md points at a file that exists, and every
``#anchor`` into a Markdown page names one of its headings (GitHub's heading slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A link's or an image's target: ``[text](target)`` or ``[text](target "title")``.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: A reference definition: ``[name]: target``.
REFERENCE = re.compile(r"(?m)^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
FENCE = re.compile(r"(?ms)^\s*(```|~~~).*?^\s*\1")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code, where a link is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.

    Examples
    --------
    >>> slug("Measured per layer (H100, commit 13196b2, one run)")
    'measured-per-layer-h100-commit-13196b2-one-run'
    >>> slug("At 2:4, in one table"), slug("The `decode=True` path")
    ('at-24-in-one-table', 'the-decodetrue-path')
    """
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown page: its headings' slugs, repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"(?m)^#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file is missing or whose anchor names no heading."""
    text = page.read_text(encoding="utf-8")
    prose = _prose(text)
    problems = []
    for target in LINK.findall(prose) + REFERENCE.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # https:, mailto: and the like
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append(f"{page.name}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text("utf-8")):
            problems.append(f"{page.name}: {target} (no heading #{anchor} in {file.name})")
    return problems


def test_the_checker_finds_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("# Title\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-section) [ok](#here) [web](https://example.org/x.md)\n"
        "[gone](missing.md) [bad anchor](there.md#nowhere) ![gone](pic.png)\n"
        "`[in code](nowhere.md)`\n\n```\n[in a block](nowhere.md)\n```\n\n## Here\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: there.md#nowhere (no heading #nowhere in there.md)",
        "page.md: pic.png (no such file)",
    ]


def test_the_pages_are_found():
    names = {p.name for p in PAGES}
    assert {"README.md", "install.md", "gpu.md", "accuracy.md"} <= names, names


def test_the_readme_links_into_the_docs():
    targets = LINK.findall(_prose((ROOT / "README.md").read_text(encoding="utf-8")))
    assert len([t for t in targets if t.startswith("docs/")]) >= 10, targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    problems = broken_links(page)
    assert not problems, "\n".join(problems)
