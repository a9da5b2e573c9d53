"""Any image-classification set stored as uint8 arrays in an .npz (e.g. shared/data/mnist.npz)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from rs_lightning.data.arrays import ArrayDataset, crop_flip, to_nchw
from rs_lightning.data.base import DatasetNotFoundError, RSDataModule

KEYS = ("x_train", "y_train", "x_test", "y_test")


def _floats(values: Sequence[float] | None, key: str, channels: int) -> tuple[float, ...] | None:
    if values is None:
        return None
    out = tuple(float(v) for v in values)
    if len(out) != channels:
        raise ValueError(f"data.{key} needs {channels} values (one per channel), got {list(out)}")
    return out


class NpzDataModule(RSDataModule):
    """Arrays ``x_train y_train x_test y_test`` (+ optional ``class_names``) from an .npz file.

    Images are uint8, (N, H, W) for gray or (N, H, W, C); they stay uint8 in memory and become float32
    [0,1] (/255) one item at a time. ``num_classes`` = max label + 1 over both splits, or
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
            raise ValueError(f"data.mean and data.std: give both or neither, got mean={mean}, std={std}")
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
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in KEYS if k not in f.files]
            if missing:
                raise ValueError(f"npz: {path} lacks key(s) {missing}; it has {f.files}, needs {list(KEYS)}")
            arrays = {k: f[k] for k in KEYS}
            if "class_names" in f.files:
                arrays["class_names"] = f["class_names"]
        return arrays

    @staticmethod
    def _check(arrays: dict[str, np.ndarray]) -> None:
        for split in ("train", "test"):
            x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
            if x.dtype != np.uint8:
                raise ValueError(f"npz: x_{split} must be uint8 (0..255), got {x.dtype}")
            if x.ndim not in (3, 4):
                raise ValueError(f"npz: x_{split} must be (N, H, W) or (N, H, W, C), got shape {x.shape}")
            if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
                raise ValueError(f"npz: y_{split} must be a 1-D integer array, got {y.dtype} {y.shape}")
            if len(y) != len(x):
                raise ValueError(f"npz: y_{split} has {len(y)} labels but x_{split} has {len(x)} images")
            if y.size and y.min() < 0:
                raise ValueError(f"npz: y_{split} has negative labels")
        if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
            raise ValueError(
                f"npz: x_train images have shape {arrays['x_train'].shape[1:]}, "
                f"x_test images {arrays['x_test'].shape[1:]}"
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
        names = self._names_arg
        if names is None and "class_names" in arrays:
            names = [str(n) for n in arrays["class_names"]]
        if names is not None and len(names) < num_labels:
            raise ValueError(f"npz: {len(names)} class_names but labels go up to {num_labels - 1}")
        self.class_names = names if names is not None else [str(i) for i in range(num_labels)]
        self.num_classes = len(self.class_names)
        transform = crop_flip(h, w) if self.augment else None
        return {
            "train": ArrayDataset(x_train, y_train, transform=transform),
            "test": ArrayDataset(x_test, y_test),
        }

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": self.path, "sha256": self.sha256, "augment": self.augment}
