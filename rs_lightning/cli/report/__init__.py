"""Compare certification runs: ``python -m rs_lightning.cli.report [SUBCOMMAND] ...``, one module each.

- ``RUN_DIR... [--out DIR]``: the comparison report (report.md, tables, plots): :mod:`.compare`
- ``budget RUN_DIR...``: ACR against the budget N′ next to the constant classifier's: :mod:`.budget`
- ``paired REFERENCE OTHER...``: paired difference CIs of ACR and certified accuracy: :mod:`.paired`
- ``published RUN_DIR --dataset D --method M --sigma S``: a run against its published cell: :mod:`.published`
- ``merge RUN_DIR``: one result from the shards of a sharded run: :mod:`.merge`

Run folders are loaded, and report files written, by :mod:`.loading`. Errors: one line ``error: ...`` and
exit status 2, from :func:`~rs_lightning.cli.common.user_errors_exit` on each subcommand.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .budget import budget_command
from .compare import compare_command
from .merge import merge_command
from .paired import paired_command
from .published import published_command

SUBCOMMANDS = {
    "budget": budget_command,
    "merge": merge_command,
    "paired": paired_command,
    "published": published_command,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: a subcommand's name as the first argument runs it (a run folder literally named so:
    ``./budget``), anything else is the comparison report; a user error prints ``error: ...`` on one line and
    returns 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = SUBCOMMANDS.get(argv[0]) if argv else None
    return command(argv[1:]) if command else compare_command(argv)
