"""CIFAR ResNet (He, Zhang, Ren & Sun, CVPR 2016, §4.2) as in locuslab/smoothing code/archs/cifar_resnet.py.

Stem conv3x3(C->16)+BN+ReLU; three stages of n = (depth - 2) / 6 BasicBlocks with 16/32/64 channels,
stride 2 at the start of stages 2 and 3; 1x1 conv + BN shortcut when the shape changes; global average
pool (= AvgPool(8) on 32x32); FC(64->classes). Init: conv weights ~ N(0, sqrt(2 / (k*k*out))), BN (1, 0).
Submodule names match Cohen's, so his ``1.``-prefixed state dicts load into ``net``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor, nn

from rs_lightning.models._shape import chw


def _conv3x3(inplanes: int, planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with BN; identity or 1x1-conv+BN shortcut; ReLU after the sum."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: Tensor) -> Tensor:
        residual = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + residual)


class CIFARResNet(nn.Module):
    """CIFAR ResNet of depth 6n+2 (20: ~0.27M params, 110: ~1.7M).

    Args:
        input_shape: (C, H, W) of the [0,1] input (3x32x32 for CIFAR-10).
        num_classes: number of logits.
        depth: 6n + 2 (e.g. 20, 32, 44, 56, 110).
    """

    def __init__(self, *, input_shape: Sequence[int], num_classes: int, depth: int = 110) -> None:
        super().__init__()
        c, _, _ = chw(input_shape)
        depth = int(depth)
        if depth < 8 or (depth - 2) % 6 != 0:
            raise ValueError(
                f"CIFARResNet depth must be 6n+2 with n >= 1 (20, 56, 110, ...), got depth={depth}"
            )
        n = (depth - 2) // 6
        self.inplanes = 16
        self.conv1 = nn.Conv2d(c, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(16, n, stride=1)
        self.layer2 = self._make_layer(32, n, stride=2)
        self.layer3 = self._make_layer(64, n, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, int(num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / fan_out))
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [BasicBlock(self.inplanes, planes, stride)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(blocks - 1)]
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.avgpool(x).flatten(1))
