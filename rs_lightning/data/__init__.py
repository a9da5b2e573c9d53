"""LightningDataModules yielding (x in [0,1] float32 CHW, int label); normalization lives in the model."""

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
