"""ImageNet ResNet-50: torchvision's ``resnet50(weights=None)`` as in Cohen et al. (code/architectures.py)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn
from torchvision.models.resnet import Bottleneck, ResNet

from rs_lightning.models._shape import chw


class ResNet50(ResNet):
    """Randomly initialized torchvision ResNet-50 (``ResNet(Bottleneck, [3, 4, 6, 3])``, exactly what
    ``torchvision.models.resnet50(weights=None)`` builds, so its state dict keys are torchvision's); never
    loads pretrained weights.

    Args:
        input_shape: (C, H, W); a stem for C != 3 channels replaces ``conv1``.
        num_classes: number of logits.
    """

    def __init__(self, *, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__(Bottleneck, [3, 4, 6, 3], num_classes=int(num_classes))
        c, _, _ = chw(input_shape)
        if c != 3:
            self.conv1 = nn.Conv2d(c, 64, kernel_size=7, stride=2, padding=3, bias=False)
            nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
