"""No tracked file cites a document that lives outside the repository (issue 26 item 3).

The maintainers' notes (named in ``NOTES`` below) sit next to the repository, not in it, so a user who clones
it cannot open them. Code, configs and docs cite the papers and the authors' repositories instead
(docs/references.md). Every file ``git ls-files`` lists is searched; binary files are skipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from rs_testing import REPO

THIS = Path(__file__).resolve().relative_to(REPO).as_posix()
NOTES = [
    "methods" + "-core.md",
    "methods" + "-advanced.md",
    "extensions" + ".md",
    "DESIGN" + ".md",
]  # split: not cited here
NAMES = re.compile("|".join(re.escape(name) for name in NOTES))


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in listing.decode("utf-8", "surrogateescape").split("\0") if name]


def citations(name: str, text: str) -> list[str]:
    return [
        f"{name}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if NAMES.search(line)
    ]


def test_no_tracked_file_cites_a_document_outside_the_repository():
    hits = []
    for name in tracked_files():
        path = REPO / name
        if name == THIS or not path.is_file():  # deleted in the work tree, or a submodule
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        hits += citations(name, data.decode("utf-8", "replace"))
    advice = "cite the paper or the authors' repository instead (docs/references.md):"
    assert not hits, "\n".join([advice, *hits])


def test_the_check_sees_a_citation():
    core, advanced, extensions, design = NOTES
    assert citations("README.md", f"x\nsee {advanced} §4.2\n") == [f"README.md:2: see {advanced} §4.2"]
    assert citations("a.py", f"({design} 'Result files')") and citations("a.yaml", f"# {extensions} §1.7")
    assert citations("a.py", f'"""Largest radius ({core} §1.1)."""') and not citations("a.py", "core.md")
