"""The paired bootstrap CIs docs/results.md quotes for the structure-kept MNIST comparison, from the per-input
rows archived in docs/results/mnist_structured/runs.

    python evidence/mnist_structured/structured_pairs.py [--runs DIR] [--out DIR]

Each pair is its own ``python -m rs_lightning.cli.report paired REFERENCE OTHER --radii …`` (run here in one
process), so each CI is a 95 % single-pair interval; the comparison reports' CIs are simultaneous over all
pairs, hence wider. Writes ``paired_sigma025.txt`` and ``paired_sigma050.txt`` (ACR and certified accuracy
at the radii the docs quote). acr_gaming_comparison.sh (beside it) runs it after its reports, and
tests/test_archived_evidence.py rebuilds both files.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from rs_lightning.cli.report.paired import paired_command

RUNS = "docs/results/mnist_structured/runs"
# sigma tag -> (radii, [(reference, other), ...]) in the order of the docs' tables
PAIRS = {
    "025": (
        ["0.25", "0.5", "0.75"],
        [
            ("macer", "gaussian"),
            ("macer", "consistency"),
            ("smoothadv", "gaussian"),
            ("smoothadv", "macer"),
            ("smoothadv", "consistency"),
            ("smoothadv", "smoothmix"),
            ("smoothadv", "catrs"),
            ("smoothadv", "acr_gaming"),
            ("smoothmix", "gaussian"),
            ("smoothmix", "macer"),
            ("smoothmix", "consistency"),
            ("catrs", "gaussian"),
            ("catrs", "consistency"),
            ("catrs", "acr_gaming"),
            ("catrs", "smoothmix"),
            ("acr_gaming", "gaussian"),
            ("acr_gaming", "consistency"),
        ],
    ),
    "050": (
        ["0.25", "0.5", "1", "1.5"],
        [
            ("macer", "gaussian"),
            ("macer", "consistency"),
            ("smoothadv", "gaussian"),
            ("smoothadv", "macer"),
            ("smoothadv", "consistency"),
            ("smoothadv", "smoothmix"),
            ("smoothadv", "catrs"),
            ("smoothadv", "acr_gaming"),
            ("smoothmix", "gaussian"),
            ("smoothmix", "macer"),
            ("smoothmix", "consistency"),
            ("catrs", "gaussian"),
            ("catrs", "consistency"),
            ("catrs", "acr_gaming"),
            ("acr_gaming", "gaussian"),
            ("acr_gaming", "consistency"),
        ],
    ),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The structure-kept comparison's paired CIs for the docs.")
    parser.add_argument("--runs", default=RUNS, help=f"archived runs (default {RUNS})")
    parser.add_argument("--out", default="docs/results/mnist_structured", type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for sigma, (radii, pairs) in PAIRS.items():
        with open(args.out / f"paired_sigma{sigma}.txt", "w") as out, contextlib.redirect_stdout(out):
            for reference, other in pairs:
                runs = [f"{args.runs}/{reference}_s{sigma}", f"{args.runs}/{other}_s{sigma}"]
                if paired_command([*runs, "--radii", *radii]) != 0:
                    return 2  # its one-line error is on stderr
    return 0


if __name__ == "__main__":
    sys.exit(main())
