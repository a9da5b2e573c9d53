"""What each lever of ``sampling=sequential`` saves, simulated on the p_A of real models.

``python -m bench.sequential_levers [--quick] [--out PATH]`` writes ``bench/results/sequential_levers.json``.

The truth of each input is its p̂_A from the archived fixed-n Cohen run on the same model (n = 100,000, so
p̂ is within about ±0.0016 of p_A): docs/results/sequential/runs/MODEL/cohen. Each sampler setting runs the
real :meth:`Sequential.estimate` (the draw loop certify.py calls) on binomial draws at that p_A, with the
selection count nA0 ~ Binomial(n0, p_A) (the selected class taken to be the one Cohen's run selected), over
``repeats`` independent seeds. Reported per model and setting: mean draws per input (n0 + estimation, as the
``samples`` column), Cohen's n0 + n divided by it, certified accuracy at the grid (Cohen's row ``correct``,
the simulated radius), and mean estimation draws ÷ mean oracle floor
(:meth:`Sequential.oracle_floor` at each simulated row's p̂), and the same at the true p_A
(``draws_over_true_floor``: the floor the row's p̂, taken at a stopping time, understates;
docs/certification.md). A simulation of the sampler, not a measurement
of a run: the runs in docs/results/sequential are the evidence; this chooses what those runs test.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from bench.throughput import machine_info
from rs_lightning.analysis.metrics import certified_accuracy
from rs_lightning.analysis.run_view import load_run
from rs_lightning.smoothing import CertificationSpec
from rs_lightning.smoothing.samplers import Sequential
from rs_lightning.smoothing.stats import clopper_pearson_lower

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "results" / "sequential" / "runs"
DEFAULT_OUT = ROOT / "bench" / "results" / "sequential_levers.json"
MODELS = {  # model: (sigma, dim, grid: None = the report's grid to the largest radius certifiable)
    "mnist_lenet_s025": (0.25, 784, None),
    "mnist_lenet_s050": (0.5, 784, None),
    "mnist_lenet_s050 to 1.5": (0.5, 784, (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)),
    "cifar_subset_lenet_s025": (0.25, 3072, None),
}
BEFORE = {"beta": None, "alpha_spending": "even", "futility": False}  # how the archived runs stopped
SETTINGS = {  # name: Sequential settings, each written out in full (the defaults are "all three")
    "before (beta=null)": BEFORE,
    "+ beta=0.05": BEFORE | {"beta": 0.05},
    "+ beta=0.05, selection": BEFORE | {"beta": 0.05, "alpha_spending": "selection"},
    "+ beta=0.05, futility": BEFORE | {"beta": 0.05, "futility": True},
    "all three (the defaults)": {},
    "all three, first_look=256": {"first_look": 256},
    "all three, first_look=512": {"first_look": 512},
    "all three, first_look=2048": {"first_look": 2048},
    "all three, growth=1.3": {"growth": 1.3},
    "all three, growth=2": {"growth": 2.0},
    "all three, abstain_after=10000": {"abstain_after": 10_000},
}


def simulate(p: np.ndarray, correct: np.ndarray, spec: CertificationSpec, dim: int, seed: int) -> dict:
    """One simulated sequential run over inputs of true p_A ``p``."""
    rng = np.random.default_rng(seed)
    sampler = spec.sampler
    n_a0 = rng.binomial(spec.n0, p)
    n_a, n = sampler.estimate(
        spec, lambda open_, starts, stop: rng.binomial(stop - starts, p[open_]), n_a0, dim
    )
    lower = clopper_pearson_lower(n_a, n, sampler.levels(spec, n, n_a0, dim))
    radius = np.where(lower >= 0.5, spec.certificate.radius(lower, spec.sigma, dim), -1.0)
    floor = sampler.oracle_floor(spec, n_a, n, dim)
    truth = sampler.oracle_floor(spec, p, np.ones_like(p), dim)  # the floor at the true p_A
    return {
        "mean_samples": float(np.mean(n + spec.n0)),
        "mean_n": float(np.mean(n)),
        "mean_floor": float(np.mean(floor)),
        "mean_true_floor": float(np.mean(truth)),
        "certified_accuracy": certified_accuracy(radius, correct, sampler.radii).tolist(),
    }


def bench_model(model: str, sigma: float, dim: int, grid, repeats: int, limit: int | None) -> dict:
    cohen = load_run(RUNS / model.split(" ")[0] / "cohen")
    rows = cohen.rows
    p = np.clip(rows["pA_hat"].astype(float), 0.0, 1.0)[:limit]
    correct = rows["correct"].astype(bool)[:limit]
    out = {}
    for name, settings in SETTINGS.items():
        spec = CertificationSpec(
            sigma=sigma,
            n=100_000,
            alpha=0.001,
            sampling="sequential",
            sampler=Sequential(radii=grid, **settings),
        ).resolved(dim)
        runs = [simulate(p, correct, spec, dim, seed) for seed in range(repeats)]
        keys = ("mean_samples", "mean_n", "mean_floor", "mean_true_floor")
        mean = {k: float(np.mean([r[k] for r in runs])) for k in keys}
        out[name] = mean | {
            "fewer_draws_than_cohen": (spec.n0 + spec.n) / mean["mean_samples"],
            "draws_over_floor": mean["mean_n"] / mean["mean_floor"],
            "draws_over_true_floor": mean["mean_n"] / mean["mean_true_floor"],
            "certified_accuracy": np.mean([r["certified_accuracy"] for r in runs], axis=0).tolist(),
            "radii": list(spec.sampler.radii),
        }
    out["cohen_certified_accuracy"] = certified_accuracy(
        rows["radius"][:limit], correct, out[next(iter(SETTINGS))]["radii"]
    ).tolist()
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 inputs, one seed (smoke test)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    repeats, limit = (1, 20) if args.quick else (args.repeats, None)
    report = {
        "benchmark": "sequential_levers",
        "machine": machine_info(torch.device("cpu")),
        "repeats": repeats,
        "models": {},
    }
    for model, (sigma, dim, grid) in MODELS.items():
        result = bench_model(model, sigma, dim, grid, repeats, limit)
        report["models"][model] = result
        for name in SETTINGS:
            r = result[name]
            print(
                f"{model:26s} {name:44s} draws {r['mean_samples']:8.0f}  "
                f"{r['fewer_draws_than_cohen']:5.2f}x  /floor {r['draws_over_floor']:.2f} "
                f"(true p {r['draws_over_true_floor']:.2f})  "
                f"CA top {r['certified_accuracy'][-1]:.3f} "
                f"(cohen {result['cohen_certified_accuracy'][-1]:.3f})"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
