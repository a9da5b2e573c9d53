"""Every command the README and the docs/ pages show keeps working as the code changes: each
``train.py`` / ``certify.py`` / ``soft_labels.py`` command in a fenced bash block is parsed by Hydra's
override grammar and composed against ``conf/`` (a sweep with the first value of each swept key; placeholders
such as ``…``, ``<run>`` and ``$VAR`` replaced by a plain value), and each ``python -m
rs_lightning.cli.report`` command is parsed by the report's own argument parser. What they cannot check — that
a command does what its comment says — the tests of each feature do; the sweep-then-certify loop runs for real
in tests/cli/test_sweeps.py, ``scripts/reproduce.sh`` in tests/scripts/test_reproduce.py."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from rs_testing import CONF, REPO

from rs_lightning.cli import report

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ENTRY_POINTS = {"train.py": "train", "certify.py": "certify", "soft_labels.py": "soft_labels"}


def commands(page: Path) -> list[str]:
    """The commands of the page's bash blocks, continuation lines joined (a trailing backslash, or an
    indented line continuing a usage synopsis), comments kept for shlex."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        line = ""
        for part in block.splitlines():
            if part.rstrip().endswith("\\"):
                line += part.rstrip()[:-1] + " "
                continue
            if part.startswith("    ") and part.strip().startswith("[") and out and not line:
                out[-1] += " " + part.strip()
                continue
            out.append(line + part)
            line = ""
    return out


def arguments(command: str) -> list[str]:
    """Shell words with placeholders made concrete: <...>, …, $VAR / ${var} and [--optional] parts (of
    ``[--a | --b]`` the first)."""
    command = re.sub(r"<[^>]*>", "x", command).replace("…", "x")
    command = re.sub(r"\$\{?\w+\}?", "0", command)
    command = re.sub(r"\[(--[^]|]*?) *\|[^]]*\]", r"\1", command)
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


# Commands the docs show that are not entry-point or report commands, and the test that runs each kind
# (the guard below fails on a command of a kind not listed here, so a new one cannot go unchecked).
COVERED = {
    r"make demo\b": "tests/cli/test_entry_points.py::test_demo_defaults_run_from_the_command_line",
    r"make test\b": ".ci/run (CI runs the README's test command on a clean clone)",
    r"(bash )?scripts/reproduce\.sh ": "tests/scripts/test_reproduce.py::test_dry_run_of_a_mnist_cell",
    r"python scripts/ars_masks\.py ": (
        "tests/methods/test_ars_training.py::test_a_training_step_runs_and_the_checkpoint_certifies_in_linf"
    ),
    r"bash evidence/\w+/(mnist_reproduction|mnist_comparison|acr_gaming_comparison|ars_clutter)\.sh": (
        "tests/evidence/test_evidence_scripts.py::"
        "test_a_failed_background_training_fails_the_script_before_any_later_stage"
    ),
    r"bash evidence/denoised_smoothing/denoised_smoothing\.sh": (
        "tests/evidence/test_evidence_scripts.py::"
        "test_denoised_smoothing_stops_on_a_failed_background_training_and_reports_from_archived_rows"
    ),
    r"for job in multirun/train/": (
        "tests/cli/test_sweeps.py::test_the_docs_loop_certifies_every_job_of_a_sweep_and_reports_them"
    ),
    r"(for \w+ in |done$|export DATA_OVERRIDES=)": "shell around scripts/reproduce.sh (its own rule)",
}


def _strip_env(command: str) -> str:
    return re.sub(r"^(\w+=(\"[^\"]*\"|\S*)\s+)+", "", command.strip())


def test_every_other_doc_command_is_of_a_kind_a_named_test_runs():
    """Catches a command added to a page that no test composes, parses or runs (it could rot unseen), and a
    COVERED entry whose test was renamed or removed."""
    unchecked = []
    for page in PAGES:
        for command in commands(page):
            words = arguments(command)
            if not words or any(Path(w).name in ENTRY_POINTS for w in words):
                continue
            if "rs_lightning.cli.report" in words:
                continue
            text = _strip_env(command.split("  #")[0])
            if not any(re.match(pattern, text) for pattern in COVERED):
                unchecked.append(f"{page.name}: {command.strip()}")
    assert unchecked == [], "add a test for these commands and a COVERED entry"
    for where in COVERED.values():
        path, _, name = where.partition("::")
        if path.startswith("tests/"):
            assert (REPO / path).is_file() and f"def {name}(" in (REPO / path).read_text(), where


def transcripts() -> list[tuple[str, str, list[str]]]:
    """``$ command`` blocks of the pages (not bash blocks: they show output) as (page, command, output)."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```\n(\$ .*?)```", page.read_text(), re.S):
            first, *output = block.splitlines()
            found.append((page.name, first[2:], output))
    return found


TRANSCRIPTS = transcripts()


@pytest.mark.parametrize(("page", "command", "output"), TRANSCRIPTS, ids=[t[1][:60] for t in TRANSCRIPTS])
def test_each_transcript_is_what_its_command_prints(page, command, output, tmp_path):
    """A ``$ command`` shown with its output: a report command is parsed (its output needs the reader's own
    runs); a scripts/reproduce.sh one runs from the repository (dry runs and refusals do no work) and must
    print exactly the lines shown. Catches a page whose example output no longer matches the script."""
    words = arguments(command)
    if "rs_lightning.cli.report" in words:
        test_each_report_command_parses(page, words[words.index("rs_lightning.cli.report") + 1 :], tmp_path)
        return
    first = next(i for i, word in enumerate(words) if not re.fullmatch(r"\w+=.*", word))
    env_words, script = words[:first], words[first:]
    assert script[0] == "scripts/reproduce.sh", f"{page}: no rule to run {command!r}"
    keep = {k: v for k, v in os.environ.items() if k not in ("OUT", "PY", "DRY_RUN", "DATA_OVERRIDES")}
    env = keep | dict(w.split("=", 1) for w in env_words)
    done = subprocess.run(["bash", *script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert (done.stdout + done.stderr).splitlines() == output


def test_the_python_api_example_runs():
    """docs/certification.md's Python block, run as written on a tiny model and input (its n = 100,000
    draws take a second on it). Catches a renamed argument or a changed return shape in the documented API."""
    page = (REPO / "docs" / "certification.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", page, re.S)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 10))
    scope = {"model": model, "x": torch.rand(1, 2, 2)}
    exec(compile(block, "docs/certification.md", "exec"), scope)
    assert isinstance(scope["label"], int) and -1 <= scope["label"] < 10
    assert scope["radius"] >= 0.0
