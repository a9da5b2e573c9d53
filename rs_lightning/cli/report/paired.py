"""``report paired REFERENCE OTHER... [--radii R ...] [--beta B]``: paired difference CIs of ACR and certified
accuracy between runs on the same inputs (:mod:`rs_lightning.analysis.uncertainty`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rs_lightning.analysis.protocol import check_protocol
from rs_lightning.analysis.run_view import assign_labels, load_runs
from rs_lightning.analysis.uncertainty import (
    DEFAULT_BETA,
    check_beta,
    paired_acr_ci,
    paired_certified_accuracy,
)
from rs_lightning.analysis.verdicts import radius_counts
from rs_lightning.validation import ConfigError, require_non_negative

from ..common import user_errors_exit


@user_errors_exit
def paired_command(argv: Sequence[str]) -> int:
    """``report paired REFERENCE OTHER... [--radii R ...] [--beta B]``: paired differences REFERENCE − OTHER
    of ACR and of certified accuracy at each radius, with (1 − β) percentile bootstrap CIs over the shared
    inputs (:mod:`rs_lightning.analysis.uncertainty`; Bonferroni over the OTHERs). Each pair must share the
    protocol (inputs, data, n, α, …; with ``--compare-noises`` the noise may differ), else it is refused
    before any CI, naming the difference."""
    parser = argparse.ArgumentParser(
        prog="python -m rs_lightning.cli.report paired",
        description="Paired bootstrap CIs of ACR and certified-accuracy differences between runs on the "
        "same inputs (each pair with its own generator).",
    )
    parser.add_argument("reference", metavar="REFERENCE_RUN")
    parser.add_argument("others", nargs="+", metavar="OTHER_RUN", help="run folders, or multirun folders")
    parser.add_argument(
        "--radii", nargs="+", type=float, default=[], help="certified accuracy at these radii"
    )
    parser.add_argument("--beta", default=DEFAULT_BETA, help=f"1 - confidence (default {DEFAULT_BETA})")
    parser.add_argument(
        "--compare-noises", action="store_true", help="pairs may differ in their noise (the rest the same)"
    )
    args = parser.parse_args(argv)
    beta = check_beta(args.beta)
    for radius in args.radii:
        require_non_negative("--radii", radius)
    references = load_runs([args.reference])
    if len(references) != 1:
        raise ConfigError(
            "REFERENCE_RUN",
            args.reference,
            "one run folder",
            f"it holds {len(references)} runs; pass one of them as REFERENCE and the rest as OTHER_RUN",
        )
    reference = references[0]
    others = []
    for path in args.others:  # a multirun folder: every job in it but the reference itself
        runs = load_runs([path])
        if len(runs) > 1:
            runs = [run for run in runs if run.path.resolve() != reference.path.resolve()]
        others += runs
    for other in others:  # every pair checked before any CI is printed
        pair = [reference, other]
        assign_labels(pair)
        check_protocol(pair, compare_noises=args.compare_noises)
    level = beta / len(others)
    for other in others:
        a, b = radius_counts(reference), radius_counts(other)
        names = (str(reference.path), str(other.path))
        low, high = paired_acr_ci(a, b, level, names=names)
        diff = reference.acr - other.acr
        what = f"{reference.path} - {other.path}"
        print(f"ACR: {what}: {diff:+.4f}  {1 - level:.4g} CI [{low:+.4f}, {high:+.4f}]  ({a.size} inputs)")
        if args.radii:
            result = paired_certified_accuracy(a, b, args.radii, level, names=names)
            band = result["pointwise"]
            for r, d, lo, hi in zip(args.radii, band.point, band.lower, band.upper, strict=True):
                print(f"certified accuracy at r={r:g}: {what}: {d:+.4f}  CI [{lo:+.4f}, {hi:+.4f}]")
    return 0
