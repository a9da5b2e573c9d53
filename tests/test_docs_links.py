"""The README, the docs/ pages and evidence/README.md link to files and headings that exist (the README was
split into docs/ pages, the evidence generators moved out of scripts/; a moved section or file must not
leave a link behind)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rs_testing import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "evidence" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, fence = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        match = re.match(r"^#+ (.*)", line)
        if match and not fence:
            out.add(slug(match.group(1)))
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(page):
    assert broken_links(page) == []


def test_the_readme_stays_short_and_every_docs_page_opens_with_a_summary():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250
    for page in PAGES[1:]:
        lines = page.read_text().splitlines()
        summary = lines[2]
        assert lines[0].startswith("# ") and lines[1] == "", page
        assert summary and not summary.startswith(("#", "|", "```")), page
