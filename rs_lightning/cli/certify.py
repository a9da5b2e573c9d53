"""``certify(cfg)``: CERTIFY a trained checkpoint on a test subset, appending rows to ``certify.tsv``.

Writes ``certify.tsv`` (row by row, resumable), ``settings.json``, ``summary.json`` and two PNG plots
into ``output_dir``. A rerun into the same folder skips the indices already certified; a rerun with
different statistical settings (sigma, n0, n, alpha, seed, split, checkpoint, model) is refused.
``checkpoint=null`` certifies a parameter-free model (``model=constant``, Sun et al. 2025 Thm. 1) built from
``model=``, ``data=`` and ``sigma=``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import nn
from tqdm import tqdm

from rs_lightning.analysis.metrics import pa_true_label, radius_grid, summarize
from rs_lightning.analysis.plots import certified_accuracy_figure, pa_ecdf_figure, save_figure
from rs_lightning.analysis.results import ResultWriter, read_results
from rs_lightning.data.subset import subset_indices
from rs_lightning.models.checkpoint import load_classifier
from rs_lightning.models.normalize import build_classifier
from rs_lightning.smoothing import certify_dataset
from rs_lightning.smoothing.engine import check_certify_args
from rs_lightning.smoothing.noise import NOISE_BLOCK
from rs_lightning.validation import ConfigError, require_at_least, require_positive

from .common import checkpoint_datamodule, plain, resolve_device, tune_cpu_allocator

RESUME_KEYS = ("sigma", "n0", "n", "alpha", "seed", "split", "checkpoint_sha256", "noise_block", "model")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_sigma(cfg: DictConfig, train_sigma: float) -> float:
    """The checkpoint's sigma, unless ``sigma=`` is given together with ``override_sigma=true``."""
    if cfg.sigma is None or float(cfg.sigma) == float(train_sigma):
        return float(train_sigma)
    require_positive("sigma", cfg.sigma)
    if not cfg.override_sigma:
        raise ConfigError(
            "sigma",
            cfg.sigma,
            f"the checkpoint's training sigma {train_sigma}",
            "To certify at another noise level, add override_sigma=true (it is recorded in settings.json)",
        )
    return float(cfg.sigma)


def parameter_free_classifier(cfg: DictConfig, device: torch.device) -> tuple[nn.Module, dict, object]:
    """``checkpoint=null``: build ``cfg.model`` on ``cfg.data`` at ``cfg.sigma``; returns (model, meta, data).

    Only a model without parameters (e.g. ``model=constant``) is accepted: any other would certify random
    weights.
    """
    for key, example in (("model", "model=constant"), ("data", "data=digits")):
        if cfg.get(key) is None:
            raise ConfigError(key, None, f"set when checkpoint=null (e.g. {example})")
    if cfg.sigma is None:
        raise ConfigError("sigma", None, "> 0", "With checkpoint=null there is no training sigma to take")
    require_positive("sigma", cfg.sigma)
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup()
    net = instantiate(cfg.model, input_shape=datamodule.input_shape, num_classes=datamodule.num_classes)
    if any(p.numel() for p in net.parameters()):
        raise ConfigError(
            "checkpoint",
            None,
            f"a path for {cfg.model.get('_target_')}, which has parameters: its weights would be random; "
            "pass checkpoint=...",
        )
    model = build_classifier(net, datamodule.mean, datamodule.std).to(device).eval()
    meta = {"sigma": None, "model": plain(cfg.model), "num_classes": int(datamodule.num_classes)}
    return model, meta, datamodule


def load_model_and_data(cfg: DictConfig, checkpoint: Path | None, device: torch.device):
    """``(model, meta, datamodule, sigma)`` from the checkpoint, or from ``model=``/``data=``/``sigma=`` for a
    parameter-free model when ``checkpoint=null``."""
    if checkpoint is None:
        model, meta, datamodule = parameter_free_classifier(cfg, device)
        return model, meta, datamodule, float(cfg.sigma)
    if cfg.get("model") is not None:
        raise ConfigError(
            "model", cfg.model.get("_target_"), "unset when checkpoint= is given", "The checkpoint has it"
        )
    model, meta = load_classifier(checkpoint, map_location=device)
    return model, meta, checkpoint_datamodule(cfg, meta), resolve_sigma(cfg, meta["sigma"])


def _check_resume(settings_path: Path, settings: dict) -> None:
    if not settings_path.exists():
        return
    old = json.loads(settings_path.read_text())
    settings = json.loads(json.dumps(settings))  # compare as stored (tuples become lists)
    changed = {k: (old.get(k), settings[k]) for k in RESUME_KEYS if old.get(k) != settings[k]}
    if changed:
        detail = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in changed.items())
        raise ConfigError(
            "output_dir",
            str(settings_path.parent),
            "a folder certified with the same settings",
            f"It holds results for other settings ({detail}); choose another output_dir so no rows are mixed",
        )


def format_summary(summary: dict) -> str:
    """A plain-text table of one run's summary."""
    s = summary["settings"]
    lines = [
        f"certified {summary['num_inputs']} inputs  sigma={s['sigma']}  n0={s['n0']}  n={s['n']}  "
        f"alpha={s['alpha']}",
        f"  clean accuracy (smoothed)  {summary['clean_accuracy']:.4f}",
        f"  abstain rate               {summary['abstain_rate']:.4f}",
        f"  ACR                        {summary['acr']:.4f}",
        f"  mean pA (true label)       {summary['pa_mean']:.4f}",
        "  radius   certified accuracy",
    ]
    lines += [f"  {float(r):<8g} {a:.4f}" for r, a in summary["certified_accuracy"].items()]
    ecdf = dict(zip(summary["pa_ecdf"]["x"], summary["pa_ecdf"]["y"], strict=True))
    lines.append("  pA ECDF: " + "  ".join(f"y({x:g})={ecdf[x]:.3f}" for x in (0.5, 0.9, 0.99, 0.999, 1.0)))
    return "\n".join(lines)


def validate_certify_config(cfg: DictConfig) -> None:
    """Check values that are easy to get wrong, before any work."""
    check_certify_args(sigma=cfg.sigma or 1.0, n0=cfg.n0, n=cfg.n, alpha=cfg.alpha, batch_size=cfg.batch_size)
    require_at_least("skip", cfg.skip, 1)
    require_at_least("start", cfg.start, 0)
    if cfg.max is not None:
        require_at_least("max", cfg.max, cfg.start + 1)
    if cfg.split not in ("train", "test"):
        raise ConfigError("split", cfg.split, "train or test")


def certify(cfg: DictConfig) -> dict:
    """Certify ``cfg.checkpoint``; returns the summary dict (also written to ``summary.json``)."""
    validate_certify_config(cfg)
    device = resolve_device(cfg.device)
    if device.type == "cpu":
        tune_cpu_allocator()
    checkpoint = None if cfg.checkpoint is None else Path(cfg.checkpoint)
    model, meta, datamodule, sigma = load_model_and_data(cfg, checkpoint, device)
    dataset = datamodule.dataset(cfg.split)
    indices = subset_indices(len(dataset), cfg.skip, cfg.start, cfg.max)

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        "sigma": sigma,
        "train_sigma": None if meta["sigma"] is None else float(meta["sigma"]),
        "sigma_overridden": meta["sigma"] is not None and sigma != float(meta["sigma"]),
        "n0": cfg.n0,
        "n": cfg.n,
        "alpha": cfg.alpha,
        "seed": cfg.seed,
        "split": cfg.split,
        "batch_size": cfg.batch_size,
        "noise_block": NOISE_BLOCK,
        "device": device.type,
        "subset": {"skip": cfg.skip, "start": cfg.start, "max": cfg.max, "num_inputs": len(indices)},
        "checkpoint": None if checkpoint is None else str(checkpoint.resolve()),
        "checkpoint_sha256": None if checkpoint is None else _sha256(checkpoint),
        "model": meta["model"],
        "data": datamodule.describe(),
        "sampling": "cohen",
    }
    _check_resume(out / "settings.json", settings)
    (out / "settings.json").write_text(json.dumps(settings, indent=2))

    with ResultWriter(out / "certify.tsv") as writer:
        todo = [i for i in indices if i not in writer.done]
        progress = tqdm(
            total=len(indices),
            initial=len(indices) - len(todo),
            unit="input",
            desc="certify",
            dynamic_ncols=True,
            mininterval=1.0,
        )
        for result, labels, seconds in certify_dataset(
            model,
            dataset,
            todo,
            sigma=sigma,
            num_classes=int(meta["num_classes"]),
            n0=cfg.n0,
            n=cfg.n,
            alpha=cfg.alpha,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            device=device,
        ):
            for j, label in enumerate(labels):
                predict = int(result.predict[j])
                writer.write(
                    {
                        "idx": result.index[j],
                        "label": label,
                        "predict": predict,
                        "radius": result.radius[j],
                        "correct": int(predict == label),
                        "time": seconds,
                        "nA": result.n_a[j],
                        "n": result.n,
                        "pA_lower": result.pa_lower[j],
                        "pA_hat": result.pa_hat[j],
                        "n0": result.n0,
                        "nA0": result.n_a0[j],
                    }
                )
            progress.update(len(labels))
        progress.close()

    rows = read_results(out / "certify.tsv")
    keep = np.isin(rows["idx"], indices)
    rows = {k: v[keep] for k, v in rows.items()}
    radii = radius_grid(sigma, cfg.n, cfg.alpha, cfg.radius_step)
    summary = summarize(rows["radius"], rows["correct"], rows["predict"], rows["pA_hat"], radii=radii)
    summary["settings"] = settings
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    label = f"sigma={sigma:g}, n={cfg.n}"
    save_figure(
        certified_accuracy_figure({label: (rows["radius"], rows["correct"])}), out / "certified_accuracy.png"
    )
    save_figure(pa_ecdf_figure({label: pa_true_label(rows["pA_hat"], rows["correct"])}), out / "pa_ecdf.png")
    print(format_summary(summary))
    print(f"results: {out}")
    return summary
