"""The mask network of Adaptive Randomized Smoothing (Lyu et al., NeurIPS 2024;
ubc-systopia/adaptive-randomized-smoothing ``src/models/unet.py``).

A compact UNet with three down and three up levels of widths c, 2c, 4c, 8c: conv blocks of two 3×3
convolutions (reflect padding, no bias), each followed by BatchNorm, Dropout2d(0.3) and LeakyReLU; stride-2
3×3 convolutions down; nearest ×2, a 1×1 convolution halving the channels and concatenation with the skip
up; a 1×1 head to one channel and a sigmoid. Its input is the raw noisy first query m₁ (no normalization
layer), so H and W must be divisible by 8. In eval mode (certification) dropout is off and BatchNorm uses
its running statistics, so the mask is a deterministic function of m₁.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rs_lightning.validation import ConfigError

from ._shape import chw


def _conv_block(c_in: int, c_out: int, dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for c in (c_in, c_out):
        layers += [
            nn.Conv2d(c, c_out, 3, padding=1, padding_mode="reflect", bias=False),
            nn.BatchNorm2d(c_out),
            nn.Dropout2d(dropout),
            nn.LeakyReLU(),
        ]
    return nn.Sequential(*layers)


def _down(c: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c, c, 3, stride=2, padding=1, padding_mode="reflect", bias=False),
        nn.BatchNorm2d(c),
        nn.LeakyReLU(),
    )


class _Up(nn.Module):
    def __init__(self, c_in: int, dropout: float) -> None:
        super().__init__()
        self.reduce = nn.Sequential(
            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c_in, c_in // 2, 1)
        )
        self.block = _conv_block(c_in, c_in // 2, dropout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.block(torch.cat([self.reduce(x), skip], dim=1))


class MaskUNet(nn.Module):
    """``w = MaskUNet(m1)``: a one-channel mask in (0, 1) of shape ``(B, 1, H, W)``.

    Args:
        input_shape: (C, H, W) of the canvas; H and W divisible by 8.
        width: base width c (reference: CIFAR 32, CelebA 64, ImageNet 16).
        dropout: Dropout2d probability in the conv blocks (reference 0.3).
    """

    def __init__(self, *, input_shape: Sequence[int], width: int = 32, dropout: float = 0.3) -> None:
        super().__init__()
        c, h, w = chw(input_shape)
        if h % 8 or w % 8 or min(h, w) < 16:
            near = " x ".join(str(max(16, -8 * (-v // 8))) for v in (h, w))  # rounded up: objects still fit
            raise ConfigError(
                "input_shape",
                [c, h, w],
                "H and W multiples of 8 and >= 16 for the ARS mask UNet (3 stride-2 levels, reflect padding)",
                f"use a canvas of at least {near} pixels (e.g. data=cluttered_mnist data.canvas=...)",
            )
        if isinstance(width, bool) or int(width) != width or width < 1:
            raise ConfigError("method.mask_width", width, "an integer >= 1")
        k = int(width)
        self.inc = _conv_block(c, k, dropout)
        self.downs = nn.ModuleList(
            nn.Sequential(_down(k * 2**i), _conv_block(k * 2**i, k * 2 ** (i + 1), dropout)) for i in range(3)
        )
        self.ups = nn.ModuleList(_Up(k * 2 ** (3 - i), dropout) for i in range(3))
        self.head = nn.Conv2d(k, 1, 1)

    def forward(self, m1: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(m1)]
        for down in self.downs:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return torch.sigmoid(self.head(x))
