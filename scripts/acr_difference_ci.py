"""Paired bootstrap CI of the ACR difference between certification runs on the same inputs.

    python scripts/acr_difference_ci.py REFERENCE_RUN OTHER_RUN... [--resamples 5000] [--seed 0]

Each RUN is a certify.py output folder (or its certify.tsv). Inputs are paired by ``idx``; the CI is the
2.5/97.5 % quantile of the mean per-input difference of radius·correct over bootstrap resamples of the
shared inputs. Used for docs/results.md.
"""

import argparse

import numpy as np

from rs_lightning.analysis.compare import load_run


def certified_radii(path: str) -> dict[int, float]:
    """idx -> radius if certified correct, else 0 (the per-input term of the ACR)."""
    rows = load_run(path).rows
    radius = np.where(rows["correct"] == 1, rows["radius"], 0.0)
    return dict(zip(rows["idx"].tolist(), radius.tolist(), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("others", nargs="+")
    parser.add_argument("--resamples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    reference = certified_radii(args.reference)
    rng = np.random.default_rng(args.seed)
    for other in args.others:
        radii = certified_radii(other)
        shared = sorted(set(reference) & set(radii))
        if not shared:
            raise SystemExit(f"{other} shares no input idx with {args.reference}")
        diff = np.array([reference[i] - radii[i] for i in shared])
        means = diff[rng.integers(0, len(diff), (args.resamples, len(diff)))].mean(axis=1)
        low, high = np.quantile(means, [0.025, 0.975])
        ci = f"95% CI [{low:+.4f}, {high:+.4f}]"
        print(f"{args.reference} - {other}: {diff.mean():+.4f}  {ci}  ({len(diff)} inputs)")


if __name__ == "__main__":
    main()
