"""Engine throughput of ``sampling=sequential`` against Cohen's fixed n on the same model and inputs.

``python -m bench.sequential [--quick] [--out PATH]`` writes ``bench/results/sequential.json``.

Sequential inputs stop at different looks, so its forward batches are filled look by look from the inputs
still open; this measures what that costs. Both samplers certify the same inputs through
:func:`rs_lightning.smoothing.run_dataset` (the code path of certify.py), interleaved over repeats; the
figure is draws per second (selection + estimation, the ``samples`` column) and the ratio sequential/cohen
(target >= 0.9). The model is a LeNet on 1×28×28 inputs (the cost of every forward pass) whose decision is
a half-space on the first pixel (so the inputs' pA, and hence where they stop, are known and spread:
pA = Φ(margin/σ) for margins spread over [−2σ, 2σ]). Also reported: the draws per input of each sampler.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from bench.throughput import machine_info
from rs_lightning.models import LeNet
from rs_lightning.smoothing import CertificationSpec, run_dataset

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "sequential.json"
SIGMA = 0.5
TARGET = 0.9


class CostlyHalfspace(nn.Module):
    """LeNet's forward cost, a half-space's decision: logits ``(-x0, x0) + 0·LeNet(x)``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = LeNet(input_shape=(1, 28, 28), num_classes=2)

    def forward(self, x):
        z = x.flatten(1)[:, :1]
        return torch.cat([-z, z], dim=1) + 0.0 * self.net(x)


def inputs(count: int) -> TensorDataset:
    xs = torch.zeros(count, 1, 28, 28)
    xs[:, 0, 0, 0] = torch.linspace(-2 * SIGMA, 2 * SIGMA, count)
    return TensorDataset(xs, (xs[:, 0, 0, 0] > 0).long())


def certify_all(model, data, spec: CertificationSpec) -> tuple[float, int, list[int]]:
    start = time.perf_counter()
    samples = []
    for result, _, _ in run_dataset(model, data, list(range(len(data))), spec, num_classes=2):
        samples += [int(s) for s in result.samples]
    return time.perf_counter() - start, int(np.sum(samples)), samples


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few inputs and draws (smoke test)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    # 16 inputs x n = 50,000 x 2 repeats: a few minutes on 2 idle cores (40 x 100,000 x 3 took > 15 min);
    # the ratio is per draw, so a smaller n changes only how many looks an input can reach
    count, n, repeats, batch = (8, 4_000, 1, 400) if args.quick else (16, 50_000, 2, 1000)
    torch.manual_seed(0)
    model = CostlyHalfspace().eval()
    data = inputs(count)
    specs = {
        name: CertificationSpec(sigma=SIGMA, n=n, alpha=0.001, batch_size=batch, sampling=name)
        for name in ("cohen", "sequential")
    }
    certify_all(model, inputs(2), specs["cohen"])  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in specs}
    draws: dict[str, tuple[int, list[int]]] = {}
    for rep in range(repeats):
        for name in list(specs)[:: 1 if rep % 2 == 0 else -1]:
            elapsed, total, per_input = certify_all(model, data, specs[name])
            seconds[name].append(elapsed)
            draws[name] = (total, per_input)
    rate = {name: draws[name][0] / statistics.median(seconds[name]) for name in specs}
    report = {
        "benchmark": "sequential",
        "machine": machine_info(torch.device("cpu")),
        "inputs": count,
        "n": n,
        "batch_size": batch,
        "sigma": SIGMA,
        "seconds": seconds,
        "draws_per_input": {name: draws[name][0] / count for name in specs},
        "samples_per_s": rate,
        "sequential_over_cohen_samples_per_s": rate["sequential"] / rate["cohen"],
        "target": TARGET,
        "fewer_draws": draws["cohen"][0] / draws["sequential"][0],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(
        f"samples/s cohen {rate['cohen']:.0f}, sequential {rate['sequential']:.0f}: "
        f"ratio {report['sequential_over_cohen_samples_per_s']:.3f} (target >= {TARGET}); "
        f"{report['fewer_draws']:.1f}x fewer draws per input"
    )
    return report


if __name__ == "__main__":
    main()
