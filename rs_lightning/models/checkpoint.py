"""Build a smoothed-classifier base model from an rs-lightning checkpoint, safely.

Checkpoints are read with ``torch.load(weights_only=True)`` (tensors and plain containers only, no pickled
objects), their metadata is checked value by value (:meth:`CheckpointMeta.read`), and the architecture is
built through the registry of this project's classes (:data:`~rs_lightning.models.registry.MODELS`) with plain
arguments: nothing named in the file is imported or called, so a downloaded checkpoint cannot run code.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rs_lightning.registry import RegistryError, check_plain
from rs_lightning.smoothing.certificate import NOISES
from rs_lightning.validation import unreadable_format

from .normalize import Normalize, build_classifier
from .registry import MODELS
from .safe_load import CheckpointError, first_line, load_weights_only
from .weights import architecture

CHECKPOINT_KEY = "rs_lightning"
"""Key of the metadata dict (:class:`CheckpointMeta`) in every checkpoint."""

CHECKPOINT_FORMAT = 2
"""Newest version of the metadata, its ``format`` key. Readable: 2, a checkpoint of denoised smoothing
(``denoiser`` set: a version that cannot build the denoiser refuses the file instead of certifying the bare
classifier under its name); 1, what train.py writes otherwise, as from the start (those written before
``noise=`` existed lack ``noise``: Gaussian); and untagged metadata (0, built by hand or by another tool),
read like 1."""

_OPTIONAL = ("wandb_run_id", "pipeline", "checkpoint_format", "arch", "normalization", "epoch", "denoiser")
"""Fields stored only when set."""


CERTIFY_EXAMPLE = "the .ckpt that train.py wrote (e.g. outputs/train/<date>/<time>/checkpoints/last.ckpt)"
RESUME_EXAMPLE = (
    "the last.ckpt of the train.py run to resume (outputs/train/<date>/<time>/checkpoints/last.ckpt)"
)


def build_model(config: Any, input_shape, num_classes: int, source: str) -> nn.Module:
    """The registered architecture ``config`` names (:data:`~rs_lightning.models.registry.MODELS`) with its
    plain arguments; a CheckpointError naming ``source`` (the file) otherwise."""
    try:
        if isinstance(config, Mapping):  # where the weights began: the file's state dict holds them now
            config = architecture(config)
        return MODELS.build(config, "model", input_shape=tuple(input_shape), num_classes=int(num_classes))
    except RegistryError as err:
        raise CheckpointError(f"{source}: {err}") from err


def build_denoiser(config: Any, input_shape, source: str) -> nn.Module:
    """The registered denoiser ``config`` names (:data:`~rs_lightning.models.registry.DENOISERS`) for images
    of ``input_shape``; a CheckpointError naming ``source`` otherwise."""
    from .registry import DENOISERS

    try:
        return DENOISERS.build(config, "denoiser.model", input_shape=tuple(input_shape))
    except RegistryError as err:
        raise CheckpointError(f"{source}: {err}") from err


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class CheckpointMeta:
    """What a checkpoint stores under :data:`CHECKPOINT_KEY` (train.py and the methods'
    ``on_save_checkpoint``), or what the importer of a published checkpoint records: what ``certify.py``
    needs to rebuild and certify the model. Its one stored form is :meth:`to_dict`, its one reading
    :meth:`from_dict` (as stored) or :meth:`read` (checked); a key that older versions lack
    (:data:`CHECKPOINT_FORMAT`) takes its value there."""

    rs_lightning_version: str | None = None
    model: dict | None = None
    data: dict | None = None
    method: dict | None = None
    optim: dict | None = None
    input_shape: list[int] | None = None
    num_classes: int | None = None
    class_names: list[str] | None = None
    mean: list[float] | None = None
    std: list[float] | None = None
    seed: int | None = None
    wandb_run_id: str | None = None
    sigma: float | None = None  # None: a published, parameter-free or noise-free model, certified at sigma=
    noise: str = "gaussian"  # absent: trained before noises existed
    pipeline: dict | None = None  # ARS: the randomized pipeline around the classifier
    checkpoint_format: str | None = None  # published checkpoints: the repository's layout,
    arch: str | None = None  # the file's (or the recognized) architecture,
    normalization: str | None = None  # its normalization layer
    epoch: int | None = None  # and its epoch
    denoiser: dict | None = None  # denoised smoothing: {"model": D's config, "sigma": D's σ, ...}

    def to_dict(self) -> dict:
        """The stored form: ``format`` (2 with a denoiser, else 1), then every field (those of
        :data:`_OPTIONAL` only when set)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        kept = {k: v for k, v in values.items() if v is not None or k not in _OPTIONAL}
        return {"format": 2 if self.denoiser is not None else 1} | kept

    @classmethod
    def from_dict(cls, values: Mapping) -> CheckpointMeta:
        """The record of stored metadata of any readable version, unchecked (see :meth:`read`); keys it
        lacks take their defaults, unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    @classmethod
    def read(cls, checkpoint: Mapping, source: str | os.PathLike) -> CheckpointMeta:
        """The metadata of a loaded checkpoint after checking every value a loader uses: ``input_shape``
        (C, H, W) of positive ints, ``num_classes`` >= 1, ``sigma`` finite > 0, ``noise`` (if present) a
        known noise, ``mean``/``std`` None or one finite value per channel with ``std`` > 0, ``pipeline``
        plain, ``format`` one this version reads; a one-line CheckpointError naming ``source`` and the value
        otherwise. ``model`` and ``data`` are checked where they are built, by the registry."""
        _check_metadata(checkpoint[CHECKPOINT_KEY], source)
        return cls.from_dict(checkpoint[CHECKPOINT_KEY])

    @property
    def training_method(self) -> str | None:
        """The training method's class name (e.g. "MACER"); None without one. certify.py keeps it in
        ``settings.json``, so a run folder names its method after the checkpoint is gone."""
        target = self.method.get("_target_") if isinstance(self.method, dict) else None
        return str(target).rsplit(".", 1)[-1] if target else None


def _check_metadata(meta: Any, source: str | os.PathLike) -> None:
    """:meth:`CheckpointMeta.read`'s checks of the stored values."""

    def refuse(what: str) -> CheckpointError:
        return CheckpointError(
            f"{source} has unusable metadata: {what}; use a checkpoint written by train.py"
        )

    if not isinstance(meta, dict):
        raise refuse(f"{CHECKPOINT_KEY!r} is a {type(meta).__name__}, not a mapping")
    if why := unreadable_format(meta, CHECKPOINT_FORMAT):
        raise CheckpointError(
            f"{source} has metadata {why}; update rs-lightning or use a checkpoint written by its train.py"
        )
    shape = meta.get("input_shape")
    if not (isinstance(shape, list | tuple) and len(shape) == 3 and all(_is_count(v) for v in shape)):
        raise refuse(f"input_shape={shape!r} is not (C, H, W) of positive integers")
    if not _is_count(meta.get("num_classes")):
        raise refuse(f"num_classes={meta.get('num_classes')!r} is not an integer >= 1")
    sigma = meta.get("sigma")  # None: trained without noise (method=clean); certify.py then needs sigma=
    if not (sigma is None or (_is_number(sigma) and sigma > 0)):
        raise refuse(f"sigma={sigma!r} is not a finite number > 0 (or null: trained without noise)")
    if sigma is None and meta.get("pipeline") is not None:
        raise refuse("sigma=None with a pipeline: its accounting needs the sigma it was trained at")
    if meta.get("noise", "gaussian") not in NOISES:  # absent: trained before noises existed, Gaussian
        raise refuse(f"noise={meta.get('noise')!r} is not one of {', '.join(NOISES)}")
    if meta.get("pipeline") is not None and not isinstance(meta["pipeline"], dict):
        raise refuse(f"pipeline={meta['pipeline']!r} is not a mapping")
    mean, std = meta.get("mean"), meta.get("std")
    if (mean is None) != (std is None):
        raise refuse(f"mean={mean!r} and std={std!r}: give both or neither")
    for name, values in (("mean", mean), ("std", std)):
        if values is None:
            continue
        if not (isinstance(values, list | tuple) and len(values) == shape[0]):
            raise refuse(f"{name}={values!r} is not one value per channel ({shape[0]})")
        if not all(_is_number(v) for v in values):
            raise refuse(f"{name}={values!r} holds a non-finite or non-numeric value")
    if std is not None and min(std) <= 0:
        raise refuse(f"std={std!r} holds a value <= 0 (normalization divides by it)")
    denoiser = meta.get("denoiser")
    if denoiser is not None:
        if not (isinstance(denoiser, dict) and isinstance(denoiser.get("model"), dict)):
            raise refuse(f"denoiser={denoiser!r} is not a mapping with the denoiser's model config")
        if not (_is_number(denoiser.get("sigma")) and denoiser["sigma"] == sigma):
            raise refuse(f"denoiser.sigma={denoiser.get('sigma')!r} is not the checkpoint's sigma={sigma!r}")
        if meta.get("pipeline") is not None:
            raise refuse("denoiser and pipeline are both set: a checkpoint holds one or the other")
    try:
        for key in ("pipeline", "class_names"):  # model and data: checked when built (the registry)
            check_plain(key, meta.get(key))
        for key in ("method", "optim", "seed", "checkpoint_format", "wandb_run_id", "format", "denoiser"):
            check_plain(key, meta.get(key), underscore_keys=True)  # recorded only (settings.json, labels)
    except RegistryError as err:
        raise refuse(str(err)) from err


def read_checkpoint(
    path: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> tuple[dict, CheckpointMeta]:
    """``(checkpoint, metadata)``: the checkpoint dict loaded with ``weights_only=True`` and its checked
    rs-lightning metadata."""
    path = Path(path)
    checkpoint = load_weights_only(path, "checkpoint", map_location, CERTIFY_EXAMPLE)
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path} is a PyTorch file but not an rs-lightning checkpoint (no {CHECKPOINT_KEY!r} metadata); "
            "train with train.py, which records sigma, architecture and normalization"
        )
    return checkpoint, CheckpointMeta.read(checkpoint, path)


def check_training_checkpoint(
    path: str | os.PathLike, key: str = "ckpt_path", expect: dict[str, Any] | None = None
) -> dict:
    """The checkpoint to resume training from, loaded with ``weights_only=True``; a CheckpointError (one line
    naming ``key``) if it is missing, not a Lightning training checkpoint written by train.py (no
    ``state_dict``/``rs_lightning`` metadata, or no ``optimizer_states``/``loops``: a weights-only save), or
    holds objects the safe unpickler refuses (pickled code), or metadata :meth:`CheckpointMeta.read` refuses
    (a format this version does not read, unusable values).

    ``expect`` maps metadata keys (e.g. ``{"model": plain(cfg.model)}``) to the values this run configures;
    a checkpoint recorded with other values is refused, since its weights or optimizer state would not fit.
    Lightning's own names (``last``, ``hpc``, …) are resolved to a file before
    (:func:`rs_lightning.cli.train.resume_checkpoint`): here every path is a file, and checked.
    """
    path = Path(path)
    checkpoint = load_weights_only(path, key, "cpu", RESUME_EXAMPLE)
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{key}={str(path)!r} is not a training checkpoint of rs-lightning (no {CHECKPOINT_KEY!r} "
            f"metadata or 'state_dict'); pass {RESUME_EXAMPLE}"
        )
    lacking = [k for k in ("optimizer_states", "loops") if k not in checkpoint]
    if lacking:
        raise CheckpointError(
            f"{key}={str(path)!r} holds weights but no optimizer or loop state (no {' or '.join(lacking)}: a "
            f"weights-only save), so training cannot resume from it; pass {RESUME_EXAMPLE}, or drop {key} to "
            "start a new run"
        )
    meta = CheckpointMeta.read(checkpoint, f"{key}={str(path)!r}")
    for name, value in (expect or {}).items():
        recorded = getattr(meta, name)
        if recorded != value:
            raise CheckpointError(
                f"{key}={str(path)!r} was trained with {name}={recorded!r}, but this run configures "
                f"{name}={value!r}; resume with the checkpoint's {name} or drop {key} to start a new run"
            )
    return checkpoint


def classifier_state(checkpoint: dict, path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The base classifier's weights (``model.*`` of the state dict, prefix removed), refused in one line
    if any is NaN/inf (a diverged run)."""
    state = {
        k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")
    }
    _require_finite(state, path)
    return state


def _require_finite(state: dict[str, torch.Tensor], path) -> None:
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{path} holds {bad} non-finite values (NaN/inf) in {name}: the run that wrote it diverged; "
                "certify an earlier checkpoint"
            )


def classifier_weights(path: str | os.PathLike, key: str, expect: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The base classifier's weights of a train.py checkpoint for a run that starts from them (e.g. ARS's
    mask-only stage), after checking that its metadata matches ``expect`` (e.g. sigma, input_shape, mean,
    std): a CheckpointError naming ``key`` and the first difference otherwise."""
    checkpoint, meta = read_checkpoint(path)
    for name, value in expect.items():
        recorded = getattr(meta, name)
        if recorded != value:
            raise CheckpointError(
                f"{key}={str(path)!r} was trained with {name}={recorded!r}, but this run has "
                f"{name}={value!r}; pass a checkpoint trained with the same {name}"
            )
    return classifier_state(checkpoint, path)


def load_classifier(
    path: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> tuple[nn.Module, CheckpointMeta]:
    """Return ``(base_classifier, metadata)``; with its normalization layer, in eval mode. A checkpoint whose
    metadata has a ``pipeline`` (ARS, ``method=ars|ars_static``) gives the
    :class:`~rs_lightning.models.ars.AdaptiveSmoothing` pipeline around the classifier instead."""
    checkpoint, meta = read_checkpoint(path, map_location)
    return classifier_from_checkpoint(checkpoint, meta, path, map_location), meta


def classifier_from_checkpoint(
    checkpoint: dict, meta: CheckpointMeta, path: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> nn.Module:
    """:func:`load_classifier`'s model, from a checkpoint :func:`read_checkpoint` read: the architecture is
    first built on the meta device and its shapes compared with the file's weights (:func:`require_fit`),
    so metadata asking for more than the file holds (``num_classes=10**12``) allocates nothing."""
    pipeline = meta.pipeline
    require_fit(checkpoint, meta, path)
    net = build_model(meta.model, meta.input_shape, meta.num_classes, str(path))
    model = build_classifier(net, meta.mean, meta.std)
    state = classifier_state(checkpoint, path)
    try:
        model.load_state_dict(state)
        if pipeline is not None:  # a randomized pipeline around the classifier (ARS), with its mask weights
            from .ars import pipeline_from_checkpoint

            model = pipeline_from_checkpoint(
                model,
                pipeline,
                checkpoint["state_dict"],
                sigma=float(meta.sigma),
                input_shape=tuple(meta.input_shape),
            )
    except RuntimeError as err:
        raise CheckpointError(f"{_misfit(path, meta)}: {' '.join(str(err).split())}") from err
    except (ValueError, TypeError) as err:  # only the pipeline's settings get here (the net exists)
        raise CheckpointError(f"{path} has unusable pipeline metadata {pipeline}: {first_line(err)}") from err
    _require_finite({k: v for k, v in checkpoint["state_dict"].items() if k.startswith("mask.")}, path)
    _require_positive_std(model, path)
    if meta.denoiser is not None:  # denoised smoothing: f(D(x)), D's weights under denoiser.*
        model = denoised_from_checkpoint(model, checkpoint, meta, path)
    return model.to(map_location).eval()


def denoiser_state(checkpoint: dict) -> dict[str, torch.Tensor]:
    """The denoiser's weights of a denoised-smoothing checkpoint (``denoiser.*``, prefix removed)."""
    prefix = "denoiser."
    return {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}


def denoised_from_checkpoint(
    classifier: nn.Module, checkpoint: dict, meta: CheckpointMeta, path: str | os.PathLike
) -> nn.Module:
    """``f∘D`` (:class:`~rs_lightning.models.denoisers.DenoisedClassifier`) from the checkpoint's denoiser
    config and ``denoiser.*`` weights (shapes already compared by :func:`require_fit`)."""
    from .denoisers import DenoisedClassifier

    denoiser = build_denoiser(meta.denoiser["model"], meta.input_shape, str(path))
    state = denoiser_state(checkpoint)
    _require_finite(state, path)
    denoiser.load_state_dict(state)
    if hasattr(denoiser, "sigma"):  # a diffusion denoiser picks its timestep by the inputs' sigma
        denoiser.sigma = float(meta.denoiser["sigma"])
    return DenoisedClassifier(denoiser, classifier)


def _misfit(path, meta: CheckpointMeta) -> str:
    pipeline = "" if meta.pipeline is None else f", pipeline {meta.pipeline}"
    if meta.denoiser is not None:
        pipeline += f", denoiser {meta.denoiser['model']}"
    return (
        f"the weights in {path} do not fit the architecture {meta.model.get('_target_')} ({meta.model}, "
        f"num_classes={meta.num_classes}, input_shape={meta.input_shape}{pipeline})"
    )


def _shape(tensor) -> str:
    return str(tuple(tensor.shape)) if isinstance(tensor, torch.Tensor) else f"a {type(tensor).__name__}"


def require_fit(checkpoint: Mapping[str, Any], meta: CheckpointMeta, path: str | os.PathLike) -> None:
    """Build the architecture the metadata describes (and ARS's mask) on the meta device, which allocates
    nothing, and refuse in one line the first parameter or buffer whose name or shape differs from the
    file's ``state_dict``: the metadata alone cannot make the loader allocate more than the file holds."""
    from .size import meta_build

    file_state = checkpoint["state_dict"]
    if not isinstance(file_state, Mapping):
        raise CheckpointError(
            f"{path} holds a state_dict that is a {type(file_state).__name__}, not a mapping of weights; use "
            "a checkpoint written by train.py"
        )
    net = meta_build(lambda: build_model(meta.model, meta.input_shape, meta.num_classes, str(path)))
    expected = {f"model.{k}": v for k, v in build_classifier(net, meta.mean, meta.std).state_dict().items()}
    if meta.pipeline is not None:
        from .ars import build_mask

        settings = meta.pipeline
        try:
            mask = meta_build(
                lambda: build_mask(
                    str(settings.get("mode")), tuple(meta.input_shape), int(settings.get("mask_width", 32))
                )
            )
        except (ValueError, TypeError) as err:
            raise CheckpointError(
                f"{path} has unusable pipeline metadata {settings}: {first_line(err)}"
            ) from err
        if mask is not None:
            expected |= {f"mask.{k}": v for k, v in mask.state_dict().items()}
    if meta.denoiser is not None:
        denoiser = meta_build(lambda: build_denoiser(meta.denoiser["model"], meta.input_shape, str(path)))
        expected |= {f"denoiser.{k}": v for k, v in denoiser.state_dict().items()}
    prefixes = tuple({key.split(".", 1)[0] + "." for key in expected} | {"model."})
    for key, tensor in expected.items():
        found = file_state.get(key)
        if found is None:
            raise CheckpointError(
                f"{_misfit(path, meta)}: {key} is missing from the file, the metadata's architecture has it "
                f"with shape {_shape(tensor)}; use the checkpoint as train.py wrote it"
            )
        if not isinstance(found, torch.Tensor) or found.shape != tensor.shape:
            raise CheckpointError(
                f"{_misfit(path, meta)}: {key} has shape {_shape(found)} in the file, {_shape(tensor)} for "
                "that metadata; use the checkpoint as train.py wrote it"
            )
    extra = [key for key in file_state if key.startswith(prefixes) and key not in expected]
    if extra:
        raise CheckpointError(
            f"{_misfit(path, meta)}: the file holds {extra[0]} {_shape(file_state[extra[0]])}, which that "
            "architecture lacks; use the checkpoint as train.py wrote it"
        )


def _require_positive_std(model: nn.Module, path) -> None:
    """The normalization's ``std`` buffers come from the weights, not the metadata: refuse one <= 0."""
    for name, module in model.named_modules():
        if isinstance(module, Normalize) and module.std is not None and not bool((module.std > 0).all()):
            raise CheckpointError(
                f"{path} holds a normalization std <= 0 in {name or 'the model'}.std "
                f"({module.std.flatten().tolist()}): the classifier would divide by it; use a checkpoint "
                "written by train.py"
            )
