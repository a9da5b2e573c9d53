"""``certify(cfg)``: CERTIFY a trained checkpoint on a test subset, appending rows to ``certify.tsv``.

Writes ``certify.tsv`` (row by row, resumable), ``settings.json``, ``summary.json`` and two PNG plots
into ``output_dir``. A rerun into the same folder skips the indices already certified; a rerun with
different statistical settings (sigma, n0, n, alpha, seed, split, checkpoint, model) is refused.
``checkpoint=null`` certifies a parameter-free model (``model=constant``, Sun et al. 2025 Thm. 1) built from
``model=``, ``data=`` and ``sigma=``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import nn
from tqdm import tqdm

from rs_lightning.analysis.metrics import pa_true_label, summarize, summarize_predictions
from rs_lightning.analysis.plots import certified_accuracy_figure, pa_ecdf_figure, save_figure
from rs_lightning.analysis.results import (
    COLUMNS,
    PREDICT_COLUMNS,
    PREDICT_REQUIRED,
    FolderLock,
    ResultFileError,
    ResultWriter,
    RunRecord,
    RunSummary,
    certify_rows,
    done_indices,
    in_subset,
    merge_parts,
    part_tables,
    predict_rows,
    read_results,
    settings_mismatch,
    shard_table,
)
from rs_lightning.data.subset import parse_shard, shard_of, subset_indices
from rs_lightning.models.checkpoint import CheckpointMeta, load_classifier
from rs_lightning.models.normalize import build_classifier
from rs_lightning.models.published import FORMATS, NORMALIZATIONS, load_published
from rs_lightning.smoothing import CertificationSpec, run_dataset
from rs_lightning.smoothing.auto import AUTO, fastest, label, supported_precisions
from rs_lightning.smoothing.engine import check_iss_decline, check_norm_supported
from rs_lightning.smoothing.pipeline import pipeline_of
from rs_lightning.smoothing.precision import check_precision_supported
from rs_lightning.smoothing.sequential import look_schedule, resolve_grid
from rs_lightning.smoothing.spec import SequentialSettings
from rs_lightning.validation import ConfigError, require_at_least, require_positive

from .common import (
    check_trainer_config,
    checkpoint_datamodule,
    plain,
    require_writable_dir,
    resolve_device,
    tune_cpu_allocator,
)
from .distributed import (
    RankCertification,
    certification_trainer,
    certify_on_ranks,
    die_with_launcher,
    launcher_of_this_rank,
)

IDENTITY_KEYS = ("sigma", "checkpoint_sha256", "model", "data", "device")
"""With the spec's protocol keys: what a resume must match (what the rows were certified of, and the
device type, whose noise generators differ: CPU and CUDA rows would not come from one stream)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def inputs_digest(dataset, indices) -> str:
    """SHA-256 of the certified inputs (each image's float32 bytes and its label, in idx order): two runs
    compare the same test inputs only if this agrees, whatever the dataset's name or path."""
    digest = hashlib.sha256()
    for i in indices:
        x, y = dataset[i]
        digest.update(np.ascontiguousarray(torch.as_tensor(x, dtype=torch.float32).numpy()).tobytes())
        digest.update(int(y).to_bytes(8, "little", signed=True))
    return digest.hexdigest()


def resolve_sigma(cfg: DictConfig, train_sigma: float) -> float:
    """The checkpoint's sigma, unless ``sigma=`` is given together with ``override_sigma=true``."""
    if cfg.sigma is None or float(cfg.sigma) == float(train_sigma):
        return float(train_sigma)
    if not cfg.override_sigma:
        raise ConfigError(
            "sigma",
            cfg.sigma,
            f"the checkpoint's training sigma {train_sigma}",
            "To certify at another noise level, add override_sigma=true (it is recorded in settings.json)",
        )
    return float(cfg.sigma)


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
            "sigma", None, "the noise level the checkpoint was trained at",
            "published checkpoints do not record it; pass e.g. sigma=0.25",
        )  # fmt: skip
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup()
    model, meta = load_published(
        checkpoint, cfg.checkpoint_format, plain(cfg.model) if cfg.get("model") is not None else None,
        datamodule.input_shape, datamodule.num_classes, datamodule.mean, datamodule.std, map_location=device,
        normalization=cfg.get("checkpoint_normalization"),
    )  # fmt: skip
    return model, meta, datamodule, float(cfg.sigma)


def load_model_and_data(cfg: DictConfig, checkpoint: Path | None, device: torch.device):
    """``(model, meta, datamodule, sigma)`` from the checkpoint, or from ``model=``/``data=``/``sigma=`` for a
    parameter-free model when ``checkpoint=null``."""
    if checkpoint is None:
        model, meta, datamodule = parameter_free_classifier(cfg, device)
        return model, meta, datamodule, float(cfg.sigma)
    if cfg.get("checkpoint_format") is not None:
        return published_model_and_data(cfg, checkpoint, device)
    if cfg.get("model") is not None:
        raise ConfigError(
            "model", cfg.model.get("_target_"), "unset when checkpoint= is given", "The checkpoint has it"
        )
    model, meta = load_classifier(checkpoint, map_location=device)
    return model, meta, checkpoint_datamodule(cfg, meta), resolve_sigma(cfg, meta.sigma)


def _check_resume(out: Path, settings: RunRecord, table: Path) -> None:
    """Refuse a folder whose rows were made under other statistical settings (named in the message): those
    in its ``settings.json`` or, when that is missing, what the rows already there record of them
    (:func:`_check_rows_match`)."""
    old = RunRecord.read(out)
    if old is None:
        _check_rows_match(table, settings.spec, settings.dim)
        return
    settings = RunRecord.from_dict(json.loads(json.dumps(settings.to_dict())))  # as stored: tuples are lists
    before = old.protocol() | {k: getattr(old, k) for k in IDENTITY_KEYS}
    now = settings.protocol() | {k: getattr(settings, k) for k in IDENTITY_KEYS}
    changed = {k: (before[k], now[k]) for k in now if before[k] != now[k]}
    if changed:
        detail = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in changed.items())
        raise ConfigError(
            "output_dir",
            str(out),
            "a folder certified with the same settings",
            f"It holds results for other settings ({detail}); choose another output_dir so no rows are mixed",
        )


def _check_rows_match(table: Path, spec: CertificationSpec, dim: int | None) -> None:
    """Without ``settings.json``, the rows already in the folder must be what this run would write: their
    ``n``/``n0`` columns fit its n and n0, and the settings each row records implicitly agree with its own —
    ``alpha`` through ``pA_lower`` = the Clopper–Pearson bound of ``nA`` of ``n`` (PREDICT: through
    abstaining exactly where ``pvalue > alpha``), and sigma/norm through ``radius`` = scale·Φ⁻¹(pA_lower)."""
    for path in part_tables(table):
        if not path.stat().st_size:
            continue
        required = ("idx", "n") if spec.mode == "predict" else ("idx", "n", "n0")
        try:
            rows = read_results(path, required)
        except ResultFileError:
            continue  # an old file without these columns: the writer checks its header
        if spec.mode == "certify" and spec.sampling == "sequential":
            bad = ~np.isin(rows["n"], look_schedule(spec)) | (rows["n0"] != spec.n0)
        elif spec.mode == "certify" and spec.sampling == "iss":
            bad = rows["n"] > spec.n
        elif spec.mode == "certify":
            bad = (rows["n"] != spec.n) | (rows["n0"] != spec.n0)
        else:
            bad = rows["n"] != spec.n
        if bad.any():
            j = int(np.argmax(bad))
            found = f"n={int(rows['n'][j])}" + (f", n0={int(rows['n0'][j])}" if "n0" in rows else "")
            _refuse_rows(
                table, path, f"rows with {found} (idx {int(rows['idx'][j])})", f"n={spec.n}, n0={spec.n0}"
            )
        level = spec.alpha if spec.mode == "predict" else spec.bound_alpha
        mismatch = settings_mismatch(rows, spec.mode, level, spec.sigma, spec.norm, dim, spec.noise)
        if mismatch is not None:
            _refuse_rows(table, path, *mismatch)


def _refuse_rows(table: Path, path: Path, found: str, now: str) -> None:
    raise ConfigError(
        "output_dir", str(table.parent), "a folder certified with the same settings",
        f"{path.name} holds {found} and no settings.json; this run has {now}. Choose another output_dir so "
        "no rows are mixed",
    )  # fmt: skip


def format_summary(record: RunSummary) -> str:
    """A plain-text table of one run's summary (CERTIFY or PREDICT)."""
    summary, spec = record.metrics, record.settings.spec
    head = f"{spec.mode}: {summary['num_inputs']} inputs  {spec.describe()}"
    if spec.mode == "predict":
        return "\n".join(
            [
                head,
                f"  accuracy (smoothed, abstain = wrong)  {summary['accuracy']:.4f}",
                f"  abstain rate                         {summary['abstain_rate']:.4f}",
                f"  wrong predictions                    {summary['error_rate']:.4f}",
            ]
        )
    lines = [
        head,
        f"  clean accuracy (smoothed)  {summary['clean_accuracy']:.4f}",
        f"  abstain rate               {summary['abstain_rate']:.4f}",
        f"  ACR                        {summary['acr']:.4f}",
        f"  mean pA (true label)       {summary['pa_mean']:.4f}",
    ]
    if spec.sampling in ("iss", "sequential"):
        lines.append(f"  mean estimation draws n    {summary['mean_n']:.0f} of at most {spec.n}")
    lines.append("  radius   certified accuracy")
    lines += [f"  {float(r):<8g} {a:.4f}" for r, a in summary["certified_accuracy"].items()]
    ecdf = dict(zip(summary["pa_ecdf"]["x"], summary["pa_ecdf"]["y"], strict=True))
    lines.append("  pA ECDF: " + "  ".join(f"y({x:g})={ecdf[x]:.3f}" for x in (0.5, 0.9, 0.99, 0.999, 1.0)))
    return "\n".join(lines)


def spec_from_config(cfg: DictConfig) -> CertificationSpec:
    """The run's :class:`CertificationSpec` (sigma None until the checkpoint gives it, ``norm=null`` read as
    l2 until :func:`resolve_norm`); validates each key."""
    values = plain(cfg)
    for key in ("norm", "noise"):  # null: resolved once the checkpoint is loaded
        if values.get(key) is None:
            values.pop(key, None)
    for key, placeholder in (("precision", "32"), ("channels_last", False)):  # auto: chosen once loaded
        if str(values.get(key)).lower() == AUTO:
            values[key] = placeholder
    return CertificationSpec.from_dict(values)


def resolve_auto(cfg: DictConfig, spec: CertificationSpec, model, x: torch.Tensor, out: Path, device,
                 num_classes: int) -> tuple[CertificationSpec, dict | None]:  # fmt: skip
    """``precision=auto`` / ``channels_last=auto``: the fastest candidate on this model and device
    (:mod:`rs_lightning.smoothing.auto`, timed on input ``x``), recorded with its timings as
    ``settings.json``'s ``auto``; a resume keeps the folder's choice instead of timing again."""
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


def resolve_norm(cfg: DictConfig, spec: CertificationSpec, model, meta: CheckpointMeta) -> CertificationSpec:
    """``noise=null``: the checkpoint's training noise (Gaussian for checkpoints that predate the key,
    published ones and parameter-free models). ``norm=null``: L∞ for a randomized pipeline (ARS certifies
    only L∞), else the noise's own norm; an explicit norm and the noise must be ones the model's accounting
    certifies (checked before any work)."""
    if cfg.get("noise") is None:
        norm = None if cfg.get("norm") is None else spec.norm
        spec = dataclasses.replace(spec, noise=str(meta.noise), norm=norm)
    pipeline = pipeline_of(model)
    if cfg.get("norm") is None and pipeline is not None and spec.noise == "gaussian":
        spec = dataclasses.replace(spec, norm=pipeline.norms[0])
    check_norm_supported(model, spec.norm, spec.noise)
    return spec


def validate_certify_config(cfg: DictConfig) -> CertificationSpec:
    """Check values that are easy to get wrong, before any work; returns the spec."""
    spec = spec_from_config(cfg)
    if spec.sampling != "sequential":  # the config lists the sampler's keys: set, they would be ignored
        defaults = dataclasses.asdict(SequentialSettings())
        for key, value in (plain(cfg.get("sequential")) or {}).items():
            if value != defaults.get(key):
                raise ConfigError(
                    f"sequential.{key}", value, "left at its default unless sampling=sequential"
                )
    require_at_least("skip", cfg.skip, 1)
    require_at_least("start", cfg.start, 0)
    if cfg.radius_step is not None:
        require_positive("radius_step", cfg.radius_step)
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


def throughput(rows: dict) -> dict:
    """Time spent certifying the rows (their ``time`` column: device-seconds, summed over processes) and
    the rates it implies per process; with several processes the run's wall rate is about that times
    their number."""
    seconds = float(np.sum(rows["time"])) if rows["idx"].size else 0.0
    out = {"seconds": seconds, "inputs_per_s": rows["idx"].size / seconds if seconds > 0 else None}
    if "samples" in rows:
        out["samples_per_s"] = float(np.sum(rows["samples"])) / seconds if seconds > 0 else None
    return out


def certify(cfg: DictConfig) -> dict:
    """Certify (or, with ``mode=predict``, PREDICT) ``cfg.checkpoint``; returns the summary dict (also
    written to ``summary.json``)."""
    spec = validate_certify_config(cfg)
    out = require_writable_dir(cfg.output_dir, "output_dir")
    distributed = cfg.get("trainer") is not None
    launcher = launcher_of_this_rank() if distributed else None  # set in a rank that runs certify.py again
    if launcher is not None:
        die_with_launcher(launcher)
    if distributed:
        for key in ("precision", "channels_last"):
            if str(cfg.get(key)).lower() == AUTO:
                raise ConfigError(
                    key, AUTO, "chosen explicitly with trainer=", "auto times on one device only"
                )
        if cfg.get("shard") is not None:
            raise ConfigError(
                "shard", cfg.shard, "null with trainer=", "the ranks split the inputs themselves"
            )
        check_trainer_config(cfg.trainer)
        trainer = certification_trainer(cfg.trainer)  # ranks and devices; the model moves to them later
        device = torch.device("cpu")
    else:
        device = resolve_device(cfg.device)
    check_precision_supported(spec.precision, device)
    if device.type == "cpu":
        tune_cpu_allocator()
    checkpoint = None if cfg.checkpoint is None else Path(cfg.checkpoint)
    model, meta, datamodule, sigma = load_model_and_data(cfg, checkpoint, device)
    spec = resolve_norm(cfg, spec.with_sigma(sigma), model, meta)
    check_iss_decline(spec, math.prod(datamodule.input_shape))
    spec = resolve_grid(spec, math.prod(datamodule.input_shape))  # sampling=sequential: stored resolved
    if pipeline_of(model) is not None:
        pipeline_of(model).sigma = sigma  # the pipeline's accounting holds at any sigma
    dataset = datamodule.dataset(spec.split)
    indices = subset_indices(len(dataset), cfg.skip, cfg.start, cfg.max)
    x_first = dataset[indices[0]][0]
    inputs_sha256 = inputs_digest(dataset, indices)
    spec, auto = resolve_auto(cfg, spec, model, x_first, out, device, int(meta.num_classes))

    settings = RunRecord(
        **spec.as_dict(),
        train_sigma=None if meta.sigma is None else float(meta.sigma),
        train_noise=meta.noise,
        sigma_overridden=meta.sigma is not None and sigma != float(meta.sigma),
        device=trainer.strategy.root_device.type if distributed else device.type,
        tf32=tf32_settings(trainer.strategy.root_device if distributed else device),
        subset={"skip": cfg.skip, "start": cfg.start, "max": cfg.max, "num_inputs": len(indices)},
        checkpoint=None if checkpoint is None else str(checkpoint.resolve()),
        checkpoint_sha256=None if checkpoint is None else _sha256(checkpoint),
        model=meta.model,
        method=meta.training_method,
        train_seed=meta.seed,
        inputs_sha256=inputs_sha256,
        data=datamodule.describe(),
        dim=math.prod(datamodule.input_shape),
        pipeline=meta.pipeline,
        checkpoint_format=meta.checkpoint_format,
        radius_step=None if cfg.radius_step is None else float(cfg.radius_step),
        auto=auto,
        devices=device_names(
            trainer.strategy.root_device if distributed else device, trainer.world_size if distributed else 1
        ),
    )
    certifying = spec.mode == "certify"
    table = out / ("certify.tsv" if certifying else "predict.tsv")
    shard = parse_shard(cfg.get("shard"))
    make_rows = certify_rows if certifying else predict_rows
    columns = COLUMNS if certifying else PREDICT_COLUMNS
    mine = shard_of(indices, shard)
    # a rank that runs certify.py again works under its launcher's lock (and holds the rank lock); ranks a
    # cluster started side by side (SLURM, torchrun) each share the folder lock, as parts do
    external = distributed and trainer.strategy.cluster_environment.creates_processes_externally
    if launcher is not None:
        folder_lock = nullcontext()
    else:
        folder_lock = FolderLock(out, shared=shard is not None or external, check_ranks=not external)
    with folder_lock:
        _check_resume(out, settings, table)
        settings.write(out)
        if distributed:
            module = RankCertification(
                model, dataset, indices, spec, int(meta.num_classes), table, columns, make_rows,
                launcher=launcher or os.getpid(),
            )  # fmt: skip
            if not certify_on_ranks(trainer, module):
                return {}  # another rank merges
        else:
            target = table if shard is None else shard_table(table, shard)
            with ResultWriter(target, columns) as writer:
                done = done_indices(table)
                todo = [i for i in mine if i not in done]
                progress = tqdm(
                    total=len(mine),
                    initial=len(mine) - len(todo),
                    unit="input",
                    desc=spec.mode + ("" if shard is None else f" {shard[0]}/{shard[1]}"),
                    dynamic_ncols=True,
                    mininterval=1.0,
                )
                for result, labels, seconds in run_dataset(
                    model, dataset, todo, spec, num_classes=int(meta.num_classes), device=device
                ):
                    for row in make_rows(result, labels, seconds):
                        writer.write(row)
                    progress.update(len(labels))
                progress.close()
        missing = merge_parts(table, indices)
    if missing:
        print(
            f"{spec.mode} part {shard[0]}/{shard[1]}: {len(mine)} inputs done; {len(missing)} of the run's "
            f"{len(indices)} are in other parts still to finish (the last part to finish merges them into "
            f"{table.name}, or run: python -m rs_lightning.cli.report merge {out})"
        )
        return {"merged": False, "missing": len(missing), "num_inputs": len(indices)}
    return finish_run(out, settings, cfg.radius_step).to_dict()


def finish_run(out: Path, settings: RunRecord, radius_step: float | None = None) -> RunSummary:
    """``summary.json`` and the plots of a complete run folder, from its table and ``settings.json``."""
    spec = settings.spec
    sigma = spec.sigma
    certifying = spec.mode == "certify"
    table = out / ("certify.tsv" if certifying else "predict.tsv")
    rows = read_results(table) if certifying else read_results(table, PREDICT_REQUIRED)
    keep = in_subset(rows["idx"], settings.subset)
    rows = {k: v[keep] for k, v in rows.items()}
    if certifying:
        radii = spec.certificate.radius_grid(sigma, spec.n, spec.alpha, radius_step, settings.dim)
        metrics = summarize(
            rows["radius"],
            rows["correct"],
            rows["predict"],
            rows["pA_hat"],
            radii=radii,
            n=rows["n"],
            samples=rows.get("samples"),
        )
    else:
        metrics = summarize_predictions(rows["predict"], rows["correct"])
    devices = settings.devices or []
    speed = throughput(rows) | {"devices": devices, "processes": len(devices) or 1}
    summary = RunSummary(metrics, speed, settings)
    summary.write(out)
    if certifying:
        noise = "" if spec.noise == "gaussian" else f", {spec.noise}"
        label = f"sigma={sigma:g}{noise}, n={spec.n}" + {"iss": " (ISS)", "sequential": " (sequential)"}.get(
            spec.sampling, ""
        )
        save_figure(
            certified_accuracy_figure({label: (rows["radius"], rows["correct"])}, norm=spec.norm),
            out / "certified_accuracy.png",
        )
        save_figure(
            pa_ecdf_figure({label: pa_true_label(rows["pA_hat"], rows["correct"])}), out / "pa_ecdf.png"
        )
    print(format_summary(summary))
    print(f"results: {out}")
    return summary


def merge_run(out: str | Path, radius_step: float | None = None) -> dict:
    """``report merge RUN_DIR``: merge a run folder's parts (``shard=i/k`` files) into its table and write
    its summary and plots; a ResultFileError names the indices still missing or certified twice."""
    out = Path(out)
    settings = RunRecord.read(out)
    if settings is None:
        raise ResultFileError(f"{out} has no settings.json: not a certify.py run folder")
    indices = settings.indices()
    table = out / ("certify.tsv" if (settings.mode or "certify") == "certify" else "predict.tsv")
    with FolderLock(out, shared=False):
        missing = merge_parts(table, indices)
    if missing:
        raise ResultFileError(
            f"{out}: {len(missing)} of {len(indices)} inputs are in no part yet (idx {missing[:10]}"
            f"{' …' if len(missing) > 10 else ''}); certify the missing parts (shard=i/k) first"
        )
    summary = finish_run(out, settings, radius_step or settings.radius_step)
    print(format_summary(summary))
    return summary.to_dict()
