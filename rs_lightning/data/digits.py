"""The embedded default dataset: scikit-learn's 8x8 handwritten digits (1,797 images, offline)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset

from rs_lightning.data.arrays import ArrayDataset
from rs_lightning.data.base import RSDataModule


class DigitsDataModule(RSDataModule):
    """sklearn ``load_digits``: values 0..16 scaled to [0,1] by /16, shape (1, 8, 8), 10 classes.

    A fixed stratified split (``train_test_split(stratify=y, random_state=split_seed)``; indices kept in
    the original order); no augmentation; identity normalization.

    Args:
        test_size: number of test images.
        split_seed: seed of the split.
        **kwargs: ``batch_size``, ``num_workers``, ``val_batch_size`` (see ``RSDataModule``).
    """

    name = "digits"

    def __init__(self, test_size: int = 360, split_seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.test_size = int(test_size)
        self.split_seed = int(split_seed)
        self.num_classes = 10
        self.class_names = [str(i) for i in range(10)]
        self.input_shape = (1, 8, 8)

    def _load(self) -> dict[str, Dataset]:
        bunch = load_digits()
        images = bunch.images.astype(np.uint8)[:, None]  # integer values 0..16
        labels = bunch.target.astype(np.int64)
        train_idx, test_idx = train_test_split(
            np.arange(len(labels)), test_size=self.test_size, stratify=labels, random_state=self.split_seed
        )
        train_idx, test_idx = np.sort(train_idx), np.sort(test_idx)
        return {
            "train": ArrayDataset(images[train_idx], labels[train_idx], scale=16.0),
            "test": ArrayDataset(images[test_idx], labels[test_idx], scale=16.0),
        }

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "source": "sklearn.datasets.load_digits",
            "test_size": self.test_size,
            "split_seed": self.split_seed,
        }
