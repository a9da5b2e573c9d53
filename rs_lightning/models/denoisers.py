"""Denoisers for denoised smoothing (Salman et al., NeurIPS 2020, "Denoised Smoothing: A Provable Defense
for Pretrained Classifiers"; microsoft/denoised-smoothing ``code/archs/dncnn.py``): D maps a noisy image
x + δ in [0, 1] space to an estimate of x, and the smoothed classifier is built from f∘D.

DnCNN (Zhang et al., IEEE TIP 2017, "Beyond a Gaussian Denoiser"): a 3×3 convolution with bias and ReLU,
``depth - 2`` blocks of a 3×3 convolution without bias, BatchNorm and ReLU, and a last 3×3 convolution
without bias that predicts the noise; the output is the input minus that prediction (residual learning).
As in Salman et al.'s code: BatchNorm with eps 1e-4 and momentum 0.95, orthogonal initialization of the
convolutions, zero biases and a zero last layer, so that D starts as the identity; the stack is the attribute
``dncnn``, so the state-dict keys are those of their released denoisers. At depth 17 and 64 channels on
3-channel images it has 558,400 parameters, the ≈ 558k Salman et al. use.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ._shape import chw


class DnCNN(nn.Module):
    """DnCNN denoiser: ``D(x) = x - R(x)`` with R the convolution stack above (the identity at
    initialization).

    Args:
        input_shape: (C, H, W) of the images it denoises (any H, W: every layer keeps the size).
        depth: convolution layers in all (17 in Salman et al.).
        channels: feature channels of the inner layers (64).
    """

    def __init__(self, *, input_shape: Sequence[int], depth: int = 17, channels: int = 64) -> None:
        super().__init__()
        c, _, _ = chw(input_shape)
        depth, channels = int(depth), int(channels)
        if depth < 2 or channels < 1:
            raise ValueError(
                f"DnCNN needs depth >= 2 and channels >= 1, got depth={depth}, channels={channels}"
            )
        layers: list[nn.Module] = [nn.Conv2d(c, channels, 3, padding=1, bias=True), nn.ReLU(inplace=True)]
        for _ in range(depth - 2):
            layers += [
                nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                nn.BatchNorm2d(channels, eps=1e-4, momentum=0.95),
                nn.ReLU(inplace=True),
            ]
        layers.append(nn.Conv2d(channels, c, 3, padding=1, bias=False))
        self.dncnn = nn.Sequential(*layers)
        convolutions = [m for m in self.dncnn if isinstance(m, nn.Conv2d)]
        for conv in convolutions:
            nn.init.orthogonal_(conv.weight)
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
        nn.init.zeros_(convolutions[-1].weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.dncnn(x)
