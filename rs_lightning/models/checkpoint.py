"""Build a smoothed-classifier base model from an rs-lightning checkpoint, safely.

Checkpoints are read with ``torch.load(weights_only=True)`` and a class is only built from a ``_target_``
inside an allowed package, so a downloaded checkpoint can never run code.
"""

from __future__ import annotations

import importlib
import os
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .normalize import build_classifier

CHECKPOINT_KEY = "rs_lightning"
"""Key of the metadata dict (sigma, model/data config, normalization, classes) in every checkpoint."""


class CheckpointError(ValueError):
    """A file that is not a usable rs-lightning checkpoint."""


def safe_instantiate(config: dict[str, Any], allowed_prefixes: tuple[str, ...], **kwargs) -> Any:
    """Call ``config["_target_"](**config, **kwargs)`` if the target is inside ``allowed_prefixes``.

    Nested ``_target_`` entries are refused: checkpoint configs are flat.
    """
    config = dict(config)
    target = config.pop("_target_", None)
    if not isinstance(target, str) or not target.startswith(allowed_prefixes):
        raise CheckpointError(
            f"refusing to build _target_={target!r}: only classes under {', '.join(allowed_prefixes)} "
            "are allowed"
        )
    for key, value in config.items():
        if isinstance(value, dict) and "_target_" in value:
            raise CheckpointError(f"refusing nested _target_ in {key!r} of {target}")
    module_name, _, attr = target.rpartition(".")
    factory = getattr(importlib.import_module(module_name), attr)
    config = {k: v for k, v in config.items() if not k.startswith("_")}
    return factory(**config, **kwargs)


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint dict with ``weights_only=True`` and check it carries rs-lightning metadata."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint={str(path)!r} does not exist; pass the .ckpt that train.py wrote "
            "(e.g. outputs/train/<date>/<time>/checkpoints/last.ckpt)"
        )
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"{path} holds objects other than tensors and plain containers; weights_only=True refuses to "
            f"unpickle them, because a checkpoint from the internet must not run code ({err})"
        ) from err
    except Exception as err:  # the unpickler raises many types on files that are not checkpoints
        raise CheckpointError(f"{path} is not a PyTorch checkpoint ({err})") from err
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path} is a PyTorch file but not an rs-lightning checkpoint (no {CHECKPOINT_KEY!r} metadata); "
            "train with train.py, which records sigma, architecture and normalization"
        )
    return checkpoint


def load_classifier(
    path: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> tuple[nn.Module, dict]:
    """Return ``(base_classifier, metadata)``; with its normalization layer, in eval mode."""
    checkpoint = read_checkpoint(path, map_location)
    meta = checkpoint[CHECKPOINT_KEY]
    net = safe_instantiate(
        meta["model"],
        ("rs_lightning.models.",),
        input_shape=tuple(meta["input_shape"]),
        num_classes=int(meta["num_classes"]),
    )
    model = build_classifier(net, meta.get("mean"), meta.get("std"))
    state = {
        k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")
    }
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(
            f"the weights in {path} do not fit the architecture {meta['model'].get('_target_')} "
            f"({meta['model']}): {err}"
        ) from err
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{path} holds {bad} non-finite values (NaN/inf) in {name}: the run that wrote it diverged; "
                "certify an earlier checkpoint"
            )
    return model.to(map_location).eval(), meta
