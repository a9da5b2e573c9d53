"""Helpers shared by the command-line entry points."""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rs_lightning.analysis.results import ResultFileError
from rs_lightning.data.base import DatasetNotFoundError
from rs_lightning.models.checkpoint import CheckpointError, safe_instantiate
from rs_lightning.smoothing import NonFiniteLogitsError
from rs_lightning.validation import ConfigError

USER_ERRORS = (ConfigError, CheckpointError, DatasetNotFoundError, ResultFileError, NonFiniteLogitsError)


def user_error(err: BaseException) -> BaseException | None:
    """The user error behind ``err``: itself, or the cause Hydra wrapped when instantiating a config node
    (e.g. a callback rejecting ``callbacks.certification.n0=0``); None for anything else."""
    while err is not None:
        if isinstance(err, USER_ERRORS):
            return err
        if not isinstance(err, InstantiationException):
            return None
        err = err.__cause__
    return None


def run_or_exit(function: Callable[[DictConfig], Any], cfg: DictConfig) -> Any:
    """Run an entry point; a user error prints one line ``error: ...`` and exits with status 2."""
    try:
        return function(cfg)
    except (*USER_ERRORS, InstantiationException) as err:
        cause = user_error(err)
        if cause is None:
            raise
        print(f"error: {cause}", file=sys.stderr)
        sys.exit(2)


def plain(cfg: DictConfig | None) -> Any:
    """A resolved plain-Python copy of a config node (storable in checkpoints and JSON)."""
    return None if cfg is None else OmegaConf.to_container(cfg, resolve=True)


def tune_cpu_allocator() -> bool:
    """Keep freed activation buffers in glibc's heap instead of returning them to the OS.

    With glibc defaults, every large CPU forward pass mmaps and page-faults its activations anew; on
    2 cores that costs ~35% of certification time (bench/README.md). Same effect as
    ``MALLOC_MMAP_THRESHOLD_=32MiB MALLOC_TRIM_THRESHOLD_=2GiB MALLOC_TOP_PAD_=512MiB``. No-op off glibc
    or when ``RS_LIGHTNING_DEFAULT_MALLOC=1``.
    """
    if os.environ.get("RS_LIGHTNING_DEFAULT_MALLOC") == "1" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3  # glibc <malloc.h>
    settings = ((m_mmap_threshold, 32 << 20), (m_trim_threshold, (1 << 31) - 1), (m_top_pad, 512 << 20))
    return all(libc.mallopt(option, value) for option, value in settings)


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA if available, else CPU; otherwise ``torch.device(name)``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ConfigError("device", name, "auto, cpu, cuda or cuda:<index>") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device", name, "a device that exists here", "no CUDA device is available; use device=cpu"
        )
    return device


def checkpoint_datamodule(cfg: DictConfig, meta: dict):
    """The data module of ``cfg.data`` if given, else the checkpoint's (its ``_target_`` must be inside
    ``rs_lightning.data``); refuses a dataset whose class count differs from the checkpoint's."""
    if cfg.get("data") is not None:
        datamodule = instantiate(cfg.data)
    else:
        datamodule = safe_instantiate(meta["data"], ("rs_lightning.data.",))
    datamodule.prepare_data()
    datamodule.setup()
    if int(datamodule.num_classes) != int(meta["num_classes"]):
        raise ConfigError(
            "data",
            datamodule.describe().get("name"),
            f"a dataset with {meta['num_classes']} classes like the checkpoint's, "
            f"not {datamodule.num_classes}",
        )
    return datamodule
