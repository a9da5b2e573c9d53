"""An architecture's memory, measured on a build on PyTorch's ``meta`` device (shapes only, no storage), so a
size that cannot fit (``model.hidden=100000000000``, a checkpoint's ``num_classes=10**12``) is refused before
anything is allocated."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from rs_lightning.validation import ConfigError

TRAINING_FACTOR = 4
"""Bytes training holds per byte of weights, at least: the weights, their gradients and the optimizer's two
moments (Adam; SGD with momentum keeps one). Activations and data come on top, so the estimate is a lower
bound and a run it refuses could not have started."""


def meta_build(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` with its tensors on the ``meta`` device: the architecture's shapes, no memory."""
    with torch.device("meta"):
        return build()


def state_bytes(module: nn.Module) -> int:
    """Bytes of ``module``'s parameters and buffers."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def available_memory(device: torch.device) -> int | None:
    """Bytes free for new tensors on ``device``: CUDA's free memory, or the CPU's ``MemAvailable``
    (``/proc/meminfo``; else the free physical pages); None where unknown."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except RuntimeError:  # a GPU that fails here fails in the trainer too, with CUDA's message
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gib(size: int | float) -> str:
    """``size`` bytes in GiB, readable at any scale (``0.5 GiB``, ``2.8e+04 GiB``)."""
    value = size / 2**30
    return f"{value:.3g} GiB" if value < 1e5 else f"{value:.2e} GiB"


def training_device(cfg_trainer: Any) -> torch.device | None:
    """The device one rank of a Lightning trainer config trains on: its CUDA GPU for ``accelerator``
    gpu/cuda (or auto with a GPU here), the CPU otherwise; None for a fork strategy on CUDA, whose memory
    cannot be asked for here (that would initialize CUDA before the fork, which Lightning refuses)."""
    accelerator = str(cfg_trainer.get("accelerator", "auto")).lower()
    if accelerator not in ("gpu", "cuda", "auto") or not torch.cuda.is_available():
        return torch.device("cpu")
    if "fork" in str(cfg_trainer.get("strategy", "")) and not torch.cuda.is_initialized():
        return None
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())


def require_trainable_size(
    build: Callable[[], nn.Module], key: str, value: Any, device: torch.device | None
) -> None:
    """Refuse, with a ConfigError naming ``key`` (the model config, ``value``), an architecture whose
    weights times :data:`TRAINING_FACTOR` exceed the memory available on ``device`` (None: unknown, not
    checked); ``build`` runs on the meta device only. An architecture the build itself refuses is left to
    the real build's error."""
    if device is None:
        return
    try:
        net = meta_build(build)
    except Exception:  # noqa: BLE001 (the real build reports it, with its own message)
        return
    weights = state_bytes(net)
    need, free = weights * TRAINING_FACTOR, available_memory(device)
    if free is not None and need > free:
        parameters = sum(p.numel() for p in net.parameters())
        raise ConfigError(
            key,
            value,
            f"an architecture whose training state fits in the {gib(free)} available on {device}",
            f"Its weights take {gib(weights)} ({parameters:,} parameters), about {gib(need)} to train "
            f"(x{TRAINING_FACTOR}: weights, gradients, optimizer state); choose smaller layer sizes",
        )
