"""Any image-classification set stored as uint8 arrays in an .npz (e.g. shared/data/mnist.npz)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from rs_lightning.data.arrays import ArrayDataset, crop_flip, to_nchw
from rs_lightning.data.base import DataFormatError, DatasetNotFoundError, RSDataModule
from rs_lightning.validation import ConfigError

KEYS = ("x_train", "y_train", "x_test", "y_test")
SAVE_HINT = "write it with numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)"


def _floats(values: Sequence[float] | None, key: str, channels: int) -> tuple[float, ...] | None:
    if values is None:
        return None
    out = tuple(float(v) for v in values)
    if len(out) != channels:
        raise ConfigError(f"data.{key}", list(out), f"{channels} value(s), one per image channel")
    return out


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _image_problem(name: str, x: np.ndarray) -> str | None:
    """What is wrong with image array ``name`` and how to fix it, or None."""
    if x.dtype != np.uint8:
        if np.issubdtype(x.dtype, np.floating):
            bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
            nan = f" with {bad} NaN/inf value(s) (replace them first)" if bad else ""
            return (
                f"{name} must be uint8 (0..255), got {x.dtype}{nan}: "
                "save (x * 255).round().astype(numpy.uint8) if its values are in [0, 1]"
            )
        if np.issubdtype(x.dtype, np.integer) and (x.size == 0 or (x.min() >= 0 and x.max() <= 255)):
            return f"{name} must be uint8 (0..255), got {x.dtype}: save x.astype(numpy.uint8)"
        return f"{name} must be uint8 (0..255), got {x.dtype}: rescale it to 0..255 and save it as uint8"
    if x.ndim == 2:
        side = math.isqrt(x.shape[1])
        rgb = math.isqrt(x.shape[1] // 3)
        if side * side == x.shape[1]:
            fix = f"x.reshape(-1, {side}, {side})"
        elif 3 * rgb * rgb == x.shape[1]:
            fix = f"x.reshape(-1, {rgb}, {rgb}, 3) (if the values are stored HWC)"
        else:
            fix = "x.reshape(N, H, W) or x.reshape(N, H, W, C)"
        return f"{name} must be images (N, H, W) or (N, H, W, C), got flat vectors {x.shape}: save {fix}"
    if x.ndim not in (3, 4):
        return f"{name} must be images (N, H, W) or (N, H, W, C), got shape {x.shape}"
    if x.ndim == 4 and x.shape[1] in (1, 3) and x.shape[3] not in (1, 3, 4):
        return (
            f"{name} looks channels-first {x.shape}; images must be (N, H, W, C): "
            "save x.transpose(0, 2, 3, 1)"
        )
    return None


def _label_problem(name: str, y: np.ndarray) -> str | None:
    """What is wrong with label array ``name`` and how to fix it, or None."""
    if y.ndim == 2 and y.shape[1] > 1:
        return f"{name} must be 1-D integer labels, got shape {y.shape} (one-hot?): save y.argmax(1)"
    if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
        fix = "save y.astype(numpy.int64)" if np.issubdtype(y.dtype, np.number) else "store class indices"
        return f"{name} must be a 1-D integer array, got {y.dtype} {y.shape}: {fix}"
    if y.size and y.min() < 0:
        return f"{name} has negative labels (min {int(y.min())}): labels must be class indices 0..K-1"
    return None


SPARSE_FROM = 1024
"""Labels may leave most of 0..K-1 unused only up to K = SPARSE_FROM classes (a small subset of ImageNet's
1000 classes has fewer images than classes); above, K must be at most :data:`SPARSE_RATIO` times the number
of distinct training labels."""
SPARSE_RATIO = 10
NAMES_FIX = "or save a class_names array with one name per class"


def _check_label_range(path: str, y_train: np.ndarray, y_test: np.ndarray) -> None:
    """Without class names the class count K is max(y_train) + 1 (one output per training class): refuse
    test labels above it (the model could never predict them) and training labels that leave most of
    0..K-1 unused (e.g. a label 10**6 among a few images, a model of 10**6 outputs)."""
    top, test_top = int(y_train.max()), int(y_test.max())
    if test_top > top:
        raise DataFormatError(
            f"npz: {path}: y_test has label {test_top}, but y_train's labels go up to {top}: the model gets "
            f"one output per training class ({top + 1}), so it could never predict class {test_top}; fix "
            f"y_test, add training images of class {test_top}, {NAMES_FIX}"
        )
    used = len(np.unique(y_train))
    if top + 1 > SPARSE_FROM and top + 1 > SPARSE_RATIO * used:
        raise DataFormatError(
            f"npz: {path}: y_train has label {top} ({top + 1} classes), but only {used} distinct labels in "
            f"{len(y_train)} images: labels must be class indices 0..K-1; renumber them (numpy.unique(y, "
            f"return_inverse=True)), {NAMES_FIX}"
        )


class NpzDataModule(RSDataModule):
    """Arrays ``x_train y_train x_test y_test`` (+ optional ``class_names``) from an .npz file.

    Images are uint8, (N, H, W) for gray or (N, H, W, C); they stay uint8 in memory and become float32
    [0,1] (/255) one item at a time. ``num_classes`` = max training label + 1 (test labels above it, or
    training labels that leave most classes unused, are refused: :func:`_check_label_range`), or
    ``len(class_names)`` when names are given.

    Args:
        path: the .npz file (read with ``allow_pickle=False``).
        mean: per-channel normalization mean for the model, or None (identity).
        std: per-channel normalization std, or None (identity).
        augment: train with RandomCrop((H, W), padding=4) + horizontal flip (Cohen's CIFAR-10 recipe).
        class_names: label names; overrides the file's ``class_names``.
        **kwargs: ``batch_size``, ``num_workers``, ``val_batch_size`` (see ``RSDataModule``).
    """

    name = "npz"
    eight_bit = True  # uint8 arrays only (others are refused on load), served as they are

    def __init__(
        self,
        path: str,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        augment: bool = False,
        class_names: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (mean is None) != (std is None):
            given, other = ("data.mean", "data.std") if std is None else ("data.std", "data.mean")
            raise ConfigError(other, None, f"given together with {given}", "Give both or neither")
        self.path = str(path)
        self._mean_arg, self._std_arg = mean, std
        self.augment = bool(augment)
        self._names_arg = [str(c) for c in class_names] if class_names is not None else None
        self.sha256 = ""

    def _read(self) -> dict[str, np.ndarray]:
        path = Path(self.path)
        if not path.is_file():
            raise DatasetNotFoundError(
                f"npz: file {path.resolve()} not found. Set data.path=/path/to/file.npz holding uint8 arrays "
                f"{', '.join(KEYS)}."
            )
        self.sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        try:
            archive = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:  # not a zip / .npy, or a pickle
            raise DataFormatError(
                f"npz: {path} is not a numpy .npz archive ({_first_line(err)}); {SAVE_HINT}"
            ) from err
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise DataFormatError(f"npz: {path} holds a single array, not an .npz archive; {SAVE_HINT}")
        with archive as f:
            missing = [k for k in KEYS if k not in f.files]
            if missing:
                raise DataFormatError(
                    f"npz: {path} lacks array(s) {', '.join(missing)} "
                    f"(it has {', '.join(f.files) or 'none'}); {SAVE_HINT}"
                )
            arrays = {}
            for key in (*KEYS, "class_names"):
                if key not in f.files:
                    continue
                try:
                    arrays[key] = f[key]
                except (OSError, ValueError, EOFError) as err:  # object arrays, truncated members
                    raise DataFormatError(
                        f"npz: array {key} in {path} is unreadable ({_first_line(err)}); save it as a plain "
                        "numeric (or, for class_names, string) array"
                    ) from err
        return arrays

    def _check(self, arrays: dict[str, np.ndarray]) -> None:
        for split in ("train", "test"):
            x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
            problem = _image_problem(f"x_{split}", x) or _label_problem(f"y_{split}", y)
            if problem is None and len(y) != len(x):
                problem = (
                    f"y_{split} has {len(y)} labels but x_{split} has {len(x)} images: one label per image"
                )
            if problem is None and len(x) == 0:
                problem = f"x_{split} holds no images: save at least one image in each split"
            if problem:
                raise DataFormatError(f"npz: {self.path}: {problem}")
        if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
            raise DataFormatError(
                f"npz: {self.path}: x_train images have shape {arrays['x_train'].shape[1:]} but x_test "
                f"images {arrays['x_test'].shape[1:]}: save both splits at one image size"
            )
        names = arrays.get("class_names")
        if names is not None and names.ndim != 1:
            raise DataFormatError(
                f"npz: {self.path}: class_names must be a 1-D array of names, got shape {names.shape}"
            )

    def _load(self) -> dict[str, Dataset]:
        arrays = self._read()
        self._check(arrays)
        x_train, x_test = to_nchw(arrays["x_train"]), to_nchw(arrays["x_test"])
        c, h, w = x_train.shape[1:]
        self.input_shape = (int(c), int(h), int(w))
        self.mean, self.std = _floats(self._mean_arg, "mean", c), _floats(self._std_arg, "std", c)
        y_train, y_test = arrays["y_train"].astype(np.int64), arrays["y_test"].astype(np.int64)
        num_labels = int(max(y_train.max(initial=0), y_test.max(initial=0))) + 1
        names, source = self._names_arg, "data.class_names"
        if names is None and "class_names" in arrays:
            names, source = [str(n) for n in arrays["class_names"]], f"the class_names array of {self.path}"
        if names is None:
            _check_label_range(self.path, y_train, y_test)
        elif len(names) < num_labels:
            split = "y_train" if y_train.max(initial=0) >= len(names) else "y_test"
            raise DataFormatError(
                f"npz: {self.path}: {split} has labels up to {num_labels - 1}, but {source} names only "
                f"{len(names)} classes (labels must be < {len(names)}): give one name per class or fix the "
                "labels"
            )
        self.class_names = names if names is not None else [str(i) for i in range(num_labels)]
        self.num_classes = len(self.class_names)
        transform = crop_flip(h, w) if self.augment else None
        return {
            "train": ArrayDataset(x_train, y_train, transform=transform),
            "test": ArrayDataset(x_test, y_test),
        }

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": self.path, "sha256": self.sha256, "augment": self.augment}
