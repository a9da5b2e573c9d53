"""Initial weights from a local file (``model.weights=PATH``): a safetensors file, or a ``.pt``/``.pth``/
``.ckpt`` state dict read with ``torch.load(weights_only=True)`` (tensors and plain containers only, so a
pickled object runs nothing). A model hub is never contacted."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from rs_lightning.validation import ConfigError

from .safe_load import load_weights_only

SAFETENSORS = (".safetensors",)
WEIGHTS_KEY = "weights"
"""The model-config key naming an initial weights file: read when training starts, recorded in the
checkpoint as where the weights began, and never read when a checkpoint is loaded (its state dict holds the
weights)."""


def architecture(config: Mapping) -> dict:
    """A model config without :data:`WEIGHTS_KEY`: the arguments the architecture is built from."""
    return {k: v for k, v in config.items() if k != WEIGHTS_KEY}


def _refuse(key: str, path, why: str) -> ConfigError:
    return ConfigError(key, str(path), "a local safetensors file or a .pt/.pth state dict", why)


def read_state_file(path: str | os.PathLike, key: str = "model.weights") -> dict[str, torch.Tensor]:
    """The tensors of a weights file, by name; a one-line ConfigError naming ``key`` otherwise. A torch
    file may hold the state dict itself or under ``state_dict`` (a Lightning checkpoint, whose ``model.``
    prefix is kept)."""
    path = Path(path)
    if not path.is_file():
        raise _refuse(key, path, "it does not exist")
    if path.suffix in SAFETENSORS:
        try:
            from safetensors.torch import load_file
        except ImportError as err:
            raise _refuse(key, path, "reading safetensors needs pip install 'rs-lightning[models]'") from err
        try:
            return load_file(str(path), device="cpu")
        except Exception as err:  # noqa: BLE001 (safetensors' own error types: any is a bad file)
            raise _refuse(key, path, f"it is not a readable safetensors file ({type(err).__name__})") from err
    state = load_weights_only(path, key, "cpu", "a local .safetensors file or a .pt/.pth state dict")
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise _refuse(key, path, "it holds no mapping of names to tensors (a state dict)")
    return dict(state)


def load_weights(net: nn.Module, path: str | os.PathLike, key: str = "model.weights") -> None:
    """Load a weights file into ``net`` (into ``net.weights_module()`` where the model wraps a library's
    network, :mod:`rs_lightning.models.byname`): every name and shape must match, else a one-line
    ConfigError naming the first differences, before any training."""
    target = net.weights_module() if hasattr(net, "weights_module") else net
    state = read_state_file(path, key)
    own = target.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    misshapen = [k for k in own if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or misshapen:
        parts = []
        if misshapen:
            k = misshapen[0]
            parts.append(
                f"{k} has shape {tuple(state[k].shape)} in the file, {tuple(own[k].shape)} in the model"
            )
        if missing:
            parts.append(f"{len(missing)} of the model's tensors are missing (first {missing[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} are not the model's (first {unexpected[0]})")
        raise _refuse(
            key,
            path,
            f"its weights are for another architecture than {type(target).__name__}: {'; '.join(parts)}",
        )
    bad = next((k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()), None)
    if bad is not None:
        raise _refuse(key, path, f"its tensor {bad} holds NaN or infinite values")
    with torch.no_grad():
        for name, tensor in own.items():
            tensor.copy_(state[name].to(tensor.dtype))
