"""The package states lower bounds; the exact versions live in constraints.txt, which make venv and CI use.

A library pinned to ``torch==2.14.1`` cannot be installed beside a newer torch (or a CUDA build whose version
differs): pip would have to replace the user's torch. The dry run below puts a newer torch and torchvision in
front of the installed ones (their metadata only, on PYTHONPATH) and asks pip, offline and without the
machine's pip configuration, what ``pip install .`` would do: install this package alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

from rs_testing import REPO

PINNED = re.compile(r"^[A-Za-z0-9_.\-\[\]]+\s*===?\s*[^,;]+$")


def requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"].values()
    return [*project["dependencies"], *(r for extra in extras for r in extra)]


def test_no_dependency_is_pinned_exactly_and_constraints_pin_torch():
    assert not [r for r in requirements() if PINNED.match(r.strip())]
    constraints = (REPO / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in constraints if line and not line.startswith("#"))
    assert pins["torch"].startswith("2.14.1") and pins["torchvision"].startswith("0.29.1")
    makefile = (REPO / "Makefile").read_text()
    assert makefile.count("-c constraints.txt") == 2  # torch first, then the package and its extras


def fake_distribution(folder, name: str, version: str) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_pip_install_resolves_against_an_installed_newer_torch(tmp_path):
    """Catches an exact pin (or an upper bound) on torch or torchvision: pip then reports a conflict with
    the installed 2.99 / 0.99, or would replace them."""
    project = tmp_path / "project"  # pyproject.toml and README.md hold all the metadata pip reads
    (project / "rs_lightning").mkdir(parents=True)
    (project / "rs_lightning" / "__init__.py").write_text("")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, project / name)
    newer = tmp_path / "newer"
    newer.mkdir()
    fake_distribution(newer, "torch", "2.99.0")
    fake_distribution(newer, "torchvision", "0.99.0")
    report = tmp_path / "report.json"
    env = os.environ | {"PYTHONPATH": str(newer), "PIP_CONFIG_FILE": os.devnull}
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--no-index",
        "--no-build-isolation",
        "--quiet",
        "--report",
        str(report),
        str(project),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    installs = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert installs == ["rs-lightning"]
