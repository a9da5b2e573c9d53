"""``soft_labels(cfg)``: CAT-RS preprocessing (Jeong, Kim & Shin, AAAI 2023; alinlab/smoothing-catrs
``code/smooth_prediction.py``, ``code/datasets.py``).

For every **training** image (split ``train``, i.e. with its augmentation, one augmented draw per image),
count the checkpoint's hard predictions over ``num_samples`` Gaussian draws and save
``p_b = counts / num_samples`` as a float32 ``.npy`` of shape [N_train, K] in dataset order: the KL target
(and, with ``confidence_mask``, the Binomial probability) of ``method=catrs``.

Noise of image ``i`` is seeded by ``(seed, i, Phase.PREDICTION)`` through the certification engine, so the
file does not depend on batch sizes. The engine has no training-set phase; PREDICTION is reused on purpose:
these are training images, never certified, so sharing a seed stream with PREDICT on test images of the
same index is harmless. Augmentation draws come from torch's global RNG, seeded with ``seed``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader
from tqdm import tqdm

from rs_lightning.cpu_allocator import tune_cpu_allocator
from rs_lightning.models.checkpoint import classifier_from_checkpoint, read_checkpoint, require_fit
from rs_lightning.smoothing.engine import sample_counts
from rs_lightning.smoothing.noise import Phase
from rs_lightning.smoothing.pipeline import at_sigma
from rs_lightning.smoothing.resolve import resolve_sigma
from rs_lightning.validation import ConfigError, require_at_least

from .common import checkpoint_datamodule, require_writable_dir, resolve_device


def _output(cfg: DictConfig) -> Path:
    output = Path(cfg.output)
    if output.suffix != ".npy":
        raise ConfigError("output", str(output), "a path ending in .npy")
    if output.exists() and not cfg.overwrite:
        raise ConfigError(
            "output", str(output), "a file that does not exist yet", "add overwrite=true to replace it"
        )
    return output


def save_atomically(array: np.ndarray, output: Path) -> None:
    """``np.save`` into a temporary file next to ``output``, then rename it over ``output``."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            np.save(f, array)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)


def soft_labels(cfg: DictConfig) -> dict:
    """Write ``cfg.output`` ([N_train, K] float32, rows sum to 1); returns a small summary dict."""
    require_at_least("num_samples", cfg.num_samples, 1)
    require_at_least("batch_size", cfg.batch_size, 1)
    require_at_least("num_workers", cfg.num_workers, 0)
    output = _output(cfg)
    require_writable_dir(output.parent, "output", value=output)
    device = resolve_device(cfg.device)
    if device.type == "cpu":
        tune_cpu_allocator()
    state, meta = read_checkpoint(Path(cfg.checkpoint), map_location=device)
    require_fit(state, meta, cfg.checkpoint)  # on the meta device: the metadata fits the weights
    dataset = checkpoint_datamodule(cfg, meta).dataset("train")  # its classes, before the model is built
    model = classifier_from_checkpoint(state, meta, cfg.checkpoint, map_location=device)
    sigma = resolve_sigma(cfg.sigma, meta.sigma, bool(cfg.override_sigma))
    model = at_sigma(model, sigma)  # a pipeline or diffusion denoiser at that sigma, the loaded one unchanged
    num_classes = int(meta.num_classes)

    torch.manual_seed(cfg.seed)  # the one augmentation draw per image
    per_call = max(1, cfg.batch_size // cfg.num_samples)  # images whose draws fill one forward batch
    loader = DataLoader(dataset, batch_size=per_call, shuffle=False, num_workers=cfg.num_workers)
    probs = np.empty((len(dataset), num_classes), dtype=np.float32)
    labels = np.empty(len(dataset), dtype=np.int64)
    start = 0
    with tqdm(
        total=len(dataset), unit="image", desc="soft labels", dynamic_ncols=True, mininterval=1.0
    ) as bar:
        for x, y in loader:
            indices = range(start, start + len(x))
            counts = sample_counts(
                model,
                x.to(device),
                indices,
                phase=Phase.PREDICTION,
                num_samples=cfg.num_samples,
                sigma=sigma,
                num_classes=num_classes,
                batch_size=cfg.batch_size,
                seed=cfg.seed,
            )
            probs[start : start + len(x)] = (counts.cpu().double() / cfg.num_samples).numpy()
            labels[start : start + len(x)] = np.asarray(y)
            start += len(x)
            bar.update(len(x))
    save_atomically(probs, output)
    summary = {
        "output": str(output),
        "shape": list(probs.shape),
        "sigma": sigma,
        "num_samples": int(cfg.num_samples),
        "seed": int(cfg.seed),
        "checkpoint": str(Path(cfg.checkpoint).resolve()),
        "mean_true_label_probability": float(probs[np.arange(len(labels)), labels].mean()),
    }
    print(
        f"soft labels {summary['shape']} (sigma={sigma:g}, N={cfg.num_samples}) -> {output}\n"
        f"  mean p_b[y] on the training set: {summary['mean_true_label_probability']:.4f}"
    )
    return summary
