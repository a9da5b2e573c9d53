"""CIFAR-10: train RandomCrop(32, padding=4) + horizontal flip; test ToTensor only.

As in locuslab/smoothing ``code/datasets.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.utils.data import Dataset
from torchvision import datasets

from rs_lightning.data.arrays import ArrayDataset, crop_flip, to_nchw
from rs_lightning.data.base import DatasetNotFoundError, RSDataModule

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


class CIFAR10DataModule(RSDataModule):
    """torchvision CIFAR-10 under ``root`` (``root/cifar-10-batches-py``); mean/std of Cohen et al.

    Args:
        root: torchvision dataset root (relative to the working directory).
        download: download in ``prepare_data()`` (needs internet).
        **kwargs: ``batch_size``, ``num_workers``, ``val_batch_size`` (see ``RSDataModule``).
    """

    name = "cifar10"
    eight_bit = True  # uint8 images; crop-with-padding and flips (training only) keep the grid

    def __init__(self, root: str = "data", download: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = str(root)
        self.download = bool(download)
        self.num_classes = 10
        self.class_names = list(CIFAR10_CLASSES)
        self.input_shape = (3, 32, 32)
        self.mean, self.std = CIFAR10_MEAN, CIFAR10_STD

    def prepare_data(self) -> None:
        if self.download:
            for train in (True, False):
                datasets.CIFAR10(self.root, train=train, download=True)

    def _load(self) -> dict[str, Dataset]:
        try:
            sets = {
                s: datasets.CIFAR10(self.root, train=s == "train", download=False) for s in ("train", "test")
            }
        except RuntimeError as err:  # torchvision: "Dataset not found or corrupted ..."
            folder = (Path(self.root) / datasets.CIFAR10.base_folder).resolve()
            raise DatasetNotFoundError(
                f"cifar10: no (intact) data in {folder}. Set data.download=true (needs internet) or "
                "data.root=/dir/containing/cifar-10-batches-py."
            ) from err
        self.class_names = list(sets["train"].classes)
        return {
            "train": ArrayDataset(
                to_nchw(sets["train"].data), sets["train"].targets, transform=crop_flip(32, 32)
            ),
            "test": ArrayDataset(to_nchw(sets["test"].data), sets["test"].targets),
        }

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "root": self.root}
