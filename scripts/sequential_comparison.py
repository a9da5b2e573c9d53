"""Compare samplers on the same inputs: draws per input, time, certified accuracy at the grid radii.

    python scripts/sequential_comparison.py REFERENCE_RUN RUN... [--radii R ...] [--json F] [--common-inputs]

The first run is the reference (Cohen's fixed n). The grid is ``--radii``, or that of the first
``sampling=sequential`` run among them. For every run: mean draws per input (``samples``: selection and
estimation), the reference's mean divided by it, for sequential runs mean draws ÷ mean oracle floor at
the rows' own p̂ and at the reference's (``Run.oracle_floor``; the first overstates the ratio), seconds per
input, and certified accuracy at each radius with its difference to the reference in binomial standard
errors √(p(1−p)/M) of the reference. Then where
the draws go: inputs grouped by the reference's radius bucket on the grid, with each run's mean draws there.
``--common-inputs`` compares the inputs every run has finished (for runs still in progress; the output says
how many of each run's inputs that is).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rs_lightning.analysis.metrics import certified_accuracy, draws_over_floor  # noqa: E402
from rs_lightning.analysis.run_view import load_run  # noqa: E402


def subset(run, idx):
    """``run`` restricted to the inputs ``idx`` (sorted), in idx order."""
    order = np.argsort(run.rows["idx"])
    keep = order[np.isin(run.rows["idx"][order], idx)]
    return dataclasses.replace(run, rows={k: v[keep] for k, v in run.rows.items()})


def floor_cell(row: dict) -> str:
    """``1.36, 1.27``: draws ÷ oracle floor at the run's own p̂ and at the reference's; ``-`` for fixed n."""
    own, paired = row["draws_over_floor"], row["draws_over_reference_floor"]
    if own is None:
        return "-"
    return f"{own:.2f}, " + ("-" if paired is None else f"{paired:.2f}")


def grid_of(runs, radii) -> list[float]:
    if radii:
        return [float(r) for r in radii]
    for run in runs:
        seq = run.settings.sampler
        if run.settings.sampling == "sequential" and seq and seq.get("radii"):
            return [float(r) for r in seq["radii"]]
    raise SystemExit("error: no sampling=sequential run among them: pass --radii")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--radii", nargs="+", type=float)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--common-inputs", action="store_true", help="compare the inputs all runs finished")
    args = parser.parse_args(argv)
    runs = [load_run(p) for p in args.runs]
    partial = None
    if args.common_inputs:
        common = runs[0].rows["idx"]
        for run in runs[1:]:
            common = np.intersect1d(common, run.rows["idx"])
        partial = {str(p): int(r.rows["idx"].size) for p, r in zip(args.runs, runs, strict=True)}
        runs = [subset(r, common) for r in runs]
    reference = runs[0]
    if any(not np.array_equal(r.rows["idx"], reference.rows["idx"]) for r in runs):
        raise SystemExit("error: the runs are not on the same inputs (idx differ): pass --common-inputs")
    radii = grid_of(runs, args.radii)
    m = reference.rows["idx"].size
    ref_acc = certified_accuracy(reference.rows["radius"], reference.rows["correct"], radii)
    se = np.sqrt(ref_acc * (1 - ref_acc) / m)
    ref_samples = float(np.mean(reference.rows["samples"]))
    # the reference's bucket of each input: -1 abstained or wrong, k = the largest grid radius it certifies
    ref_ok = (reference.rows["predict"] >= 0) & (reference.rows["correct"] == 1)
    bucket = np.where(ref_ok, np.searchsorted(radii, reference.rows["radius"], side="right") - 1, -1)
    out = {"inputs": m, "radii": radii, "runs": []}
    if partial is not None:
        out["inputs_of_each_run"] = partial
    for run in runs:
        rows = run.rows
        acc = certified_accuracy(rows["radius"], rows["correct"], radii)
        samples = float(np.mean(rows["samples"]))
        own_floor = run.oracle_floor()
        out["runs"].append(
            {
                "run": str(run.path),
                "sampling": run.settings.sampling,
                "precision": run.settings.precision,
                "mean_samples": samples,
                "fewer_samples_than_reference": ref_samples / samples,
                "seconds_per_input": float(np.sum(rows["time"]) / m),
                "certified_accuracy": [float(a) for a in acc],
                "difference_in_reference_se": [
                    float((a - b) / s) if s > 0 else (0.0 if a == b else float("inf"))
                    for a, b, s in zip(acc, ref_acc, se, strict=True)
                ],
                "acr": run.acr,
                # sequential runs: mean n / mean oracle floor at the rows' own p-hat, and at the reference's
                "draws_over_floor": draws_over_floor(rows["n"], own_floor),
                "draws_over_reference_floor": (
                    None
                    if own_floor is None or reference.paired_with(run)
                    else draws_over_floor(rows["n"], run.oracle_floor(at=reference))
                ),
                "mean_samples_by_reference_bucket": {
                    str(k): float(np.mean(rows["samples"][bucket == k]))
                    for k in range(-1, len(radii))
                    if (bucket == k).any()
                },
            }
        )
    shares = {str(k): float(np.mean(bucket == k)) for k in range(-1, len(radii)) if (bucket == k).any()}
    out["reference_bucket_shares"] = shares
    print(f"{m} inputs; grid {radii}; reference {args.runs[0]}")
    if partial is not None:
        print(f"(the inputs all runs finished; each run's own count: {partial})")
    head = (
        "| run | sampling | precision | mean draws | fewer than ref | ÷ floor (own p̂, ref p̂) | "
        "s/input | ACR | " + " | ".join(f"r={r:g}" for r in radii) + " |"
    )
    print(head)
    print("|" + "---|" * (8 + len(radii)))
    for r in out["runs"]:
        cells = [
            f"{a:.3f} ({d:+.1f} SE)"
            for a, d in zip(r["certified_accuracy"], r["difference_in_reference_se"], strict=True)
        ]
        print(
            f"| {Path(r['run']).name} | {r['sampling']} | {r['precision']} | {r['mean_samples']:.0f} | "
            f"{r['fewer_samples_than_reference']:.2f}x | {floor_cell(r)} | {r['seconds_per_input']:.2f} | "
            f"{r['acr']:.4f} | " + " | ".join(cells) + " |"
        )
    labels = {"-1": "abstain or wrong", **{str(k): f"[{radii[k]:g}, next)" for k in range(len(radii))}}
    print("\nmean draws by the reference's bucket (share of inputs):")
    for k, share in shares.items():
        costs = ", ".join(
            f"{Path(r['run']).name} {r['mean_samples_by_reference_bucket'][k]:.0f}" for r in out["runs"]
        )
        print(f"- {labels[k]} ({share:.0%}): {costs}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
