"""Helpers shared by the command-line entry points."""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec

import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, InstantiationException, OverrideParseException
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue
from torch.multiprocessing.spawn import ProcessRaisedException

from rs_lightning.analysis.published_numbers import UnknownCellError
from rs_lightning.data.base import DataFormatError, DatasetNotFoundError
from rs_lightning.data.registry import DATA_MODULES
from rs_lightning.methods.faults import NonFiniteLossError
from rs_lightning.models.checkpoint import CheckpointError, CheckpointMeta
from rs_lightning.registry import RegistryError
from rs_lightning.runs import ResultFileError
from rs_lightning.smoothing import NonFiniteLogitsError
from rs_lightning.validation import ConfigError, MissingValueError

USER_ERRORS = (
    ConfigError,
    CheckpointError,
    DatasetNotFoundError,
    DataFormatError,
    ResultFileError,
    NonFiniteLogitsError,
    NonFiniteLossError,  # a diverged training run: named epoch, step, method; last good checkpoint kept
    UnknownCellError,  # a dataset, method or σ without published numbers, naming the valid choices
)


def missing_keys(cfg: DictConfig | ListConfig) -> list[str]:
    """Full keys of the mandatory values (``???``) left unset in ``cfg``, without resolving interpolations."""
    found: list[str] = []

    def gather(node: DictConfig | ListConfig) -> None:
        if node._is_none() or node._is_missing() or node._is_interpolation():
            return
        for key in range(len(node)) if isinstance(node, ListConfig) else node.keys():
            child = node._get_node(key)
            if child is None:
                continue
            if child._is_missing():
                found.append(node._get_full_key(key))
            elif isinstance(child, DictConfig | ListConfig):
                gather(child)

    gather(cfg)
    return found


def require_no_missing(cfg: DictConfig) -> None:
    """Refuse a config with unset mandatory values (e.g. ``data=npz`` without ``data.path``), naming them."""
    keys = missing_keys(cfg)
    if keys:
        raise MissingValueError(keys)


class RankError(ValueError):
    """A user error raised in a rank that ``strategy=ddp_spawn`` started: its message, from the traceback text
    that torch.multiprocessing hands back to the launcher."""


def _rank_user_error(err: BaseException) -> RankError | None:
    """The user error at the end of a spawned rank's traceback (torch's ProcessRaisedException), or None."""
    names = {cls.__name__ for cls in USER_ERRORS} | {"MissingValueError"}
    for line in reversed(str(err).strip().splitlines()):
        found = re.match(r"^(?:[\w.]+\.)?(\w+): (.+)$", line.strip())
        if found and found.group(1) in names:
            return RankError(found.group(2))
    return None


def user_error(err: BaseException) -> BaseException | None:
    """The user error behind ``err``: itself, or the cause Hydra wrapped when instantiating a config node
    (e.g. a callback rejecting ``callbacks.certification.n0=0``); an unset mandatory value (``???``)
    becomes a :class:`MissingValueError` naming its full key; None for anything else."""
    while err is not None:
        if isinstance(err, USER_ERRORS):
            return err
        if isinstance(err, ProcessRaisedException):
            return _rank_user_error(err)
        if isinstance(err, MissingMandatoryValue):
            return MissingValueError(err.full_key or "a mandatory value")
        if not isinstance(err, InstantiationException):
            return None
        err = err.__cause__
    return None


_MAYBE_USER_ERRORS = (*USER_ERRORS, InstantiationException, MissingMandatoryValue, ProcessRaisedException)
"""The errors that :func:`user_error` may trace back to a user error."""


def print_user_error(err: BaseException) -> bool:
    """Print one line ``error: <message>`` to stderr for the user error behind ``err`` (:func:`user_error`);
    False, printing nothing, for any other error."""
    cause = user_error(err)
    if cause is None:
        return False
    print(f"error: {cause}", file=sys.stderr)
    return True


def run_or_exit(function: Callable[[DictConfig], Any], cfg: DictConfig) -> Any:
    """Run an entry point; a user error (also an unset ``???`` value, checked first) prints one line
    ``error: ...`` and exits with status 2."""
    try:
        require_no_missing(cfg)
        return function(cfg)
    except _MAYBE_USER_ERRORS as err:
        if not print_user_error(err):
            raise
        sys.exit(2)


P = ParamSpec("P")


def user_errors_exit(command: Callable[P, int]) -> Callable[P, int]:
    """Decorate a subcommand that returns its exit status: a user error (:func:`user_error`) prints one line
    ``error: ...`` and returns 2. Other errors, and argparse's own exits (``SystemExit``), pass through."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            return command(*args, **kwargs)
        except _MAYBE_USER_ERRORS as err:
            if not print_user_error(err):
                raise
            return 2

    return run


RUN_DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir")


def exit_if_run_dir_unwritable(argv: Sequence[str], keys: Sequence[str] = RUN_DIR_KEYS) -> None:
    """Hydra creates its run folder before the entry point runs, so a folder it cannot create ended in a
    Hydra traceback: check each folder given on the command line under ``keys`` first (up to its first
    ``${...}``: the folder holding the interpolated part); one line ``error: ...`` and status 2 if not."""
    parser = OverridesParser.create()
    for arg in argv:
        try:  # the value as Hydra reads it: unquoted, unescaped (Lightning's DDP subprocess command passes
            override = parser.parse_override(arg)  # hydra.run.dir="<dir>"; taken literally, a folder "<dir>")
        except HydraException:
            continue  # not an override (-m, --cfg), or one Hydra reports itself
        key, value = override.key_or_group, override.value()
        if key not in keys or override.is_delete() or not isinstance(value, str):
            continue  # a sweep, null or number: not a folder this check can name
        folder = value if "${" not in value else os.path.dirname(value.split("${", 1)[0])
        if not folder:
            continue
        try:
            require_writable_dir(folder, key, value)
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)


MAX_COMPOSED_JOBS = 8
"""A ``-m`` sweep is checked by composing at most this many of its jobs (each takes ~0.1 s)."""


def exit_if_config_invalid(argv: Sequence[str], config_dir: str | os.PathLike, config_name: str) -> None:
    """Hydra reports its own errors (an unknown key, a config group option that does not exist, bad
    override syntax) in several lines with status 1: compose the config first, as Hydra will, with its
    compose API, and print one line ``error: ...`` (Hydra's message and hint) with status 2 instead. With
    ``-m`` some of the sweep's jobs are composed (:func:`sweep_jobs`). Hydra's flags that compose nothing
    (``--help``, ``--info``, another config), and sweeps of a sweeper other than the basic one, are left
    to Hydra."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from omegaconf.errors import OmegaConfBaseException

    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        args, unknown = parser.parse_known_args(list(argv))
    except argparse.ArgumentError:
        return  # Hydra's own parser reports it
    skip = (args.help, args.hydra_help, args.shell_completion, args.info, args.experimental_rerun)
    if unknown or any(skip) or args.config_path or args.config_name or args.config_dir:
        return
    config_dir = Path(config_dir).resolve()
    try:
        jobs = sweep_jobs(args.overrides, config_dir) if args.multirun else [args.overrides]
        if not jobs:
            return
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            for job in jobs:
                compose(config_name, overrides=job, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as err:
        line = hydra_error_line(err)
        if isinstance(err, OverrideParseException):  # its message may not say which override
            bad = next((a for a in args.overrides if not _parses(a)), None)
            line = line if bad is None or bad in line else f"{bad}: {line}"
        print(f"error: {line}", file=sys.stderr)
        sys.exit(2)


def _parses(override: str) -> bool:
    try:
        OverridesParser.create().parse_override(override)
    except HydraException:
        return False
    return True


def sweep_jobs(
    overrides: Sequence[str], config_dir: str | os.PathLike, limit: int = MAX_COMPOSED_JOBS
) -> list[list[str]]:
    """Up to ``limit`` jobs (override lists) of a ``-m`` sweep that hold every swept option of a config
    group (``method=gaussian,macer``; the i-th job takes each group's i-th option, cycling) and of a
    ``hydra`` key; a swept plain value (``sigma=0.25,0.5``) takes its first: another value of the same key
    composes alike. Empty for a sweep the basic sweeper does not run (an ``interval(...)``, another
    ``hydra/sweeper``), which is left to Hydra."""
    columns = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key, name = override.get_key_element(), override.key_or_group
        if name == "hydra/sweeper" or (override.is_sweep_override() and not override.is_discrete_sweep()):
            return []
        if not override.is_sweep_override():
            columns.append([override.input_line or f"{key}={override.get_value_element_as_str()}"])
            continue
        values = [f"{key}={value}" for value in override.sweep_string_iterator()]
        composes_alike = not name.startswith("hydra") and not (Path(config_dir) / name).is_dir()
        columns.append(values[:1] if composes_alike else values)
    count = min(limit, max((len(c) for c in columns), default=1))
    return [[c[i % len(c)] for c in columns] for i in range(count)]


def hydra_error_line(err: BaseException) -> str:
    """Hydra's multi-line composition error (and the OmegaConf error behind it) in one line: its sentences
    and hints kept, an option list joined by commas, the config search path and OmegaConf's key details
    left out."""
    texts = [str(err)]
    if err.__cause__ is not None and str(err.__cause__) not in texts[0]:
        texts.append(str(err.__cause__))
    first, *rest = texts[0].strip().splitlines() or [type(err).__name__]
    pieces: list[str] = []
    for raw in [first, *(line for t in texts[1:] for line in t.strip().splitlines()), *rest]:
        line = raw.strip()
        if line.startswith("Config search path:"):
            break
        if not line or line.startswith(("full_key:", "object_type=", "reference_type=")):
            continue
        if raw.startswith("\t") and pieces and pieces[-1].endswith((":", ",")):
            pieces[-1] += f" {line},"
        else:
            pieces.append(line)
    sentences = [p.rstrip(",") for p in pieces]
    return " ".join(s if s.endswith((".", ":", "!", "?")) else f"{s}." for s in sentences).rstrip(".")


def require_writable_dir(path: str | os.PathLike, key: str, value: Any = None) -> Path:
    """Create folder ``path`` if needed and check that a file can be written in it; returns it.

    A ConfigError names ``key`` (and ``value``, default ``path``: e.g. the configured file whose folder this
    is) when ``path`` is an existing file, lies under one, or cannot be created or written (read-only or
    virtual file system, no permission). Call it before any work, so a long run cannot fail at its end.
    """
    path = Path(path)
    value = str(path) if value is None else str(value)
    hint = f"choose another {key}=... in a folder you can write to"
    if path.exists() and not path.is_dir():
        raise ConfigError(key, value, "a writable folder", f"{path} is an existing file; {hint}")
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write_test_", dir=path)
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(
            key, value, "a writable folder", f"{path} cannot be created or written ({reason}); {hint}"
        ) from err
    return path


def _requested_gpus(devices: Any) -> int | None:
    """How many GPUs Lightning's ``devices`` asks for (None: all available), as the highest index + 1 when it
    lists device indices."""
    if isinstance(devices, ListConfig | list | tuple):
        return max((int(d) for d in devices), default=-1) + 1
    text = str(devices).strip()
    if text in ("auto", "-1"):
        return None
    if "," in text:
        return max((int(d) for d in text.split(",") if d.strip()), default=-1) + 1
    return int(text)


def check_trainer_config(cfg_trainer: DictConfig) -> None:
    """Refuse a GPU trainer (``trainer=ddp``/``gpu``: accelerator gpu or cuda) on a machine without enough
    CUDA GPUs, pointing to ``trainer=ddp_sim`` (DDP on 2 CPU processes) or ``trainer=cpu``."""
    accelerator = str(cfg_trainer.get("accelerator", "auto")).lower()
    if accelerator not in ("gpu", "cuda"):
        return
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    fix = "Use trainer=ddp_sim (DDP on 2 CPU processes) or trainer=cpu"
    if available == 0:
        raise ConfigError(
            "trainer.accelerator", accelerator, "cpu or auto here, since no CUDA GPU is available", fix
        )
    devices = cfg_trainer.get("devices", "auto")
    try:
        wanted = _requested_gpus(devices)
    except (TypeError, ValueError):
        return  # Lightning names the malformed value itself
    if wanted is not None and wanted > available:
        raise ConfigError(
            "trainer.devices",
            devices if isinstance(devices, int | str) else list(devices),
            f"at most {available} (or -1 for all), the CUDA GPUs here",
            f"Set trainer.devices={available}, or {fix[0].lower()}{fix[1:]}",
        )


def plain(cfg: DictConfig | None) -> Any:
    """A resolved plain-Python copy of a config node (storable in checkpoints and JSON)."""
    return None if cfg is None else OmegaConf.to_container(cfg, resolve=True)


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


def without_downloads(config: Any) -> Any:
    """``config`` with every ``download`` key, at any depth (a composite's ``source`` too), set to False."""
    if isinstance(config, dict):
        return {k: False if k == "download" else without_downloads(v) for k, v in config.items()}
    if isinstance(config, list | tuple):
        return [without_downloads(v) for v in config]
    return config


def checkpoint_datamodule(cfg: DictConfig, meta: CheckpointMeta):
    """The data module of ``cfg.data`` if given, else the checkpoint's: a registered data module
    (:data:`~rs_lightning.data.registry.DATA_MODULES`) built with plain arguments and ``download=False`` (a
    file never makes this process fetch or write data); refuses a dataset whose class count or input shape
    differs from the checkpoint's."""
    if cfg.get("data") is not None:
        datamodule = instantiate(cfg.data)
    else:
        config = without_downloads(meta.data)
        try:
            datamodule = DATA_MODULES.build(config, "data")
        except RegistryError as err:
            raise CheckpointError(
                f"the checkpoint's data config is unusable ({err}); pass data=... to choose the data"
            ) from err
    datamodule.prepare_data()
    datamodule.setup()
    if int(datamodule.num_classes) != int(meta.num_classes):
        raise ConfigError(
            "data",
            datamodule.describe().get("name"),
            f"a dataset with {meta.num_classes} classes like the checkpoint's, not {datamodule.num_classes}",
        )
    expected = meta.input_shape
    if expected is not None and list(datamodule.input_shape) != list(expected):
        raise ConfigError(
            "data",
            datamodule.describe().get("name"),
            f"a dataset of {tuple(expected)} inputs like the checkpoint's, "
            f"not {tuple(datamodule.input_shape)}",
        )
    return datamodule


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (read in 1 MiB chunks): what ``settings.json`` records of a checkpoint."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
