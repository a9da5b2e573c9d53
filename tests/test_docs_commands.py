"""Every command the README and the docs/ pages show keeps working as the code changes (issue 26 item 4): each
``train.py`` / ``certify.py`` / ``soft_labels.py`` command in a fenced bash block is parsed by Hydra's
override grammar and composed against ``conf/`` (a sweep with the first value of each swept key; placeholders
such as ``…``, ``<run>`` and ``$VAR`` replaced by a plain value), and each ``python -m
rs_lightning.cli.report`` command is parsed by the report's own argument parser. What they cannot check — that
a command does what its comment says — the tests of each feature do; the sweep-then-certify loop runs for real
in tests/cli/test_sweeps.py, ``scripts/reproduce.sh`` in tests/scripts/test_reproduce.py."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from rs_testing import CONF, REPO

from rs_lightning.cli import report

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ENTRY_POINTS = {"train.py": "train", "certify.py": "certify", "soft_labels.py": "soft_labels"}


def commands(page: Path) -> list[str]:
    """The commands of the page's bash blocks, continuation lines joined, comments kept for shlex."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        line = ""
        for part in block.splitlines():
            if part.rstrip().endswith("\\"):
                line += part.rstrip()[:-1] + " "
                continue
            out.append(line + part)
            line = ""
    return out


def arguments(command: str) -> list[str]:
    """Shell words with placeholders made concrete: <...>, …, $VAR / ${var} and [--optional] parts."""
    command = re.sub(r"<[^>]*>", "x", command).replace("…", "x")
    command = re.sub(r"\$\{?\w+\}?", "0", command)
    command = re.sub(r"\[(--[^]]*)\]", r"\1", command)
    return shlex.split(command, comments=True)


def hydra_commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for page in PAGES:
        for command in commands(page):
            words = arguments(command)
            for i, word in enumerate(words):
                if Path(word).name in ENTRY_POINTS:
                    found.append(
                        (
                            f"{page.name}: {command.strip()[:90]}",
                            ENTRY_POINTS[Path(word).name],
                            words[i + 1 :],
                        )
                    )
                    break
    return found


def report_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for command in commands(page):
            words = arguments(command)
            if "rs_lightning.cli.report" in words:
                found.append(
                    (
                        f"{page.name}: {command.strip()[:90]}",
                        words[words.index("rs_lightning.cli.report") + 1 :],
                    )
                )
    return found


HYDRA = hydra_commands()
REPORTS = report_commands()


def test_the_docs_show_commands_to_check():
    assert len(HYDRA) >= 40 and len(REPORTS) >= 8, (len(HYDRA), len(REPORTS))


@pytest.mark.parametrize(("where", "config", "overrides"), HYDRA, ids=[h[0] for h in HYDRA])
def test_each_entry_point_command_composes(where, config, overrides):
    """Catches: a command whose key was renamed or removed (``trainer.num_nodes=2`` was not a key of
    ``trainer=ddp``: the documented multi-node commands stopped at Hydra's "not in struct"), a value Hydra's
    grammar refuses (the unquoted ``checkpoint=…/0_sigma=0.25/…`` of a sweep folder), or a config group option
    that no longer exists."""
    overrides = [o for o in overrides if o != "-m"]
    parsed = OverridesParser.create().parse_overrides(overrides)
    first = [
        o.input_line
        if not o.is_sweep_override()
        else f"{o.get_key_element()}={next(o.sweep_string_iterator())}"
        for o in parsed
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        compose(config_name=config, overrides=first, return_hydra_config=True)


@pytest.mark.parametrize(("where", "argv"), REPORTS, ids=[r[0] for r in REPORTS])
def test_each_report_command_parses(where, argv, tmp_path):
    """Catches: a documented report option or subcommand that the parser no longer takes (argparse exits
    with its usage line; a valid command gets as far as the run folders, which do not exist here: one-line
    error)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = report.main(
                [str(tmp_path / a) if not a.startswith("-") and a.isupper() else a for a in argv]
            )
        except SystemExit as exit:
            pytest.fail(f"argparse refused {argv}: {stderr.getvalue()[-500:]} (status {exit.code})")
    assert status == 2 and stderr.getvalue().startswith("error: "), stderr.getvalue()
