"""The repository stays readable: no production file over 450 lines (a larger one holds more than one concern;
split it by concern, as rs_lightning/runs/ and analysis/{run_view,protocol,compare}.py are), and
docs/layout.md's tree is the tree as it is (every top-level folder, entry point and rs_lightning subpackage
and module has its line, every path it names exists), as is evidence/README.md's list of studies."""

from __future__ import annotations

import re
import shutil
import subprocess

from rs_testing import REPO

LIMIT = 450


def test_no_production_file_is_over_450_lines():
    long = {
        str(path.relative_to(REPO)): n
        for path in (REPO / "rs_lightning").rglob("*.py")
        if (n := len(path.read_text().splitlines())) > LIMIT
    }
    assert not long, long


def tree_paths() -> list[str]:
    """The paths docs/layout.md's tree block names: the page's first plain fenced block, one entry a line
    (the path, then two or more spaces and what it holds; indented lines continue the entry above)."""
    block = re.search(r"^```\n(.*?)^```$", (REPO / "docs" / "layout.md").read_text(), re.S | re.M).group(1)
    return [re.split(r"\s{2,}", line)[0] for line in block.splitlines() if line and not line[0].isspace()]


def repository_files() -> list[str]:
    """The files of the repository as git sees them (tracked, or new and not ignored); without git, every
    file outside hidden folders, folders .gitignore names and *.egg-info."""
    if shutil.which("git") is not None and (REPO / ".git").exists():
        command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        listing = subprocess.run(command, cwd=REPO, capture_output=True, check=True).stdout.decode()
        return [name for name in listing.split("\0") if name and (REPO / name).is_file()]
    patterns = (REPO / ".gitignore").read_text().splitlines()
    ignored = {line.strip("/") for line in patterns if line.endswith("/")}
    return [
        str(path.relative_to(REPO))
        for path in REPO.rglob("*")
        if path.is_file()
        and not any(
            part.startswith(".") or part in ignored or part.endswith(".egg-info")
            for part in path.relative_to(REPO).parts[:-1]
        )
    ]


def test_the_layout_tree_names_every_folder_and_module_and_only_what_exists():
    """Catches a folder added, moved or removed without its line in docs/layout.md (the scripts/ line had
    come to describe evidence runs that scripts/ no longer held alone)."""
    named = tree_paths()
    assert len(named) == len(set(named)), "a path has two lines"
    missing_on_disk = [path for path in named if not (REPO / path).exists()]
    assert not missing_on_disk, f"docs/layout.md names paths that do not exist: {missing_on_disk}"
    files = repository_files()
    top = {name.split("/")[0] + "/" for name in files if "/" in name and not name.startswith(".")}
    entry_points = {name for name in files if "/" not in name and name.endswith(".py")}
    package = REPO / "rs_lightning"
    subpackages = {f"rs_lightning/{d.name}/" for d in package.iterdir() if (d / "__init__.py").is_file()}
    modules = {f"rs_lightning/{f.name}" for f in package.glob("*.py") if f.name != "__init__.py"}
    unlisted = sorted((top | entry_points | subpackages | modules) - set(named))
    assert not unlisted, f"docs/layout.md's tree has no line for {unlisted}"
    assert {"evidence/", "tools/", "scripts/", "bench/"} <= top  # the folders by who runs them


def test_every_study_has_its_generators_in_evidence_and_its_outputs_in_docs_results():
    """evidence/<study>/ holds the scripts that rebuild docs/results/<study>/, one folder of each per study,
    and evidence/README.md names each study and each of its scripts."""
    studies = {d.name for d in (REPO / "evidence").iterdir() if d.is_dir() and d.name[0] not in "._"}
    studies.discard("common")  # the helpers the MNIST studies share
    outputs = {d.name for d in (REPO / "docs" / "results").iterdir() if d.is_dir()}
    assert studies == outputs
    readme = (REPO / "evidence" / "README.md").read_text()
    for study in studies:
        assert f"| `{study}/` |" in readme, study
        for script in (REPO / "evidence" / study).iterdir():
            if script.is_file():
                assert f"`{script.name}`" in readme, (study, script.name)
