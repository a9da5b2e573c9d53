"""The cost of sound noise: certification draws per second with lattice Gaussian noise against float Gaussian.

    python -m bench.lattice [--quick] [--device cpu|cuda] [--out PATH]

Writes ``bench/results/lattice_cost.json`` (``--device cuda``, in ``make bench-gpu``:
``bench/results/lattice_cost_gpu.json``). For each workload (MNIST LeNet at fp32; CIFAR-10 ResNet-20 at bf16
+ channels_last, the fast certification setting) the engine's ``sample_counts`` draws the same number of noisy
copies of one clean input on the 8-bit grid, once with ``noise=gaussian`` and once with
``noise=gaussian_lattice`` (:mod:`rs_lightning.smoothing.noises.gaussian_lattice`: 60-bit uniform integers,
a binary search among the edges, the input from the integer sum), interleaved
(:func:`bench.throughput.run_interleaved`). ``time_ratio`` is the median over rounds of lattice time / float
time; the target is ≤ 1.15.
The networks have random weights with calibrated BatchNorm statistics: speed does not depend on accuracy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from bench.throughput import (
    SETTINGS,
    Workload,
    calibrate_batchnorm,
    machine_info,
    paired_median,
    run_interleaved,
    summarize,
)
from rs_lightning.models import CIFARResNet, LeNet

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = {"cpu": RESULTS / "lattice_cost.json", "cuda": RESULTS / "lattice_cost_gpu.json"}
SIGMA = 0.25
WORKLOADS = {  # name: (network, input shape, setting of bench.throughput.SETTINGS)
    "lenet_mnist_fp32": (lambda: LeNet(input_shape=(1, 28, 28), num_classes=10), (1, 28, 28), "fp32"),
    "resnet20_cifar_bf16_cl": (
        lambda: CIFARResNet(input_shape=(3, 32, 32), num_classes=10, depth=20),
        (3, 32, 32),
        "bf16_cl",
    ),
}
NOISES = ("gaussian", "gaussian_lattice")


def measure(name: str, num_samples: int, batch_size: int, repeats: int, device: torch.device) -> dict:
    build, shape, setting = WORKLOADS[name]
    torch.manual_seed(0)
    model = calibrate_batchnorm(build().to(device), shape, device)
    x = (torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(0)).float() / 255).to(device)
    workload = Workload(model, x, num_classes=10, sigma=SIGMA)
    impls = {noise: workload.engine(setting, num_samples, batch_size, noise) for noise in NOISES}
    warmups = {noise: workload.engine(setting, batch_size, batch_size, noise) for noise in NOISES}
    times = run_interleaved(impls, repeats, device, warmups)
    return {
        "precision": SETTINGS[setting]["precision"],
        "channels_last": SETTINGS[setting]["channels_last"],
        "num_samples": num_samples,
        "batch_size": batch_size,
        **{noise: summarize(times[noise], num_samples) for noise in NOISES},
        "time_ratio": round(paired_median(times["gaussian_lattice"], times["gaussian"]), 4),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds), for tests")
    parser.add_argument("--device", choices=sorted(DEFAULT_OUT), default="cpu")
    parser.add_argument(
        "--out", type=Path, default=None, help="default: bench/results/lattice_cost[_gpu].json"
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"error: --device cuda: torch.cuda.is_available() is False (torch {torch.__version__}); run it "
            "on a machine with a CUDA GPU, or time the CPU with --device cpu",
            file=sys.stderr,
        )
        raise SystemExit(2)
    device = torch.device(args.device)
    out = args.out or DEFAULT_OUT[args.device]
    num_samples, batch_size, repeats = (400, 200, 2) if args.quick else (10_000, 1000, 5)
    result = {
        "benchmark": "lattice_cost",
        "machine": machine_info(device),
        "sigma": SIGMA,
        "target_time_ratio": 1.15,
        "workloads": {name: measure(name, num_samples, batch_size, repeats, device) for name in WORKLOADS},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in result["workloads"].items():
        print(f"{name}: lattice / float time {row['time_ratio']:.3f}")
    return result


if __name__ == "__main__":
    main()
