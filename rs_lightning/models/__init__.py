"""Architectures (logits from [0,1] inputs) and the normalization layer that precedes them."""

from rs_lightning.models.ars import AdaptiveSmoothing, StaticMask
from rs_lightning.models.cifar_resnet import BasicBlock, CIFARResNet
from rs_lightning.models.constant import ConstantClassifier
from rs_lightning.models.digits import MLP, DigitsCNN
from rs_lightning.models.imagenet import ResNet50
from rs_lightning.models.lenet import LeNet
from rs_lightning.models.normalize import Normalize, build_classifier
from rs_lightning.models.published import load_published
from rs_lightning.models.unet import MaskUNet

__all__ = [
    "MLP",
    "AdaptiveSmoothing",
    "BasicBlock",
    "CIFARResNet",
    "ConstantClassifier",
    "DigitsCNN",
    "LeNet",
    "MaskUNet",
    "Normalize",
    "ResNet50",
    "StaticMask",
    "build_classifier",
    "load_published",
]
