"""The data modules a checkpoint may name (:class:`~rs_lightning.registry.Registry`; a new data module is
added here, or train.py refuses it, since certify.py could not rebuild it)."""

from __future__ import annotations

from rs_lightning.registry import Registry

from .base import RSDataModule
from .cifar10 import CIFAR10DataModule
from .composite import CompositeDataModule
from .digits import DigitsDataModule
from .imagenet import ImageNetDataModule
from .mnist import FashionMNISTDataModule, MNISTDataModule
from .npz import NpzDataModule

DATA_MODULES = Registry(
    "data module",
    RSDataModule,
    [
        DigitsDataModule, MNISTDataModule, FashionMNISTDataModule, CIFAR10DataModule, ImageNetDataModule,
        NpzDataModule, CompositeDataModule,
    ],
)  # fmt: skip
