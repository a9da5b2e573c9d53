"""The one ``torch.load`` of the project: ``weights_only=True`` (tensors and plain containers only, so a
downloaded file cannot run code), with every failure turned into a one-line :class:`CheckpointError` that
names the key, the file and what to pass instead. Below both the checkpoint reader and the weights reader.
"""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import torch


class CheckpointError(ValueError):
    """A file that is not a usable rs-lightning checkpoint."""


_REFUSED_GLOBAL = (
    r"Unsupported global: GLOBAL (\S+) was not an allowed global",  # a class or function not allowlisted
    r"unsupported GLOBAL (\S+) whose module",  # one of a blocked module (os.system is posix.system)
    r"allowlisted via `add_safe_globals`,? but got (?:<class ')?([^'\s>]+)",  # an object of such a class
)
_TORCH_ADVICE = ("weights_only", "Weights only load failed", "Check the documentation", "add_safe_globals")


def refusal(err: BaseException) -> str:
    """One line out of the unpickler's multi-line refusal: the object it would not build. torch's advice
    around it (re-run with ``weights_only=False``, allowlist the global) is left out: it would run the
    file's code."""
    text = str(err)
    for pattern in _REFUSED_GLOBAL:
        if found := re.search(pattern, text, re.MULTILINE):
            return f"it would have to build {found.group(1)}"
    lines = [line.strip() for line in text.splitlines()]
    kept = [line for line in lines if line and not any(advice in line for advice in _TORCH_ADVICE)]
    line = kept[0].removeprefix("WeightsUnpickler error: ") if kept else "the unpickler refused it"
    return f"a pickle, not torch.save's format: {line}" if line.startswith("Unsupported operand") else line


def first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def load_weights_only(path: Path, key: str, map_location: str | torch.device, example: str) -> Any:
    """``torch.load(path, weights_only=True)``; every failure is a one-line CheckpointError naming ``key``."""
    if path.is_dir():
        raise CheckpointError(f"{key}={str(path)!r} is a folder, not a checkpoint file; pass {example}")
    if not path.is_file():
        raise CheckpointError(f"{key}={str(path)!r} does not exist; pass {example}")
    try:
        with warnings.catch_warnings():  # a raw pickle's protocol warning would be a second stderr line
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"{key}={str(path)!r} holds objects other than tensors and plain containers ({refusal(err)}); "
            "weights_only=True refuses to unpickle them, because a checkpoint from the internet must not run "
            f"code: pass {example}"
        ) from err
    except Exception as err:  # the unpickler raises many types on files that are not checkpoints
        raise CheckpointError(
            f"{key}={str(path)!r} is not a readable checkpoint (damaged, truncated or another format: "
            f"{first_line(err)}); pass {example}"
        ) from err
