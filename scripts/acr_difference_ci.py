"""Paired bootstrap CI of the ACR (or certified-accuracy) difference between runs on the same inputs.

    python scripts/acr_difference_ci.py REFERENCE_RUN OTHER_RUN... [--radius R ...] [--resamples 5000]

Each RUN is a certify.py output folder (or its certify.tsv). Inputs are paired by ``idx``; the CI is the
2.5/97.5 % quantile of the mean per-input difference over bootstrap resamples of the shared inputs. The
per-input term is radius·correct (the ACR), or with ``--radius R`` the indicator of "certified correct with
radius ≥ R" (certified accuracy at R, in the runs' own norm). Used for docs/results.md.
"""

import argparse

import numpy as np

from rs_lightning.analysis.compare import load_run


def certified_radii(path: str, at: float | None = None) -> dict[int, float]:
    """idx -> radius if certified correct, else 0 (the per-input term of the ACR); with ``at``, idx -> 1 if
    certified correct with radius >= at, else 0 (the per-input term of the certified accuracy at ``at``)."""
    rows = load_run(path).rows
    radius = np.where(rows["correct"] == 1, rows["radius"], 0.0)
    if at is not None:
        radius = ((rows["correct"] == 1) & (rows["radius"] >= at - 1e-12)).astype(float)
    return dict(zip(rows["idx"].tolist(), radius.tolist(), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("others", nargs="+")
    parser.add_argument("--radius", type=float, nargs="+", help="certified accuracy at these radii instead")
    parser.add_argument("--resamples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for at in args.radius or [None]:
        reference = certified_radii(args.reference, at)
        rng = np.random.default_rng(args.seed)
        for other in args.others:
            radii = certified_radii(other, at)
            shared = sorted(set(reference) & set(radii))
            if not shared:
                raise SystemExit(f"{other} shares no input idx with {args.reference}")
            diff = np.array([reference[i] - radii[i] for i in shared])
            means = diff[rng.integers(0, len(diff), (args.resamples, len(diff)))].mean(axis=1)
            low, high = np.quantile(means, [0.025, 0.975])
            ci = f"95% CI [{low:+.4f}, {high:+.4f}]"
            what = "" if at is None else f"certified accuracy at r={at:g}: "
            print(f"{what}{args.reference} - {other}: {diff.mean():+.4f}  {ci}  ({len(diff)} inputs)")


if __name__ == "__main__":
    main()
