"""Every ``report`` subcommand ends a user error alike (:func:`rs_lightning.cli.common.user_errors_exit`):
one line ``error: ...`` on stderr, status 2, no traceback; argparse's own exits are left as they are."""

import pytest
from hydra.errors import InstantiationException

from rs_lightning.cli.common import user_errors_exit
from rs_lightning.cli.report import SUBCOMMANDS, main
from rs_lightning.cli.report.budget import budget_command
from rs_lightning.cli.report.compare import compare_command
from rs_lightning.cli.report.merge import merge_command
from rs_lightning.cli.report.paired import paired_command
from rs_lightning.cli.report.published import published_command
from rs_lightning.validation import ConfigError

COMMANDS = {
    "compare": compare_command,
    "budget": budget_command,
    "merge": merge_command,
    "paired": paired_command,
    "published": published_command,
}
CELL = ["--dataset", "cifar10", "--method", "cohen"]

# (subcommand, its arguments with {missing} for a run folder that does not exist, the expected line)
CASES = [
    ("compare", ["{missing}"], "error: {missing} does not exist"),
    ("compare", ["{missing}", "--dim", "0"], "error: --dim=0 is invalid: --dim must be an integer >= 1"),
    ("budget", ["{missing}"], "error: {missing} does not exist"),
    ("budget", ["{missing}", "--sigma", "-1"], "error: --sigma=-1.0 is invalid: --sigma must be > 0"),
    ("merge", ["{missing}"], "error: {missing} has no settings.json: not a certify.py run folder"),
    (
        "merge",
        ["{missing}", "--radius-step", "0"],
        "error: --radius-step=0.0 is invalid: --radius-step must be > 0",
    ),
    ("paired", ["{missing}", "{missing}"], "error: {missing} does not exist"),
    (
        "paired",
        ["{missing}", "{missing}", "--beta", "2"],
        "error: beta='2' is invalid: beta must be in the open interval (0, 1)",
    ),
    ("published", ["{missing}", *CELL, "--sigma", "0.25"], "error: {missing} does not exist"),
    (
        "published",
        ["{missing}", *CELL, "--sigma", "0.3"],
        "error: sigma='0.3' is invalid: choose one of 0.25, 0.5, 1.0",
    ),
]


def test_every_subcommand_has_a_case():
    assert set(COMMANDS) == {"compare", *SUBCOMMANDS}
    assert {SUBCOMMANDS.get(name, compare_command) for name in COMMANDS} == set(COMMANDS.values())
    assert {name for name, _, _ in CASES} == set(COMMANDS)


@pytest.mark.parametrize("direct", [False, True], ids=["dispatcher", "direct"])
@pytest.mark.parametrize(("name", "args", "line"), CASES)
def test_a_user_error_is_one_line_and_status_2(tmp_path, capsys, name, args, line, direct):
    missing = str(tmp_path / "nope")
    argv = [a.format(missing=missing) for a in args]
    prefix = [] if name == "compare" else [name]
    status = COMMANDS[name](argv) if direct else main([*prefix, *argv])
    err = capsys.readouterr().err
    assert status == 2
    assert err == line.format(missing=missing) + "\n"
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", COMMANDS)
def test_argparse_exits_are_unchanged(capsys, name):
    with pytest.raises(SystemExit) as exited:
        COMMANDS[name](["--no-such-option"])
    assert exited.value.code == 2 and capsys.readouterr().err.startswith("usage: ")


def test_user_errors_exit_passes_other_errors_and_unwraps_hydra(capsys):
    @user_errors_exit
    def wrapped() -> int:
        raise InstantiationException("Error in call to target") from ConfigError("n", 0, ">= 1")

    assert wrapped() == 2 and capsys.readouterr().err == "error: n=0 is invalid: n must be >= 1\n"

    @user_errors_exit
    def broken() -> int:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        broken()
