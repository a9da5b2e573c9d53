"""Cost of one ARS certification sample relative to a vanilla (Cohen) one with the same base network.

``python -m bench.ars [--quick] [--threads T] [--out PATH]`` writes ``bench/results/ars_cost.json``. For each
setting, the engine (``sample_counts``, the code path of certify.py) draws the same number of noisy samples
of one input with (a) the base classifier alone (vanilla: f(x + σε)) and (b) the ARS pipeline around the
same classifier (two queries, the mask UNet, the average; Lyu et al., NeurIPS 2024) and (c) its static-mask
baseline; the three are interleaved over repeats and the medians compared. The paper reports 12 s (Cohen)
against 26 s (ARS) per certified input at k = 32 on an A100, i.e. about 2.2× (Lyu et al. 2024, as quoted
second-hand: not checked against the paper). Settings: the reference's CIFAR setting (ResNet-110 base, UNet
width 32, 3×32×32) and this project's offline benchmark (LeNet base, UNet width 8, cluttered MNIST 1×56×56).
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
from rs_lightning.models.ars import AdaptiveSmoothing, build_mask
from rs_lightning.smoothing import CertificationSpec, Phase, prepare, sample_counts

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "ars_cost.json"
SETTINGS = {
    "cifar_resnet110_k32": dict(
        shape=(3, 32, 32), width=32, net=lambda s: CIFARResNet(depth=110, input_shape=s, num_classes=10)
    ),
    "lenet_cluttered_mnist_k56": dict(
        shape=(1, 56, 56), width=8, net=lambda s: LeNet(input_shape=s, num_classes=10)
    ),
}


def time_samples(model, x: torch.Tensor, samples: int, batch: int) -> float:
    start = time.perf_counter()
    sample_counts(
        model,
        x,
        [0],
        phase=Phase.ESTIMATION,
        num_samples=samples,
        sigma=0.5,
        num_classes=10,
        batch_size=batch,
    )
    return time.perf_counter() - start


def bench_setting(name: str, samples: int, batch: int, repeats: int) -> dict:
    config = SETTINGS[name]
    shape = config["shape"]
    torch.manual_seed(0)
    classifier = build_classifier(config["net"](shape), None, None).eval()
    models = {"vanilla": classifier}
    for mode in ("ars", "static"):
        models[mode] = AdaptiveSmoothing(
            classifier, sigma=0.5, input_shape=shape, mode=mode, mask=build_mask(mode, shape, config["width"])
        ).eval()
    spec = CertificationSpec(sigma=0.5, batch_size=batch)
    prepared = {k: prepare(m, spec) for k, m in models.items()}
    x = torch.rand(1, *shape)
    for model in prepared.values():  # warm-up
        time_samples(model, x, batch, batch)
    times = {k: [] for k in prepared}
    for _ in range(repeats):  # interleaved, so load changes hit all three alike
        for key, model in prepared.items():
            times[key].append(time_samples(model, x, samples, batch))
    median = {k: statistics.median(v) for k, v in times.items()}
    return {
        "setting": name,
        "input_shape": list(shape),
        "mask_width": config["width"],
        "samples": samples,
        "batch_size": batch,
        "repeats": repeats,
        "seconds_median": median,
        "samples_per_s": {k: samples / v for k, v in median.items()},
        "ars_over_vanilla": median["ars"] / median["vanilla"],
        "static_over_vanilla": median["static"] / median["vanilla"],
        "paper_ars_over_vanilla": 26 / 12,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and repeats (smoke)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    samples, batch, repeats = (200, 100, 2) if args.quick else (2000, 400, 5)
    results = [bench_setting(name, samples, batch, repeats) for name in args.settings]
    out = {
        "benchmark": "ars_cost",
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "threads": args.threads,
        "torch": torch.__version__,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    for r in results:
        print(
            f"{r['setting']}: ARS / vanilla = {r['ars_over_vanilla']:.2f}x, static / vanilla = "
            f"{r['static_over_vanilla']:.2f}x (paper, A100: 2.2x)"
        )
    return out


if __name__ == "__main__":
    main()
