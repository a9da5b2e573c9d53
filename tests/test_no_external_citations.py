"""No tracked file cites a document that lives outside the repository.

The maintainers' notes (named in ``NOTES`` below) and this project's issue tracker sit next to the repository,
not in it, so a user who clones it cannot open them: a file says the reason itself instead of "issue N". An
issue of another project, named with its repository (``owner/repo issue #N``), is a real link and allowed.
Code, configs and docs cite the papers and the authors' repositories instead (docs/references.md). Every file
``git ls-files`` lists is searched; binary files are skipped.
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
TRACKER = re.compile(r"\bissues?\s+#?\d", re.IGNORECASE)
OTHER_PROJECT = re.compile(r"[\w.-]+/[\w.-]+ issues?\s+#\d", re.IGNORECASE)  # owner/repo issue #N


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in listing.decode("utf-8", "surrogateescape").split("\0") if name]


def citations(name: str, text: str) -> list[str]:
    return [
        f"{name}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if NAMES.search(line) or TRACKER.search(OTHER_PROJECT.sub("", line))
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
    advice = (
        "cite the paper or the authors' repository instead (docs/references.md); for this project's issues, "
        "say the reason itself:"
    )
    assert not hits, "\n".join([advice, *hits])


def test_the_check_sees_a_citation():
    core, advanced, extensions, design = NOTES
    assert citations("README.md", f"x\nsee {advanced} §4.2\n") == [f"README.md:2: see {advanced} §4.2"]
    assert citations("a.py", f"({design} 'Result files')") and citations("a.yaml", f"# {extensions} §1.7")
    word = "issue"  # split, so that this file holds no tracker reference itself
    tracker = [f"x  # {word} 22: was", f"{word.title()} 24's", f"({word}s 8 and 9)", f"see {word} #3"]
    assert all(citations("a.py", line) for line in tracker)
    assert not citations("a.yaml", f"# reports it (Hadisalman/smoothing-adversarial {word} #1).")
    assert not citations("a.md", "quoted in github.com/Hadisalman/smoothing-adversarial/issues/2")
    assert not citations("a.md", f"the {word} is 3-fold; t{word} 5")
    assert citations("a.py", f'"""Largest radius ({core} §1.1)."""') and not citations("a.py", "core.md")
