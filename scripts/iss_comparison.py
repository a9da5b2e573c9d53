"""Input-specific against input-agnostic sampling on the same inputs (the ISS paper's Table 5 quantities).

    python scripts/iss_comparison.py IAS_RUN ISS_RUN... [--radii 0 0.25 0.5 ...] [--json OUT.json]

Each RUN is a certify.py folder on the same inputs and n (ISS's n is its largest budget). Per run: mean
noisy forward passes per input (``samples``: selection or pilot + estimation), mean seconds per input
(its ``time`` column), their ratios to the IAS run, ACR, certified accuracy at ``--radii``, and the radius
decline against the IAS run input by input (r_IAS − r_ISS): its maximum, its mean and the share of inputs
whose decline exceeds the run's ``iss.max_decline`` (AD: absolute; RD: relative to r_IAS). Prints a
Markdown table (used in docs/results.md).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from rs_lightning.analysis.run_view import load_run


def _aligned(reference, run) -> tuple[dict, dict]:
    shared, ia, ib = np.intersect1d(reference.rows["idx"], run.rows["idx"], return_indices=True)
    if shared.size != reference.num_inputs or shared.size != run.num_inputs:
        raise SystemExit(f"error: {run.path} and {reference.path} were not certified on the same inputs")
    return {k: v[ia] for k, v in reference.rows.items()}, {k: v[ib] for k, v in run.rows.items()}


def compare(reference_path: str, paths: list[str], radii: list[float]) -> list[dict]:
    reference = load_run(reference_path)
    out = []
    for path in [reference_path, *paths]:
        run = load_run(path)
        ref, rows = _aligned(reference, run)
        samples = rows["samples"] if "samples" in rows else rows["n0"] + rows["n"]
        ref_samples = ref["samples"] if "samples" in ref else ref["n0"] + ref["n"]
        iss = (run.settings.sampler or {}) if run.settings.sampling == "iss" else {}
        decline = ref["radius"] - rows["radius"]
        allowed = None
        if iss:
            c = float(iss["max_decline"])
            allowed = np.full(decline.shape, c) if iss["decline"] == "ad" else c * ref["radius"]
        out.append(
            {
                "run": str(path),
                "sampling": "IAS" if not iss else f"ISS {iss['decline'].upper()} {iss['max_decline']:g}",
                "precision": run.settings.precision or "32",
                "n": run.n,
                "mean_samples": float(samples.mean()),
                "samples_ratio": float(ref_samples.mean() / samples.mean()),
                "seconds_per_input": float(rows["time"].mean()),
                "time_ratio": float(ref["time"].mean() / rows["time"].mean()),
                "acr": run.acr,
                "certified_accuracy": {
                    f"{r:g}": float(a) for r, a in zip(radii, run.certified_accuracy(radii), strict=True)
                },
                "max_decline": float(decline.max()),
                "mean_decline": float(decline.mean()),
                "share_above_max_decline": None
                if allowed is None
                else float((decline > allowed + 1e-12).mean()),
                "class_changed": int((ref["predict"] != rows["predict"]).sum()),
            }
        )
    return out


def markdown(rows: list[dict]) -> str:
    radii = list(rows[0]["certified_accuracy"])
    head = ["sampling", "precision", "samples / input", "× fewer", "s / input", "× faster", "ACR"]
    head += [f"CA@{r}" for r in radii] + ["max decline", "mean decline", "> c", "class changed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        above = "—" if r["share_above_max_decline"] is None else f"{100 * r['share_above_max_decline']:.1f} %"
        cells = [
            r["sampling"],
            r["precision"],
            f"{r['mean_samples']:,.0f}",
            f"{r['samples_ratio']:.2f}",
            f"{r['seconds_per_input']:.2f}",
            f"{r['time_ratio']:.2f}",
            f"{r['acr']:.4f}",
            *[f"{a:.3f}" for a in r["certified_accuracy"].values()],
            f"{r['max_decline']:.4f}",
            f"{r['mean_decline']:.4f}",
            above,
            str(r["class_changed"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="the input-agnostic (IAS) run")
    parser.add_argument("runs", nargs="+", help="ISS runs on the same inputs")
    parser.add_argument("--radii", nargs="+", type=float, default=[0.0, 0.5, 1.0, 1.5])
    parser.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = compare(args.reference, args.runs, args.radii)
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
