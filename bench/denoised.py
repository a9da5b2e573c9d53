"""Cost of one denoised-smoothing certification sample, f(D(x + δ)), relative to the bare classifier f(x + δ).

``python -m bench.denoised [--quick] [--threads T] [--out PATH]`` writes ``bench/results/denoised_cost.json``.
For each setting the engine (``sample_counts``, the code path of certify.py) draws the same number of noisy
samples of one input through f alone and through f∘D, at fp32 and bf16 (``CertificationSpec.precision``),
interleaved over repeats; the medians give draws/s and the ratio f∘D / f. Denoisers: DnCNN at the paper's
17 × 64 (Salman et al., NeurIPS 2020) and at the MNIST evidence's 10 × 32, and the one-step DDPM of
``method=diffusion`` (Carlini et al., ICLR 2023; the 0.7M-parameter UNet of conf/method/diffusion.yaml).
Settings: LeNet on MNIST (1×28×28) and ResNet-110 on CIFAR-10 (3×32×32), random weights (the cost does not
depend on them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from rs_lightning.models import CIFARResNet, LeNet, build_classifier
from rs_lightning.models.denoisers import DenoisedClassifier, DnCNN
from rs_lightning.models.diffusion import DiffusionDenoiser
from rs_lightning.smoothing import CertificationSpec, Phase, prepare, sample_counts

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "denoised_cost.json"


def _ddpm(shape):
    denoiser = DiffusionDenoiser(input_shape=shape)
    denoiser.sigma = 0.25
    return denoiser


DENOISERS = {
    "dncnn_17x64": lambda s: DnCNN(input_shape=s, depth=17, channels=64),
    "dncnn_10x32": lambda s: DnCNN(input_shape=s, depth=10, channels=32),
    "ddpm_one_step": _ddpm,
}
SETTINGS = {
    "lenet_mnist": dict(shape=(1, 28, 28), net=lambda s: LeNet(input_shape=s, num_classes=10)),
    "resnet110_cifar10": dict(
        shape=(3, 32, 32), net=lambda s: CIFARResNet(depth=110, input_shape=s, num_classes=10)
    ),
}
PRECISIONS = ("32", "bf16")


def time_samples(model, x: torch.Tensor, samples: int, batch: int) -> float:
    start = time.perf_counter()
    sample_counts(
        model,
        x,
        [0],
        phase=Phase.ESTIMATION,
        num_samples=samples,
        sigma=0.25,
        num_classes=10,
        batch_size=batch,
    )
    return time.perf_counter() - start


def bench_setting(name: str, denoisers: list[str], samples: int, batch: int, repeats: int) -> dict:
    config = SETTINGS[name]
    shape = config["shape"]
    torch.manual_seed(0)
    classifier = build_classifier(config["net"](shape), None, None).eval()
    models = {"f": classifier}
    for key in denoisers:
        models[key] = DenoisedClassifier(DENOISERS[key](shape).eval(), classifier).eval()
    prepared = {
        (key, p): prepare(m, CertificationSpec(sigma=0.25, batch_size=batch, precision=p))
        for key, m in models.items()
        for p in PRECISIONS
    }
    x = torch.rand(1, *shape)
    for model in prepared.values():  # warm-up
        time_samples(model, x, batch, batch)
    times = {k: [] for k in prepared}
    for _ in range(repeats):  # interleaved, so load changes hit every model alike
        for key, model in prepared.items():
            times[key].append(time_samples(model, x, samples, batch))
    median = {k: statistics.median(v) for k, v in times.items()}
    rows = {}
    for p in PRECISIONS:
        rows[p] = {
            "draws_per_s": {key: samples / median[(key, p)] for key in models},
            "over_f": {key: median[(key, p)] / median[("f", p)] for key in denoisers},
        }
    return {
        "setting": name,
        "input_shape": list(shape),
        "samples": samples,
        "batch_size": batch,
        "repeats": repeats,
        "precision": rows,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and repeats (smoke)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--denoisers", nargs="+", choices=list(DENOISERS), default=list(DENOISERS))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    samples, batch, repeats = (64, 32, 1) if args.quick else (1000, 250, 3)
    results = [bench_setting(name, args.denoisers, samples, batch, repeats) for name in args.settings]
    cpu = Path("/proc/cpuinfo")
    model_name = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in cpu.read_text().splitlines()
                if line.startswith("model name")
            ),
            None,
        )
        if cpu.exists()
        else None
    )
    out = {
        "benchmark": "denoised_cost",
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": model_name or platform.processor() or platform.machine(),
        "threads": args.threads,
        "torch": torch.__version__,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    for r in results:
        for p, row in r["precision"].items():
            ratios = ", ".join(f"{k} {v:.1f}x" for k, v in row["over_f"].items())
            print(f"{r['setting']} {p}: f {row['draws_per_s']['f']:.0f} draws/s; f∘D / f: {ratios}")
    return out


if __name__ == "__main__":
    main()
