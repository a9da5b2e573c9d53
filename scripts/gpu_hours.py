"""GPU-hours estimate per cell (docs/reproduce.md): reference GPU anchors x CPU-measured cost ratios.

    scripts/reproduce.sh --estimate      (= python scripts/gpu_hours.py from the repository root)
GPU_JSON=FILE: a make bench-gpu output (default bench/results/gpu.json), whose measured certification replaces
the anchors' and scales the training anchors.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from types import SimpleNamespace

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rs_lightning.analysis import published_numbers as pn
from rs_lightning.methods.cost import passes_per_image

ROOT = Path(__file__).resolve().parents[1]

# GPU-time anchors stated by the reference
P100_SECONDS_PER_EPOCH = {"cohen": 31.4, "smoothadv": 1990.1, "macer": 504.0}
"""CIFAR-10 ResNet-110 s/epoch on 1 P100 (RuntianZ/macer README timing table): Cohen
σ = 0.25, Salman (SmoothAdv, attack setting not stated) σ = 0.25, MACER σ = 0.25 (k = 16, batch 64)."""
CIFAR10_CERTIFY_SECONDS_PER_IMAGE = (14.0, 17.0)
"""CIFAR-10 ResNet-110 CERTIFY at N = 100,000: the time column of locuslab/smoothing's released
``data/certify/cifar10`` logs (GPU not stated)."""


def anchors() -> SimpleNamespace:
    """Seconds per certification draw and per Gaussian epoch on one GPU, and the CPU-measured cost ratios."""
    steps = json.loads((ROOT / "bench/results/method_steps.json").read_text())
    bench = {r["method"]: r for r in steps["results"] if "error" not in r}
    base = bench["gaussian"]["measured_passes"] / bench["gaussian"]["expected_passes"]
    overhead = {m: r["measured_passes"] / r["expected_passes"] / base for m, r in bench.items()}
    throughput = json.loads((ROOT / "bench/results/certify_throughput.json").read_text())
    rate = {
        r["case"]: r["engine"]["median_samples_per_s"]
        for r in throughput["results"]
        if r["setting"] == "fp32" and r["batch_size"] == 400
    }
    lenet_speedup = rate["lenet_mnist"] / rate["resnet110_cifar"]  # LeNet vs ResNet-110 samples/s (CPU, fp32)
    cert_s = statistics.mean(CIFAR10_CERTIFY_SECONDS_PER_IMAGE)  # ResNet-110, N = 1e5 (+ N0), reference GPU
    epoch_s = P100_SECONDS_PER_EPOCH["cohen"]  # Gaussian ResNet-110 CIFAR-10 epoch, 1 P100
    per_draw = {"cifar10": cert_s / 100_100, "mnist": cert_s / 100_100 / lenet_speedup}
    gauss_epoch = {"cifar10": epoch_s, "mnist": epoch_s * 60_000 / 50_000 / lenet_speedup}
    measured, speed = "", 1.0
    gpu_path = Path(os.environ.get("GPU_JSON") or ROOT / "bench/results/gpu.json")
    if gpu_path.is_file():  # a measured GPU: certification from it, training anchors scaled by its speed-up
        gpu = json.loads(gpu_path.read_text())
        cases = {"cifar10": "resnet110_cifar", "mnist": "lenet_mnist"}
        for dataset, case in cases.items():
            implied = ((gpu.get("cases") or {}).get(case) or {}).get("implied_certification") or {}
            if implied.get("fp32"):
                per_draw[dataset] = implied["fp32"]["seconds"] / implied["total_draws"]
        speed = per_draw["cifar10"] / (cert_s / 100_100)
        gauss_epoch = {d: s * speed for d, s in gauss_epoch.items()}
        device = gpu["machine"].get("device_name") or gpu["machine"].get("device", "?")
        measured = f"{gpu_path} ({device}; certification measured, training anchors x {speed:.3f})"
    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_")})


def forward_passes(method: dict, epochs: int) -> float:
    """acr_gaming's p-hat estimates as training-pass equivalents per image (a forward pass ~ 1/3 of one)."""
    ds = method["ds_epoch"] if method["ds_epoch"] >= 1 else int(method["ds_epoch"] * epochs)
    extra = method.get("discard_samples", 100) / 3 if method.get("discard_hard") else 0.0
    if method.get("reweight"):
        extra += len(range(ds, epochs, method.get("reweight_every", 10))) * method["reweight_samples"] / 3
    return extra


def estimate_rows(a: SimpleNamespace) -> tuple[list, dict]:
    """(dataset, σ, method, epochs, passes/epoch, overhead, train h, certify h) per cell that has an
    experiment file; CAT-RS's pretrain (train h, soft-label h) per dataset."""
    overhead, per_draw, gauss_epoch, speed = a.overhead, a.per_draw, a.gauss_epoch, a.speed
    rows, pretrain = [], {}
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for (dataset, method, sigma), cell in pn.PUBLISHED.items():
            if not (ROOT / f"conf/experiment/{cell.experiment}.yaml").is_file():
                continue
            cfg = compose("train", [f"experiment={cell.experiment}"])
            hyper = OmegaConf.to_container(cfg.method, resolve=True)
            epochs, images = int(cfg.optim.max_epochs), pn.TRAIN_IMAGES[dataset]
            if method == "acr_gaming":
                ds = hyper["ds_epoch"] if hyper["ds_epoch"] >= 1 else int(hyper["ds_epoch"] * epochs)
                total = sum(passes_per_image(method, hyper, e, ds) for e in range(epochs))
                total += forward_passes(hyper, epochs)
            else:
                total = epochs * passes_per_image(method, hyper)
            factor = overhead.get("gaussian" if method == "cohen" else method)
            if dataset == "cifar10" and method == "macer" and hyper["num_noise_vec"] == 16:
                train_s = epochs * P100_SECONDS_PER_EPOCH["macer"] * speed
                how = "measured (P100)" if speed == 1.0 else f"measured (P100) x {speed:.2f}"
            else:
                train_s = total * (factor or 1.0) * gauss_epoch[dataset]
                how = f"{factor:.2f}" if factor else "not measured (1)"
            draws = cell.protocol.num_images * (cell.protocol.n + cell.protocol.n0)
            cert_h = draws * per_draw[dataset] / 3600
            rows.append((dataset, sigma, method, epochs, total / epochs, how, train_s / 3600, cert_h))
            if method == "catrs" and dataset not in pretrain:
                pre = compose("train", [f"experiment=cohen_{dataset}_sigma025_catrs_pretrain"])
                soft = images * 10_000 * per_draw[dataset] / 3600
                pretrain[dataset] = (int(pre.optim.max_epochs) * gauss_epoch[dataset] / 3600, soft)
    return rows, pretrain


def hours(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def per_sigma(values: list, fmt) -> str:
    """One value if the three σ agree, else "a / b / c" (σ = 0.25 / 0.5 / 1.0)."""
    texts = [fmt(v) for v in values]
    return texts[0] if len(set(texts)) == 1 else " / ".join(texts)


def main() -> None:
    a = anchors()
    rows, pretrain = estimate_rows(a)
    groups: dict = {}
    for row in sorted(rows, key=lambda r: (r[0], pn.METHODS.index(r[2]), r[1])):
        groups.setdefault((row[0], row[2]), []).append(row)
    print(
        "| dataset | method | epochs | passes / image / epoch (× Gaussian) | CPU overhead | train h | "
        "certify h | total h |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (dataset, method), group in groups.items():
        extra = " + pretrain" if method == "catrs" else ""
        cols = [
            per_sigma([r[3] for r in group], str),
            per_sigma([r[4] for r in group], lambda v: f"{v:.1f}"),
            per_sigma([r[5] for r in group], str),
            per_sigma([r[6] for r in group], hours),
            per_sigma([r[7] for r in group], hours),
            per_sigma([r[6] + r[7] for r in group], hours) + extra,
        ]
        print(f"| {dataset} | {method} | " + " | ".join(cols) + " |")
    print("\n`a / b / c`: σ = 0.25 / 0.5 / 1.0 (one value: the same at every σ); h = hours on one GPU.")
    for dataset, (train_h, soft_h) in pretrain.items():
        print(
            f"\nCAT-RS pretrain, {dataset} (once for the three σ): Gaussian σ = 0.25 training "
            f"{hours(train_h)} h + soft labels (10,000 draws × {pn.TRAIN_IMAGES[dataset]:,} images) "
            f"{hours(soft_h)} h"
        )
    print(
        f"\nanchors: Gaussian ResNet-110 CIFAR-10 epoch {a.epoch_s} s (1 P100, MACER README); MACER k = 16 "
        f"epoch {P100_SECONDS_PER_EPOCH['macer']} s (same); CERTIFY {a.cert_s} s per CIFAR-10 image at "
        f"N = 1e5 (released logs); LeNet / ResNet-110 samples/s on this CPU = {a.lenet_speedup:.1f}"
    )
    print(f"measured GPU: {a.measured or 'none (bench/results/gpu.json absent)'}")


if __name__ == "__main__":
    main()
