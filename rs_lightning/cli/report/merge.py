"""``report merge RUN_DIR [--radius-step R]``: one result from the shard files of a sharded run
(``certify.py shard=i/k``), written by :func:`rs_lightning.certification.merge_run`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rs_lightning.validation import ConfigError

from ..common import user_errors_exit


@user_errors_exit
def merge_command(argv: Sequence[str]) -> int:
    """``report merge RUN_DIR [--radius-step R]``: one result from the parts of a sharded run."""
    from rs_lightning.certification import merge_run

    parser = argparse.ArgumentParser(
        prog="python -m rs_lightning.cli.report merge",
        description="Merge the shard files (certify.py shard=i/k) of a run folder into certify.tsv, "
        "then write summary.json and the plots.",
    )
    parser.add_argument("run", metavar="RUN_DIR")
    parser.add_argument("--radius-step", type=float, help="certified-accuracy grid (default: the run's)")
    args = parser.parse_args(argv)
    if args.radius_step is not None and not args.radius_step > 0:
        raise ConfigError("--radius-step", args.radius_step, "> 0")
    merge_run(args.run, args.radius_step)
    return 0
