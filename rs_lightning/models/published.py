"""Load the checkpoints released by the published randomized-smoothing repositories, safely.

Layouts (confirmed in each repository's ``architectures.py``, ``datasets.py``, its training script's
``torch.save`` and its ``certify.py``):

- ``cohen`` (locuslab/smoothing ``code/train.py``), ``smoothadv`` (Hadisalman/smoothing-adversarial
  ``code/train_pgd.py``), ``consistency`` (jh-jeong/smoothing-consistency ``code/train_consistency.py``),
  ``smoothmix`` (jh-jeong/smoothmix ``code/train.py``), ``catrs`` (alinlab/smoothing-catrs
  ``code/train_catrs.py``): ``{'epoch', 'arch', 'state_dict', 'optimizer'}`` where ``state_dict`` is that of
  ``Sequential(NormalizeLayer, net)``. ``NormalizeLayer`` (and SmoothAdv's ``InputCenterLayer``) keeps its
  means/stds as plain tensor attributes, not buffers, so the file holds no ``0.`` keys and the network's keys
  start with ``1.``; ImageNet's ResNet-50 is wrapped in ``DataParallel`` (``1.module.``). The
  normalization is the dataset's (CIFAR-10/ImageNet/CIFAR-100 mean and std; MNIST: ``nn.Identity``).
- ``macer`` (RuntianZ/macer ``main.py``): ``{'net': bare network state_dict, 'epoch'}``, no ``arch``
  and no normalization layer for any dataset (the network reads raw [0,1] inputs). The architecture
  (``resnet110`` or ``LeNet`` of its ``model.py``) is recognized from the weight names.

No layout records the training sigma: ``meta.sigma`` is None and certification needs ``sigma=``.
Cohen's CIFAR ResNet (bearpaw's, ``code/archs/cifar_resnet.py``; identical in every Cohen-derived repository
and in MACER's ``model.py``), torchvision's ResNet-50 and the repositories' LeNet use the same parameter names
as this project's ``CIFARResNet``, ``ResNet50`` and ``LeNet``, so only the prefixes are mapped.

Files are read with ``torch.load(weights_only=True)`` only: a file holding pickled code is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from rs_lightning.validation import ConfigError

from .checkpoint import CheckpointMeta, build_model
from .normalize import build_classifier
from .safe_load import CheckpointError, load_weights_only

FORMATS = ("cohen", "smoothadv", "macer", "consistency", "smoothmix", "catrs")
"""Values of ``checkpoint_format``: the repository whose training script wrote the file."""

NORMALIZATIONS = ("normalize", "center", "identity")
"""``normalization=`` overrides: NormalizeLayer (mean/std), SmoothAdv's InputCenterLayer (mean only), none."""

_CIFAR = "rs_lightning.models.cifar_resnet.CIFARResNet"
ARCHITECTURES: dict[str, dict[str, Any]] = {
    # locuslab/smoothing, smoothing-consistency, smoothmix, smoothing-catrs code/architectures.py
    "cifar_resnet20": {"_target_": _CIFAR, "depth": 20},
    "cifar_resnet110": {"_target_": _CIFAR, "depth": 110},
    # smoothing-catrs: cifar_resnet110 with 100 classes (CIFAR-100)
    "cifar100_resnet110": {"_target_": _CIFAR, "depth": 110},
    # smoothing-adversarial: cifar_resnet110 with 1000 classes, pre-trained on 32x32 ImageNet
    "imagenet32_resnet110": {"_target_": _CIFAR, "depth": 110},
    # torchvision resnet50(pretrained=False) in DataParallel (all Cohen-derived repositories)
    "resnet50": {"_target_": "rs_lightning.models.imagenet.ResNet50"},
    # smoothing-consistency / smoothmix / smoothing-catrs archs/lenet.py (MNIST), MACER model.py LeNet
    "lenet": {"_target_": "rs_lightning.models.lenet.LeNet"},
}
"""The repositories' ``arch`` strings and this project's model config for each (``num_classes`` and
``input_shape`` come from the caller; a count that differs from the file's shows as a shape mismatch)."""

_EXAMPLE = "a checkpoint file released by (or trained with) that repository, e.g. checkpoint.pth.tar"
_SHOWN = 4  # keys listed per kind of mismatch in an error message


def _few(items: Iterable[str], shown: int = _SHOWN) -> str:
    items = list(items)
    head = ", ".join(items[:shown])
    return head + (f", ... (+{len(items) - shown} more)" if len(items) > shown else "")


def _strip_common(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Remove ``prefix`` (``module.``: DataParallel) when every key carries it."""
    if state and all(k.startswith(prefix) for k in state):
        return {k.removeprefix(prefix): v for k, v in state.items()}
    return state


def _state_dict(raw: Any, path: Path, fmt: str) -> dict[str, torch.Tensor]:
    """The weights dict of the layout: ``net`` (MACER) or ``state_dict`` (Cohen-derived)."""
    entry = "net" if fmt == "macer" else "state_dict"
    if not isinstance(raw, Mapping) or entry not in raw:
        found = _few(map(str, raw)) if isinstance(raw, Mapping) else type(raw).__name__
        other = "state_dict" if entry == "net" else "net"
        hint = ""
        if isinstance(raw, Mapping) and other in raw:
            hint = (
                "; it looks like a MACER file: pass checkpoint_format=macer"
                if other == "net"
                else "; it looks like a Cohen-derived file: pass the repository's checkpoint_format "
                f"({', '.join(f for f in FORMATS if f != 'macer')})"
            )
        raise CheckpointError(
            f"{path} is not a {fmt} checkpoint: expected a dict with {entry!r}, found {found}{hint}"
        )
    state = raw[entry]
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{path}: {entry!r} is a {type(state).__name__}, not a state dict")
    bad = [str(k) for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path}: {entry!r} holds entries that are not tensors: {_few(bad)}")
    return _strip_common(dict(state), "module.")


def _split_sequential(
    state: dict[str, torch.Tensor], path: Path, fmt: str
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``Sequential(NormalizeLayer, net)`` keys into (normalization ``0.*``, network ``1.*``), unprefixed."""
    stray = [k for k in state if not k.startswith(("0.", "1."))]
    if stray or not any(k.startswith("1.") for k in state):
        raise CheckpointError(
            f"{path} does not have the {fmt} layout Sequential(NormalizeLayer, net): expected keys "
            f"'1.<layer>' (ImageNet: '1.module.<layer>'), found {_few(stray or list(state))}"
            + ("; a bare network's weights: is it a MACER file (checkpoint_format=macer)?" if stray else "")
        )
    norm = {k.removeprefix("0."): v for k, v in state.items() if k.startswith("0.")}
    net = {k.removeprefix("1."): v for k, v in state.items() if k.startswith("1.")}
    return norm, _strip_common(net, "module.")


def _infer_arch(keys: Sequence[str]) -> tuple[str, dict[str, Any]] | None:
    """(name, model config) of the architecture whose parameter names these are, or None (MACER files
    record no ``arch``: its ``resnet110``/``LeNet`` are recognized by their layer names and block counts)."""
    keyset = set(keys)
    if {"conv1.weight", "conv2.weight", "fc1.weight", "fc2.weight"} <= keyset:
        return "lenet", dict(ARCHITECTURES["lenet"])
    blocks = [
        len({m.group(1) for k in keys if (m := re.match(rf"layer{stage}\.(\d+)\.", k))})
        for stage in (1, 2, 3, 4)
    ]
    bottleneck = "layer1.0.conv3.weight" in keyset
    if bottleneck and blocks == [3, 4, 6, 3]:
        return "resnet50", dict(ARCHITECTURES["resnet50"])
    n = blocks[0]
    if n and not bottleneck and blocks == [n, n, n, 0]:
        return f"cifar_resnet{6 * n + 2}", {"_target_": _CIFAR, "depth": 6 * n + 2}
    return None


def _model_config(
    model_cfg: Mapping | None, arch: Any, net_keys: Sequence[str], path: Path, fmt: str
) -> tuple[dict[str, Any], str | None]:
    """(this project's model config, the architecture's name) from ``model_cfg``, ``arch`` or the keys."""
    if model_cfg is not None:
        if isinstance(model_cfg, DictConfig):
            model_cfg = OmegaConf.to_container(model_cfg, resolve=True)  # type: ignore[assignment]
        return dict(model_cfg), (str(arch) if arch is not None else None)  # type: ignore[arg-type]
    if arch is not None:
        if str(arch) not in ARCHITECTURES:
            raise CheckpointError(
                f"{path} records arch={arch!r}, which has no counterpart in rs_lightning.models (known: "
                f"{', '.join(ARCHITECTURES)}); pass model_cfg={{'_target_': 'rs_lightning.models....'}} "
                "for a network with the same parameter names"
            )
        return dict(ARCHITECTURES[str(arch)]), str(arch)
    inferred = _infer_arch(net_keys)
    if inferred is None:
        raise CheckpointError(
            f"{path} ({fmt}) records no 'arch' and its weights ({_few(net_keys)}) are not those of a known "
            f"architecture ({', '.join(ARCHITECTURES)}); pass model_cfg with the network's _target_"
        )
    name, cfg = inferred
    return cfg, name


def _vector(t: torch.Tensor) -> list[float]:
    return [float(v) for v in t.detach().flatten().cpu().tolist()]


def _normalization(
    norm_state: dict[str, torch.Tensor],
    fmt: str,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    normalization: str | None,
    channels: int,
    path: Path,
) -> tuple[list[float] | None, list[float] | None, str]:
    """(mean, std, mode): the file's NormalizeLayer tensors if it stored any, else the layout's default."""
    if normalization is not None and normalization not in NORMALIZATIONS:
        raise ConfigError("normalization", normalization, f"one of {', '.join(NORMALIZATIONS)} or None")
    norm_state = dict(norm_state)
    names = {k: norm_state.pop(k) for k in ("means", "mean", "sds", "std") if k in norm_state}
    if norm_state:
        raise CheckpointError(
            f"{path}: unexpected normalization-layer keys {_few('0.' + k for k in norm_state)} "
            "(expected none, or 0.means and 0.sds)"
        )
    file_mean, file_std = names.get("means", names.get("mean")), names.get("sds", names.get("std"))
    if file_std is not None and file_mean is None:
        raise CheckpointError(f"{path} stores a normalization std (0.sds) but no mean (0.means)")
    if file_mean is not None:
        m = _vector(file_mean)
        s = _vector(file_std) if file_std is not None else [1.0] * len(m)
        mode = "normalize" if file_std is not None else "center"
        if normalization not in (None, mode):
            raise CheckpointError(
                f"{path} stores its normalization layer ({mode}: mean {m}, std {s}); "
                f"normalization={normalization!r} would change the network it was trained as"
            )
    else:
        mode = normalization or ("identity" if fmt == "macer" or mean is None else "normalize")
        if mode == "identity":
            return None, None, mode
        if mean is None or (mode == "normalize" and std is None):
            raise ConfigError(
                "normalization", mode, "'identity' when the dataset has no mean/std", "or pass mean and std"
            )
        m = [float(v) for v in mean]
        s = [float(v) for v in std] if mode == "normalize" and std is not None else [1.0] * len(m)
    if len(m) != channels or len(s) != channels:
        raise CheckpointError(
            f"{path}: the normalization has {len(m)} mean(s) and {len(s)} std(s), input_shape {channels} "
            "channel(s)"
        )
    return m, s, mode


def _check_fit(
    net: nn.Module, state: dict[str, torch.Tensor], path: Path, fmt: str, cfg: Mapping[str, Any]
) -> dict[str, torch.Tensor]:
    """Refuse, in one line, weights whose names or shapes differ from ``net``'s; returns ``state`` ready for
    a strict load (BatchNorm ``num_batches_tracked``, absent from files of PyTorch < 0.4.1, set to 0)."""
    expected = net.state_dict()
    state = dict(state)
    for key, value in expected.items():
        if key.endswith("num_batches_tracked") and key not in state:
            state[key] = torch.zeros_like(value)
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} expected {tuple(expected[k].shape)} found {tuple(state[k].shape)}"
        for k in expected
        if k in state and state[k].shape != expected[k].shape
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} key(s): {_few(missing)}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} key(s): {_few(unexpected)}")
        if shapes:
            parts.append(f"wrong shape(s): {_few(shapes)}")
        args = ", ".join(f"{k}={v!r}" for k, v in cfg.items() if k != "_target_")
        raise CheckpointError(
            f"the {fmt} weights in {path} do not fit {cfg.get('_target_')}({args}): {'; '.join(parts)}"
        )
    for key, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(f"{path} holds {bad} non-finite values (NaN/inf) in {key}")
    return state


def load_published(
    path: str | os.PathLike,
    checkpoint_format: str,
    model_cfg: Mapping | None,
    input_shape: Sequence[int],
    num_classes: int,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    map_location: str | torch.device = "cpu",
    *,
    normalization: str | None = None,
) -> tuple[nn.Module, CheckpointMeta]:
    """Return ``(base_classifier, meta)`` for a checkpoint of a published repository (see module docstring).

    Args:
        path: the file (e.g. ``checkpoint.pth.tar``; MACER: ``<epoch>.pth``).
        checkpoint_format: one of ``FORMATS``.
        model_cfg: a model config with ``_target_`` under ``rs_lightning.models`` (as in
            ``conf/model/*.yaml``), or None to take the architecture from the file's ``arch`` (MACER: from
            its weight names).
        input_shape: (C, H, W) of the dataset.
        num_classes: number of logits.
        mean, std: the dataset's normalization, used as the file's NormalizeLayer (its tensors are not saved);
            None for identity (MNIST). Ignored for ``macer``, which has no normalization layer.
        map_location: device for the weights and the returned model.
        normalization: None for the layout's own (``normalize``; ``identity`` for ``macer`` or mean None),
            ``center`` for SmoothAdv's InputCenterLayer (x - mean; its released ImageNet models and CIFAR-10
            models trained from scratch, per its README), ``normalize`` or ``identity`` to force one.

    Returns:
        ``Sequential(Normalize, net)`` in eval mode on ``map_location``, and its :class:`CheckpointMeta`:
        ``sigma`` (None: no layout records it), ``model`` (config with ``_target_``), ``num_classes``,
        ``input_shape``, ``mean``, ``std``, ``checkpoint_format``, ``arch`` (the file's, or the recognized
        one), ``normalization`` and ``epoch`` (the file's, or None).

    Raises:
        ConfigError: unknown ``checkpoint_format`` or ``normalization``.
        CheckpointError: unreadable file, pickled code, other layout, unknown arch, or weights whose names or
            shapes do not fit (one line listing the first few expected and found).
    """
    if checkpoint_format not in FORMATS:
        raise ConfigError("checkpoint_format", checkpoint_format, f"one of {', '.join(FORMATS)}")
    path = Path(path)
    raw = load_weights_only(path, "checkpoint", map_location, _EXAMPLE)
    state = _state_dict(raw, path, checkpoint_format)
    if checkpoint_format == "macer":
        norm_state, net_state = {}, state
    else:
        norm_state, net_state = _split_sequential(state, path, checkpoint_format)
    arch = raw.get("arch") if checkpoint_format != "macer" else None  # MACER saves only 'net', 'epoch'
    arch = str(arch) if arch is not None else None
    cfg, arch_name = _model_config(model_cfg, arch, list(net_state), path, checkpoint_format)
    shape = [int(v) for v in input_shape]
    net = build_model(cfg, shape, num_classes, str(path))
    m, s, mode = _normalization(norm_state, checkpoint_format, mean, std, normalization, shape[0], path)
    net.load_state_dict(_check_fit(net, net_state, path, checkpoint_format, cfg))
    try:
        model = build_classifier(net, m, s).to(map_location).eval()
    except ValueError as err:  # e.g. a std <= 0 from the file or the caller
        raise CheckpointError(f"{path}: unusable normalization mean={m!r}, std={s!r}: {err}") from err
    epoch = raw.get("epoch")
    meta = CheckpointMeta(
        sigma=None,
        model=cfg,
        num_classes=int(num_classes),
        input_shape=shape,
        mean=m,
        std=s,
        checkpoint_format=checkpoint_format,
        arch=arch_name,
        normalization=mode,
        epoch=int(epoch) if isinstance(epoch, int) else None,
    )
    return model, meta
