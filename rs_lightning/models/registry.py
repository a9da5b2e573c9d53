"""The architectures a checkpoint may name (:class:`~rs_lightning.registry.Registry`; a new architecture is
added here, or train.py refuses it, since certify.py could not rebuild it)."""

from __future__ import annotations

from torch import nn

from rs_lightning.registry import Registry

from .cifar_resnet import CIFARResNet
from .constant import ConstantClassifier
from .digits import MLP, DigitsCNN
from .imagenet import ResNet50
from .lenet import LeNet

MODELS = Registry(
    "model",
    nn.Module,
    [LeNet, DigitsCNN, MLP, CIFARResNet, ResNet50, ConstantClassifier],
    aliases={"rs_lightning.models.imagenet.resnet50": ResNet50},  # the name before ResNet50 was a class
)
