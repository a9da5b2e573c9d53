"""The architectures a checkpoint may name (:class:`~rs_lightning.registry.Registry`): this project's, the
by-name builders of timm and torchvision, and the classes installed packages register under the entry-point
group :data:`MODEL_ENTRY_POINTS`. train.py refuses any other, since certify.py could not rebuild it."""

from __future__ import annotations

from torch import nn

from rs_lightning.registry import Registry

from .byname import TimmModel, TorchvisionModel
from .cifar_resnet import CIFARResNet
from .constant import ConstantClassifier
from .denoisers import DenoiserUNet, DnCNN
from .diffusion import DiffusionDenoiser
from .digits import MLP, DigitsCNN
from .imagenet import ResNet50
from .lenet import LeNet

MODEL_ENTRY_POINTS = "rs_lightning.models"
"""The entry-point group through which a user's package registers its architectures."""

MODELS = Registry(
    "model",
    nn.Module,
    [LeNet, DigitsCNN, MLP, CIFARResNet, ResNet50, ConstantClassifier, TimmModel, TorchvisionModel],
    aliases={"rs_lightning.models.imagenet.resnet50": ResNet50},  # the name before ResNet50 was a class
    entry_points=MODEL_ENTRY_POINTS,
)

DENOISER_ENTRY_POINTS = "rs_lightning.denoisers"
"""The entry-point group through which a user's package registers its denoisers."""

DENOISERS = Registry(
    "denoiser", nn.Module, [DnCNN, DenoiserUNet, DiffusionDenoiser], entry_points=DENOISER_ENTRY_POINTS
)
"""The denoisers a checkpoint of denoised smoothing may name (built with ``input_shape=(C, H, W)``)."""
