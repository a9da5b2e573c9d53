"""Certified inputs per second of a fast certification run against a slow one (the headline of
evidence/fast_certification/fast_certification.sh), from their summary.json files.

    python scripts/throughput_ratio.py SLOW_RUN FAST_RUN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rs_lightning.runs import ResultFileError, RunSummary


def summary(run: Path) -> RunSummary:
    """The run's summary.json, read as a :class:`RunSummary` (any readable format version)."""
    try:
        record = RunSummary.read(run)
        problem = "it has no summary.json" if record is None else "its summary records no throughput"
    except (OSError, ResultFileError) as exc:
        record, problem = None, str(exc)
    if record is None or record.throughput.get("inputs_per_s") is None:
        message = f"error: {run} cannot be read ({problem}); pass a finished certify.py output folder"
        print(message, file=sys.stderr)
        sys.exit(2)
    return record


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("slow", type=Path, help="the reference run's output folder (e.g. fp32 IAS)")
    parser.add_argument("fast", type=Path, help="the fast run's output folder (e.g. bf16 + ISS)")
    args = parser.parse_args(argv)
    slow, fast = summary(args.slow), summary(args.fast)
    for name, run in ((args.slow.name, slow), (args.fast.name, fast)):
        speed, metrics = run.throughput, run.metrics
        print(
            f"{name}: {speed['inputs_per_s']:.4f} inputs/s, {speed['seconds']:.0f} s, "
            f"ACR {metrics['acr']:.4f}, mean samples {metrics['mean_samples']:.0f}"
        )
    ratio = fast.throughput["inputs_per_s"] / slow.throughput["inputs_per_s"]
    print(f"certified inputs per second: {ratio:.2f}x")
    return ratio


if __name__ == "__main__":
    main()
