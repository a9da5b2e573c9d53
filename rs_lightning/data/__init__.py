"""LightningDataModules yielding (x in [0,1] float32 CHW, int label); normalization lives in the model.

Importing the package imports each of its modules, so that every data module defined in one is registered
(:data:`~rs_lightning.data.base.PROJECT_DATA_MODULES`): a new dataset is one file here and one conf/data
config.
"""

import importlib
import pkgutil

from rs_lightning.data.arrays import ArrayDataset, read_idx
from rs_lightning.data.base import SPLITS, DataFormatError, DatasetNotFoundError, RSDataModule
from rs_lightning.data.cifar10 import CIFAR10DataModule
from rs_lightning.data.composite import CompositeDataModule
from rs_lightning.data.digits import DigitsDataModule
from rs_lightning.data.imagenet import ImageNetDataModule
from rs_lightning.data.mnist import FashionMNISTDataModule, MNISTDataModule
from rs_lightning.data.npz import NpzDataModule

__all__ = [
    "SPLITS",
    "ArrayDataset",
    "CIFAR10DataModule",
    "CompositeDataModule",
    "DataFormatError",
    "DatasetNotFoundError",
    "DigitsDataModule",
    "FashionMNISTDataModule",
    "ImageNetDataModule",
    "MNISTDataModule",
    "NpzDataModule",
    "RSDataModule",
    "read_idx",
]


def _import_every_module() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "registry":  # built from what the others define (rs_lightning.data.registry)
            importlib.import_module(f"{__name__}.{module.name}")


_import_every_module()
