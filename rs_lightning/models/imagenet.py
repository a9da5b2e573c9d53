"""ImageNet ResNet-50: torchvision ``resnet50(weights=None)`` as in Cohen et al. (methods-core.md §0)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn
from torchvision.models import resnet50 as _tv_resnet50

from rs_lightning.models._shape import chw


def resnet50(*, input_shape: Sequence[int], num_classes: int) -> nn.Module:
    """Randomly initialized torchvision ResNet-50 (never loads pretrained weights).

    Args:
        input_shape: (C, H, W); a stem for C != 3 channels replaces ``conv1``.
        num_classes: number of logits.
    """
    c, _, _ = chw(input_shape)
    net = _tv_resnet50(weights=None, num_classes=int(num_classes))
    if c != 3:
        net.conv1 = nn.Conv2d(c, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
    return net
