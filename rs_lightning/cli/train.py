"""``train(cfg)``: compose data, model, method, callbacks, loggers and trainer from a Hydra config."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import uuid
from pathlib import Path

import lightning.pytorch as pl
import torch
from hydra.utils import get_class, instantiate
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig
from torch.multiprocessing.spawn import ProcessExitedException

from rs_lightning import __version__
from rs_lightning.cpu_allocator import tune_cpu_allocator
from rs_lightning.data.registry import DATA_MODULES
from rs_lightning.interrupts import Interrupted, launcher_passes_signals_on
from rs_lightning.loggers import ResumableCSVLogger, trained_batches
from rs_lightning.methods.base import SmoothingMethod, check_training_noise
from rs_lightning.models import build_classifier
from rs_lightning.models.checkpoint import CHECKPOINT_KEY, CheckpointMeta, check_training_checkpoint
from rs_lightning.models.registry import MODELS
from rs_lightning.models.resume import RESUME_MUST_MATCH, check_resumable
from rs_lightning.models.weights import WEIGHTS_KEY, architecture, load_weights
from rs_lightning.runs import try_flock
from rs_lightning.validation import ConfigError, require_at_least, require_positive, require_share

from .common import check_trainer_config, plain, require_writable_dir


def validate_train_config(cfg: DictConfig) -> None:
    """Check values that are easy to get wrong, before any work. The model and data classes must be
    registered (``rs_lightning/models/registry.py``; a data module by being defined in a module of
    ``rs_lightning/data/``): certify.py rebuilds a checkpoint's classes only from those registries, so another
    class would train a model nobody can load."""
    for key, registry in (("model", MODELS), ("data", DATA_MODULES)):
        target = cfg[key].get("_target_")
        if target not in registry:
            where = (
                f"register it under the entry-point group {registry.group!r} of an installed package "
                '(docs/training.md, "Your own model")'
                if registry.group
                else f"define the class in a module of rs_lightning/{key}/ (each one there is registered)"
            )
            raise ConfigError(
                f"{key}._target_",
                target,
                f"a registered {registry.kind}",
                f"certify.py rebuilds checkpoints only from registered classes; {where}",
            )
    weights = cfg.model.get(WEIGHTS_KEY)
    if weights is not None and not Path(str(weights)).is_file():
        raise ConfigError(
            f"model.{WEIGHTS_KEY}",
            str(weights),
            "an existing weights file",
            "a local .safetensors file or .pt/.pth state dict (no hub is contacted)",
        )
    require_positive("sigma", cfg.sigma)
    _check_noise(cfg)
    require_share("on_nonfinite_loss_max_share", cfg.get("on_nonfinite_loss_max_share", 0.1))
    require_at_least("data.batch_size", cfg.data.batch_size, 1)
    require_at_least("optim.max_epochs", cfg.optim.max_epochs, 1)


def _check_noise(cfg: DictConfig) -> None:
    """The training noise must be one the method trains with (:attr:`SmoothingMethod.noises`); a method
    class that cannot be imported is left to Hydra's own error when it is built."""
    try:
        method = get_class(str(cfg.method._target_))
    except Exception:  # noqa: BLE001 (reported by instantiate, with Hydra's message)
        return
    if isinstance(method, type) and issubclass(method, SmoothingMethod):
        check_training_noise(method, cfg.get("noise", "gaussian"), cfg.method)


HPC_CHECKPOINT = re.compile(r"hpc_ckpt_(\d+)\.ckpt")
"""Lightning's SLURM checkpoints (``hpc_ckpt_<N>.ckpt`` in the trainer's ``default_root_dir``; the largest N
is the newest)."""


def hpc_folder(cfg: DictConfig) -> Path:
    """Where Lightning writes and looks for ``hpc_ckpt_<N>.ckpt``: the trainer's ``default_root_dir``."""
    return Path(cfg.trainer.get("default_root_dir") or os.getcwd())


def newest_hpc_checkpoint(cfg: DictConfig) -> Path | None:
    """The checkpoint Lightning's ``ckpt_path="hpc"`` (and its SLURM auto-resume) would load, or None."""
    names = [
        (m, p) for p in hpc_folder(cfg).glob("hpc_ckpt_*.ckpt") if (m := HPC_CHECKPOINT.fullmatch(p.name))
    ]
    return max(names, key=lambda found: int(found[0].group(1)))[1] if names else None


def resume_checkpoint(cfg: DictConfig) -> tuple[str | None, dict | None]:
    """``(path, checkpoint)`` to resume from, or ``(None, None)`` for a new run.

    Every way of resuming becomes one file here, loaded safely and checked against this run's settings
    (:func:`check_resume_matches`) and its epochs before any work: ``ckpt_path=last`` means
    ``<paths.output_dir>/checkpoints/last.ckpt`` (a new run when there is none yet, so a requeued job can
    always pass it); ``ckpt_path=hpc`` the newest ``hpc_ckpt_<N>.ckpt`` Lightning's SLURM support wrote, which
    a SLURM job without ``ckpt_path`` resumes too (Lightning's auto-resume; the newer of it and
    ``last.ckpt``); a path that file. Lightning's
    ``best`` and model-registry names are refused: they are resolved inside the fit, where no check could
    come first. A new run into a folder that already holds a checkpoint is refused: it would overwrite it
    and mix the logs.
    """
    output_dir = Path(cfg.paths.output_dir)
    last = output_dir / "checkpoints" / "last.ckpt"
    hpc = newest_hpc_checkpoint(cfg)
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path in (None, "") and hpc is not None and SLURMEnvironment.detect():
        newest = max([hpc, last] if last.exists() else [hpc], key=lambda path: path.stat().st_mtime)
        print(f"SLURM job with {hpc.name} in {hpc.parent}: resuming {newest} (Lightning's auto-resume)")
        ckpt_path = str(newest)
    if ckpt_path in (None, ""):
        for found, how in ((last, "ckpt_path=last"), (hpc, "ckpt_path=hpc")):
            if found is not None and found.exists():
                raise ConfigError(
                    "paths.output_dir",
                    str(output_dir),
                    "a folder without a training run",
                    f"it holds {found}: resume it with {how}, or choose another folder",
                )
        return None, None
    if ckpt_path == "last":
        if not last.exists():
            print(f"ckpt_path=last: no checkpoint in {last.parent} yet, starting a new run")
            return None, None
        ckpt_path = str(last)
    elif ckpt_path == "hpc":
        if hpc is None:
            raise ConfigError(
                "ckpt_path",
                "hpc",
                "a name with a checkpoint behind it",
                f"there is no hpc_ckpt_<N>.ckpt in {hpc_folder(cfg)}; pass ckpt_path=last or a file",
            )
        ckpt_path = str(hpc)
    elif str(ckpt_path) == "best" or str(ckpt_path).startswith("registry"):
        raise ConfigError(
            "ckpt_path",
            ckpt_path,
            "last, hpc or a checkpoint file",
            "Lightning resolves that name inside the fit, where it could not be checked against this run's "
            "settings first; pass the checkpoint file's path",
        )
    checkpoint = check_training_checkpoint(ckpt_path)
    check_resume_matches(cfg, checkpoint, ckpt_path)
    check_epochs_left(cfg, checkpoint, ckpt_path)
    return ckpt_path, checkpoint


def _value(cfg: DictConfig, key: str):
    value = cfg.get(key, "gaussian" if key == "noise" else None)  # no noise configured: Gaussian
    return plain(value) if isinstance(value, DictConfig) else value


def check_resume_matches(cfg: DictConfig, checkpoint: dict, ckpt_path: str | None = None) -> None:
    """Refuse to resume with another method, sigma, model, data, recipe or seed than the checkpoint's
    (:func:`~rs_lightning.models.resume.check_resumable`, the rule every method applies again to the
    file Lightning loads)."""
    saved = CheckpointMeta.from_dict(checkpoint[CHECKPOINT_KEY])
    now = CheckpointMeta(**{key: _value(cfg, key) for key in RESUME_MUST_MATCH})
    check_resumable(saved, now, cfg.get("ckpt_path") if ckpt_path is None else ckpt_path)


def trained_epochs(checkpoint: dict) -> int:
    """Epochs a training checkpoint has completed (Lightning's ``current_epoch`` after restoring it)."""
    progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {})
    return int(progress.get("current", {}).get("completed", checkpoint.get("epoch", 0)))


def check_epochs_left(cfg: DictConfig, checkpoint: dict, ckpt_path: str) -> None:
    """A resume with ``optim.max_epochs`` below the epochs the checkpoint has trained is refused (Lightning's
    MisconfigurationException, a traceback, otherwise); equal ones: already done, said in one line."""
    done, wanted = trained_epochs(checkpoint), int(cfg.optim.max_epochs)
    if done > wanted:
        raise ConfigError(
            "optim.max_epochs",
            wanted,
            f">= {done}, the epochs {ckpt_path} has already trained",
            "a run cannot be shortened after the fact: certify an earlier epoch's checkpoint "
            "(epochNNN.ckpt), or train a new run with the shorter schedule in another folder",
        )
    if done == wanted:
        print(f"{ckpt_path} has already trained optim.max_epochs={wanted} epochs: nothing left to train")


def checkpoint_metadata(cfg: DictConfig, datamodule) -> CheckpointMeta:
    """What ``certify.py`` needs to rebuild and certify the model (stored in every checkpoint, with the
    method's sigma and noise)."""
    return CheckpointMeta(
        rs_lightning_version=__version__,
        model=plain(cfg.model),
        data=plain(cfg.data),
        method=plain(cfg.method),
        optim=plain(cfg.optim),
        input_shape=list(datamodule.input_shape),
        num_classes=int(datamodule.num_classes),
        class_names=[str(c) for c in datamodule.class_names],
        mean=list(datamodule.mean) if datamodule.mean is not None else None,
        std=list(datamodule.std) if datamodule.std is not None else None,
        seed=int(cfg.seed),
    )


def lock_output_dir(output_dir: str | Path):
    """Hold an exclusive ``flock`` on ``<output_dir>/.train.lock`` while this run trains (the launching
    process, global rank 0, only; released when the process ends). A second train.py on the same folder —
    e.g. ``ckpt_path=last`` started twice — would resume from the same checkpoint and write interleaved
    checkpoints and log rows; it is refused with a ConfigError before any work instead."""
    if rank_zero_only.rank != 0 or os.environ.get("NODE_RANK", "0") != "0":  # other ranks use rank 0's lock
        return None
    handle = try_flock(Path(output_dir) / ".train.lock")
    if handle is None:
        raise ConfigError(
            "paths.output_dir",
            str(output_dir),
            "a folder no other train.py is training in",
            "Another running train.py holds it (same hydra.run.dir); wait for it, or choose another folder",
        ) from None
    return handle


def train(cfg: DictConfig, extra_callbacks: list[pl.Callback] | None = None) -> dict:
    """Train the configured method; returns ``{"checkpoint": path, "metrics": {...}, "output_dir": ...}``.

    ``extra_callbacks`` are added to the configured ones (for programmatic use, e.g. benchmarks).
    """
    validate_train_config(cfg)
    require_writable_dir(cfg.paths.output_dir, "paths.output_dir")
    check_trainer_config(cfg.trainer)
    lock = lock_output_dir(cfg.paths.output_dir)
    try:
        return _train(cfg, extra_callbacks)
    finally:
        if lock is not None:
            lock.close()


def build_method(cfg: DictConfig, datamodule) -> pl.LightningModule:
    """The training method (``cfg.method``) around ``cfg.model`` built for the data's shape and classes,
    after a build on the meta device shows that its training state fits in memory."""
    from rs_lightning.models.size import require_trainable_size, training_device

    config = architecture(plain(cfg.model))

    def build():
        return instantiate(config, input_shape=datamodule.input_shape, num_classes=datamodule.num_classes)

    require_trainable_size(build, "model", config, training_device(cfg.trainer))
    net = build()
    if cfg.model.get(WEIGHTS_KEY) is not None:
        load_weights(net, cfg.model[WEIGHTS_KEY], f"model.{WEIGHTS_KEY}")
    return instantiate(
        cfg.method,
        model=build_classifier(net, datamodule.mean, datamodule.std),
        sigma=cfg.sigma,
        noise=cfg.get("noise", "gaussian"),
        optimizer=instantiate(cfg.optim.optimizer),
        scheduler=instantiate(cfg.optim.scheduler) if cfg.optim.get("scheduler") else None,
        noise_seed=cfg.seed,
        on_nonfinite_loss=cfg.get("on_nonfinite_loss", "stop"),
        on_nonfinite_loss_max_share=cfg.get("on_nonfinite_loss_max_share", 0.1),
        scheduler_epoch_offset=cfg.optim.get("scheduler_epoch_offset", 0),
    )


def _train(cfg: DictConfig, extra_callbacks: list[pl.Callback] | None) -> dict:
    """:func:`train` once its configuration is checked and its output folder locked."""
    ckpt_path, resumed = resume_checkpoint(cfg)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)  # its "Seed set" line went to stderr
    if not torch.cuda.is_available():
        tune_cpu_allocator()
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    method = build_method(cfg, datamodule)
    method.metadata = checkpoint_metadata(cfg, datamodule)  # not via instantiate: it holds _target_ strings
    datamodule.train_with_index = method.needs_sample_index
    method.prepare(tuple(datamodule.input_shape), resuming=ckpt_path is not None)
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    callbacks += extra_callbacks or []
    loggers = build_loggers(cfg, resumed)
    wandb_ids = [logger.version for logger in loggers if isinstance(logger, WandbLogger)]
    if wandb_ids:
        method.metadata = dataclasses.replace(method.metadata, wandb_run_id=wandb_ids[0])
    if not loggers:  # nothing to report learning rates to
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    for logger in loggers:
        logger.log_hyperparams(plain(cfg))
    fit_or_interrupted(trainer, method, datamodule, ckpt_path)
    for logger in loggers:  # W&B keeps its run open after fit: close it so a next run in this process is new
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            logger.experiment.finish()
    checkpoint = last_checkpoint(trainer)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    if trainer.is_global_zero:
        print(f"checkpoint: {checkpoint or '(none written: no checkpoint callback)'}")
    return {"checkpoint": checkpoint, "metrics": metrics, "output_dir": str(Path(cfg.paths.output_dir))}


def fit_or_interrupted(trainer: pl.Trainer, method, datamodule, ckpt_path: str | None) -> None:
    """``trainer.fit``; a fit stopped by SIGINT or SIGTERM ends in
    :class:`~rs_lightning.interrupts.Interrupted` (exit status 130 or 143, after
    :class:`~rs_lightning.callbacks.interrupt.CheckpointOnInterrupt` wrote ``last.ckpt``), also where
    Lightning or spawned ranks would report it otherwise: Lightning's own ``SIGTERMException`` (a
    ``SystemExit(None)``: status 0, "finished"), its ``exit(1)`` after a second Ctrl-C, and the exit status
    of ranks that stopped (``strategy=ddp_spawn``), a failure to their launcher."""
    with launcher_passes_signals_on(trainer) as received:
        try:
            trainer.fit(method, datamodule=datamodule, ckpt_path=ckpt_path)
        except Interrupted:
            raise
        except SIGTERMException as stop:  # Lightning's, for a SIGTERM before this fit's handlers were set
            raise Interrupted(signal.SIGTERM) from stop
        except ProcessExitedException as stop:
            interrupted = (
                Interrupted(received[0]) if received else Interrupted.from_exit_status(stop.exit_code)
            )
            if interrupted is None:
                raise
            raise interrupted from None
        except SystemExit as stop:
            if isinstance(stop.__context__, KeyboardInterrupt):  # Lightning's exit(1) after Ctrl-C Ctrl-C
                raise Interrupted(signal.SIGINT) from None
            raise


def last_checkpoint(trainer: pl.Trainer) -> str:
    """The run's ``last.ckpt``: Lightning's record of it or, after ``strategy=ddp_spawn`` (whose spawned ranks
    keep that record to themselves), the file in the checkpoint callback's folder; "" without one."""
    callback = trainer.checkpoint_callback
    if callback is None:
        return ""
    if callback.last_model_path:
        return callback.last_model_path
    last = Path(callback.dirpath or "") / f"{callback.CHECKPOINT_NAME_LAST}{callback.FILE_EXTENSION}"
    return str(last) if callback.dirpath and last.is_file() else ""


def build_loggers(cfg: DictConfig, resumed: dict | None) -> list:
    """The configured loggers; when resuming, the CSV logger keeps the rows logged before the checkpoint
    and W&B continues the checkpoint's run id (a new run gets a fresh id, stored in its checkpoints)."""
    loggers = []
    for node in (cfg.get("logger") or {}).values():
        if node is None:
            continue
        target = str(node.get("_target_", ""))
        kwargs = {}
        if target.endswith(ResumableCSVLogger.__name__) and resumed is not None:
            kwargs["keep_steps_below"] = trained_batches(resumed)
        if target.endswith(WandbLogger.__name__) and not node.get("id"):
            previous = CheckpointMeta.from_dict(resumed[CHECKPOINT_KEY]).wandb_run_id if resumed else None
            kwargs.update(id=previous or new_wandb_id(), resume="allow")
        loggers.append(instantiate(node, **kwargs))
    return loggers


def new_wandb_id() -> str:
    """A fresh W&B run id (8 lowercase hex digits, W&B's own format)."""
    return uuid.uuid4().hex[:8]
