"""``train(cfg)``: compose data, model, method, callbacks, loggers and trainer from a Hydra config."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig

from rs_lightning import __version__
from rs_lightning.models import build_classifier
from rs_lightning.validation import require_at_least, require_positive

from .common import plain, tune_cpu_allocator


def validate_train_config(cfg: DictConfig) -> None:
    """Check values that are easy to get wrong, before any work."""
    require_positive("sigma", cfg.sigma)
    require_at_least("data.batch_size", cfg.data.batch_size, 1)
    require_at_least("optim.max_epochs", cfg.optim.max_epochs, 1)


def checkpoint_metadata(cfg: DictConfig, datamodule) -> dict:
    """What ``certify.py`` needs to rebuild and certify the model (stored in every checkpoint)."""
    return {
        "format": 1,
        "rs_lightning_version": __version__,
        "model": plain(cfg.model),
        "data": plain(cfg.data),
        "method": plain(cfg.method),
        "optim": plain(cfg.optim),
        "input_shape": list(datamodule.input_shape),
        "num_classes": int(datamodule.num_classes),
        "class_names": [str(c) for c in datamodule.class_names],
        "mean": list(datamodule.mean) if datamodule.mean is not None else None,
        "std": list(datamodule.std) if datamodule.std is not None else None,
        "seed": int(cfg.seed),
    }


def train(cfg: DictConfig, extra_callbacks: list[pl.Callback] | None = None) -> dict:
    """Train the configured method; returns ``{"checkpoint": path, "metrics": {...}, "output_dir": ...}``.

    ``extra_callbacks`` are added to the configured ones (for programmatic use, e.g. benchmarks).
    """
    validate_train_config(cfg)
    pl.seed_everything(cfg.seed, workers=True)
    if not torch.cuda.is_available():
        tune_cpu_allocator()
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    net = instantiate(cfg.model, input_shape=datamodule.input_shape, num_classes=datamodule.num_classes)
    method = instantiate(
        cfg.method,
        model=build_classifier(net, datamodule.mean, datamodule.std),
        sigma=cfg.sigma,
        optimizer=instantiate(cfg.optim.optimizer),
        scheduler=instantiate(cfg.optim.scheduler) if cfg.optim.get("scheduler") else None,
        noise_seed=cfg.seed,
    )
    method.metadata = checkpoint_metadata(cfg, datamodule)  # not via instantiate: it holds _target_ strings
    datamodule.train_with_index = method.needs_sample_index
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    callbacks += extra_callbacks or []
    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]
    if not loggers:  # nothing to report learning rates to
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    for logger in loggers:
        logger.log_hyperparams(plain(cfg))
    trainer.fit(method, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    for logger in loggers:  # W&B keeps its run open after fit: close it so a next run in this process is new
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            logger.experiment.finish()
    checkpoint = trainer.checkpoint_callback.last_model_path if trainer.checkpoint_callback else ""
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    if trainer.is_global_zero:
        print(f"checkpoint: {checkpoint}")
    return {"checkpoint": checkpoint, "metrics": metrics, "output_dir": str(Path(cfg.paths.output_dir))}
