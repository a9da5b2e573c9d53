"""``certify(cfg)``: CERTIFY (or PREDICT) a trained checkpoint on a test subset.

The config becomes one validated :class:`~rs_lightning.certification.CertificationPlan` (:func:`plan_run`:
every key checked, the model loaded, the spec resolved with its facts — sigma, noise, norm, the sampler's
settings: :func:`~rs_lightning.smoothing.resolve.resolve`, as the training callback does — and precision
timed where ``auto``, the inputs chosen) before any certification; :func:`rs_lightning.certification.execute`
then runs it, writing ``certify.tsv`` row by row (resumable), ``settings.json``, ``summary.json`` and two PNG
plots into ``output_dir``. ``checkpoint=null`` certifies a parameter-free model (``model=constant``, Sun et
al. 2025 Thm. 1) built from ``model=``, ``data=`` and ``sigma=``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import platform
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.multiprocessing.spawn import ProcessExitedException

from rs_lightning.certification import CertificationPlan, OneProcess, Part, Ranks, execute
from rs_lightning.certification.ranks import die_with_launcher, launcher_of_this_rank
from rs_lightning.data.quantize import QuantizedDataset, first_off_grid
from rs_lightning.data.subset import parse_shard, subset_indices
from rs_lightning.interrupts import Interrupted, launcher_passes_signals_on, stop_at_once_on_signals
from rs_lightning.models.checkpoint import (
    CheckpointMeta,
    classifier_from_checkpoint,
    read_checkpoint,
    require_fit,
)
from rs_lightning.models.normalize import build_classifier
from rs_lightning.models.published import FORMATS, NORMALIZATIONS, load_published
from rs_lightning.runs import RunRecord, done_indices
from rs_lightning.smoothing import CertificationSpec
from rs_lightning.smoothing.auto import AUTO, fastest, label, supported_precisions
from rs_lightning.smoothing.pipeline import at_sigma
from rs_lightning.smoothing.precision import check_precision_supported
from rs_lightning.smoothing.resolve import ModelFacts, resolve
from rs_lightning.smoothing.samplers import check_unused_settings
from rs_lightning.validation import ConfigError, require_at_least, require_positive

from .common import (
    check_trainer_config,
    checkpoint_datamodule,
    file_sha256,
    plain,
    require_writable_dir,
    resolve_device,
)
from .diffusion import with_diffusion


def check_inputs_on_grid(spec, dataset, indices, datamodule) -> None:
    """ConfigError before any work when the noise certifies inputs on the 8-bit grid only (lattice noise)
    and one of the run's inputs is off it: never rounded silently."""
    if not spec.certificate.distribution.grid_inputs:
        return
    if (off := first_off_grid(dataset, indices)) is not None:
        raise ConfigError(
            "quantize",
            False,
            f"true for noise={spec.noise} on {type(datamodule).__name__}",
            f"input idx {off[0]} is off the 8-bit pixel grid k/255 (a pixel {off[1]:.3g} levels from one), "
            "and lattice noise certifies inputs on the grid only; quantize=true rounds each input to it "
            "(recorded in settings.json), noise=gaussian certifies the data as it is",
        )


def inputs_digest(dataset, indices) -> str:
    """SHA-256 of the certified inputs (each image's float32 bytes and its label, in idx order): two runs
    compare the same test inputs only if this agrees, whatever the dataset's name or path."""
    digest = hashlib.sha256()
    for i in indices:
        x, y = dataset[i]
        digest.update(np.ascontiguousarray(torch.as_tensor(x, dtype=torch.float32).numpy()).tobytes())
        digest.update(int(y).to_bytes(8, "little", signed=True))
    return digest.hexdigest()


def parameter_free_classifier(
    cfg: DictConfig, device: torch.device
) -> tuple[nn.Module, CheckpointMeta, object]:
    """``checkpoint=null``: build ``cfg.model`` on ``cfg.data`` at ``cfg.sigma``; returns (model, meta, data).

    Only a model without parameters (e.g. ``model=constant``) is accepted: any other would certify random
    weights.
    """
    for key, example in (("model", "model=constant"), ("data", "data=digits")):
        if cfg.get(key) is None:
            raise ConfigError(key, None, f"set when checkpoint=null (e.g. {example})")
    if cfg.sigma is None:
        raise ConfigError("sigma", None, "> 0", "With checkpoint=null there is no training sigma to take")
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
    meta = CheckpointMeta(model=plain(cfg.model), num_classes=int(datamodule.num_classes))
    return model, meta, datamodule


def published_model_and_data(cfg: DictConfig, checkpoint: Path, device: torch.device):
    """``checkpoint_format=cohen|…``: a published repository's checkpoint (read with weights_only=True and
    mapped onto this project's models, :mod:`rs_lightning.models.published`); its files record neither the
    dataset nor sigma, so ``data=`` and ``sigma=`` are required."""
    if cfg.get("data") is None:
        raise ConfigError(
            "data",
            None,
            "set with checkpoint_format=",
            "a published checkpoint records no dataset, e.g. data=cifar10",
        )
    if cfg.get("sigma") is None:
        raise ConfigError(
            "sigma",
            None,
            "the noise level the checkpoint was trained at",
            "published checkpoints do not record it; pass e.g. sigma=0.25",
        )
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup()
    model, meta = load_published(
        checkpoint,
        cfg.checkpoint_format,
        plain(cfg.model) if cfg.get("model") is not None else None,
        datamodule.input_shape,
        datamodule.num_classes,
        datamodule.mean,
        datamodule.std,
        map_location=device,
        normalization=cfg.get("checkpoint_normalization"),
    )
    return model, meta, datamodule


def load_model_and_data(cfg: DictConfig, checkpoint: Path | None, device: torch.device):
    """``(model, meta, datamodule)`` from the checkpoint, or from ``model=``/``data=``/``sigma=`` for a
    parameter-free model when ``checkpoint=null``."""
    if checkpoint is None:
        return parameter_free_classifier(cfg, device)
    if cfg.get("checkpoint_format") is not None:
        return published_model_and_data(cfg, checkpoint, device)
    if cfg.get("model") is not None:
        raise ConfigError(
            "model", cfg.model.get("_target_"), "unset when checkpoint= is given", "The checkpoint has it"
        )
    state, meta = read_checkpoint(checkpoint, map_location=device)
    require_fit(state, meta, checkpoint)  # on the meta device: the metadata fits the weights
    datamodule = checkpoint_datamodule(cfg, meta)  # its classes and input shape, before the model is built
    model = classifier_from_checkpoint(state, meta, checkpoint, map_location=device)
    return model, meta, datamodule


def spec_request(cfg: DictConfig) -> dict:
    """The config's values as a request for :func:`~rs_lightning.smoothing.resolve.resolve` (the spec's keys,
    null = the model's, the samplers' nodes): ``auto`` precision and layout stand in as fp32 and contiguous
    until :func:`resolve_auto` times them."""
    values = plain(cfg)
    for key, placeholder in (("precision", "32"), ("channels_last", False)):  # auto: chosen once loaded
        if str(values.get(key)).lower() == AUTO:
            values[key] = placeholder
    return values


def resolve_auto(
    cfg: DictConfig, spec: CertificationSpec, model, x: torch.Tensor, out: Path, device, num_classes: int
) -> tuple[CertificationSpec, dict | None]:
    """``precision=auto`` / ``channels_last=auto``: the fastest candidate on this model and device
    (:mod:`rs_lightning.smoothing.auto`, timed on input ``x``), recorded with its timings as
    ``settings.json``'s ``auto``; a resume keeps the folder's choice instead of timing again. A step after
    :func:`~rs_lightning.smoothing.resolve.resolve` (and not part of it) because it runs the model: forward
    passes on this device, which the training callback (explicit precision only) never makes."""
    wanted = {key: str(cfg.get(key)).lower() == AUTO for key in ("precision", "channels_last")}
    if not any(wanted.values()):
        return spec, None
    recorded = RunRecord.read(out)
    previous = recorded.auto if recorded is not None else None
    if previous:
        chosen = previous
    else:
        precisions = supported_precisions(device) if wanted["precision"] else [spec.precision]
        layouts = [False, True] if wanted["channels_last"] else [spec.channels_last]
        precision, channels_last, rates = fastest(
            model, x.to(device), spec, precisions, layouts, num_classes=num_classes
        )
        chosen = {"precision": precision, "channels_last": channels_last, "samples_per_s": rates}
        print(f"auto: {label(precision, channels_last)} is the fastest here (samples/s: {rates})")
    return dataclasses.replace(
        spec, precision=chosen["precision"], channels_last=chosen["channels_last"]
    ), chosen


def validate_certify_config(cfg: DictConfig) -> CertificationSpec:
    """Check values that are easy to get wrong, before any work; returns the spec as requested (the
    model's keys at the defaults that stand in for them until :func:`plan_run` resolves it)."""
    spec = CertificationSpec.from_dict(spec_request(cfg))
    check_unused_settings(plain(cfg), spec.sampling)  # the config lists the samplers' keys: ignored if set
    require_at_least("skip", cfg.skip, 1)
    require_at_least("start", cfg.start, 0)
    if cfg.radius_step is not None:
        require_positive("radius_step", cfg.radius_step)
    if not isinstance(cfg.get("quantize", False), bool):
        raise ConfigError("quantize", cfg.get("quantize"), "true or false")
    parse_shard(cfg.get("shard"))
    if cfg.get("checkpoint_format") is not None:
        if cfg.checkpoint_format not in FORMATS:
            raise ConfigError(
                "checkpoint_format", cfg.checkpoint_format, f"one of {', '.join(FORMATS)} or null"
            )
        if cfg.get("checkpoint_normalization") not in (None, *NORMALIZATIONS):
            raise ConfigError(
                "checkpoint_normalization",
                cfg.checkpoint_normalization,
                f"one of {', '.join(NORMALIZATIONS)} or null",
            )
        if cfg.checkpoint is None:
            raise ConfigError("checkpoint", None, "the published file's path with checkpoint_format=")
    if cfg.max is not None:
        require_at_least("max", cfg.max, cfg.start + 1)
    return spec


TRAINING_ONLY = ("_target_", "max_epochs", "check_val_every_n_epoch", "log_every_n_steps", "default_root_dir")


def certification_trainer(cfg_trainer: DictConfig) -> pl.Trainer:
    """A Lightning Trainer from a ``trainer=`` config, without its training-only keys or any logging."""
    kwargs: dict[str, Any] = OmegaConf.to_container(cfg_trainer, resolve=False)  # type: ignore[assignment]
    kwargs = {k: v for k, v in kwargs.items() if k not in TRAINING_ONLY}
    kwargs.update(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        precision="32-true",
    )
    return pl.Trainer(**kwargs)


def tf32_settings(device: torch.device) -> dict | None:
    """On CUDA, whether "fp32" convolutions/matmuls may run as TF32 (PyTorch's defaults: cuDNN yes, matmul
    no), which is part of what the certified base classifier is; None elsewhere."""
    if device.type != "cuda":
        return None
    return {
        "cudnn": bool(torch.backends.cudnn.allow_tf32),
        "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
    }


def device_names(device: torch.device, world_size: int = 1) -> list[str]:
    """One name per process that certifies: the GPU's, or the CPU model's."""
    if device.type == "cuda":
        count = torch.cuda.device_count()
        return [torch.cuda.get_device_name(r % count) for r in range(world_size)]
    name = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return [f"cpu: {name}"] * world_size


def processes_of(cfg: DictConfig) -> OneProcess | Ranks:
    """Who certifies: DDP ranks with ``trainer=`` (a rank that Lightning started by running certify.py
    again first arms its death with the launcher), else this process on ``device=``, the whole run or
    part i of k with ``shard=i/k``."""
    if cfg.get("trainer") is None:
        shard = parse_shard(cfg.get("shard"))
        part = Part() if shard is None else Part(*shard, own_file=True)
        return OneProcess(resolve_device(cfg.device), part)
    launcher = launcher_of_this_rank()  # set in a rank that runs certify.py again
    if launcher is not None:
        die_with_launcher(launcher)
    for key in ("precision", "channels_last"):
        if str(cfg.get(key)).lower() == AUTO:
            raise ConfigError(key, AUTO, "chosen explicitly with trainer=", "auto times on one device only")
    if cfg.get("shard") is not None:
        raise ConfigError("shard", cfg.shard, "null with trainer=", "the ranks split the inputs themselves")
    check_trainer_config(cfg.trainer)
    return Ranks(certification_trainer(cfg.trainer), launcher)


def certify(cfg: DictConfig) -> dict:
    """Certify (or, with ``mode=predict``, PREDICT) ``cfg.checkpoint``; returns the summary dict (also
    written to ``summary.json``). SIGINT or SIGTERM stops the run (every rank of it) at once: the rows
    written are kept, one line says how many and how to resume, and the exit status is 130 or 143."""
    plan = plan_run(cfg)
    ranks = plan.processes.trainer if isinstance(plan.processes, Ranks) else None
    try:
        with stop_at_once_on_signals(), launcher_passes_signals_on(ranks) as received:
            try:
                return execute(plan)
            except ProcessExitedException as stop:  # ranks that stopped on a signal (strategy=ddp_spawn)
                interrupted = Interrupted.from_exit_status(stop.exit_code)
                interrupted = Interrupted(received[0]) if received else interrupted
                if interrupted is None:
                    raise
                raise interrupted from None
    except Interrupted as stop:
        print(interrupted_line(plan, stop.signum), file=sys.stderr)
        raise


def interrupted_line(plan: CertificationPlan, signum: int) -> str:
    """What a stopped run says: the signal, the inputs that have their rows, and the command that resumes."""
    done = len(set(done_indices(plan.table_path)) & set(plan.indices))
    return (
        f"{signal.Signals(signum).name}: stopped with {done} of {len(plan.indices)} inputs certified in "
        f"{plan.out}; resume with: {resume_command(plan.out)}"
    )


def resume_command(out: Path) -> str:
    """This command line again, writing into ``out`` (the folder a resume must reuse)."""
    try:
        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:  # not under @hydra.main (the Python API): the folder is what matters
        overrides = []
    kept = [a for a in overrides if not a.startswith(("output_dir=", "hydra.run.dir="))]
    return shlex.join(["python", "certify.py", *kept, f"output_dir={out}"])


def plan_run(cfg: DictConfig) -> CertificationPlan:
    """The run a ``certify.py`` config asks for, validated and resolved before any certification: the
    spec (the config's keys checked, then :func:`~rs_lightning.smoothing.resolve.resolve`'d with the
    checkpoint's facts, then :func:`resolve_auto`), the model (loaded, on its device, certified at the
    spec's σ without being changed: :func:`~rs_lightning.smoothing.pipeline.at_sigma`), the inputs, the
    output folder and its record, and the processes that certify it."""
    spec = validate_certify_config(cfg)
    out = require_writable_dir(cfg.output_dir, "output_dir")
    processes = processes_of(cfg)
    if isinstance(processes, Ranks):
        device = torch.device("cpu")  # the model moves to the ranks' devices later
        record_device, world_size = processes.trainer.strategy.root_device, processes.trainer.world_size
    else:
        device, record_device, world_size = processes.device, processes.device, 1
    check_precision_supported(spec.precision, device)
    checkpoint = None if cfg.checkpoint is None else Path(cfg.checkpoint)
    model, meta, datamodule = load_model_and_data(cfg, checkpoint, device)
    dim = math.prod(datamodule.input_shape)
    facts = ModelFacts.of(model, dim, train_sigma=meta.sigma, train_noise=meta.noise)
    on_grid = datamodule.eight_bit or bool(cfg.get("quantize", False))
    spec = resolve(spec_request(cfg), facts, override_sigma=bool(cfg.override_sigma), on_grid=on_grid)
    sigma = spec.sigma
    model, meta = with_diffusion(cfg, model, meta, sigma, device)
    model = at_sigma(model, sigma)  # the checkpoint's model itself is left as it is
    dataset = datamodule.dataset(spec.split)
    if cfg.get("quantize", False):
        dataset = QuantizedDataset(dataset)
    indices = subset_indices(len(dataset), cfg.skip, cfg.start, cfg.max)
    check_inputs_on_grid(spec, dataset, indices, datamodule)
    spec, auto = resolve_auto(cfg, spec, model, dataset[indices[0]][0], out, device, int(meta.num_classes))
    record = RunRecord(
        **spec.as_dict(),
        train_sigma=None if meta.sigma is None else float(meta.sigma),
        train_noise=meta.noise,
        sigma_overridden=meta.sigma is not None and sigma != float(meta.sigma),
        device=record_device.type,
        tf32=tf32_settings(record_device),
        subset={"skip": cfg.skip, "start": cfg.start, "max": cfg.max, "num_inputs": len(indices)},
        checkpoint=None if checkpoint is None else str(checkpoint.resolve()),
        checkpoint_sha256=None if checkpoint is None else file_sha256(checkpoint),
        model=meta.model,
        method=meta.training_method,
        train_seed=meta.seed,
        inputs_sha256=inputs_digest(dataset, indices),
        quantized=True if cfg.get("quantize", False) else None,
        data=datamodule.describe(),
        dim=dim,
        pipeline=meta.pipeline,
        denoiser=meta.denoiser,
        checkpoint_format=meta.checkpoint_format,
        radius_step=None if cfg.radius_step is None else float(cfg.radius_step),
        auto=auto,
        devices=device_names(record_device, world_size),
    )
    return CertificationPlan(spec, model, int(meta.num_classes), dataset, indices, record, out, processes)
