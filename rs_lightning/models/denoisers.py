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


def _block(c_in: int, c_out: int) -> nn.Sequential:
    """Two 3×3 convolutions, each with BatchNorm and ReLU."""
    layers: list[nn.Module] = []
    for c in (c_in, c_out):
        layers += [nn.Conv2d(c, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(True)]
    return nn.Sequential(*layers)


class DenoiserUNet(nn.Module):
    """A small UNet denoiser (Ronneberger et al., MICCAI 2015, "U-Net"), the second architecture for
    denoised smoothing: two 2×2 max-pool levels of widths w, 2w and a 4w bottleneck, each a block of two
    3×3 convolutions with BatchNorm and ReLU; nearest ×2 upsampling, concatenation with the skip and a block
    up; a 3×3 head that predicts the noise, so ``D(x) = x - R(x)`` as in DnCNN, with the head zeroed so that
    D starts as the identity. H and W must be multiples of 4.

    Args:
        input_shape: (C, H, W) of the images it denoises.
        width: w, the channels of the first level.
    """

    def __init__(self, *, input_shape: Sequence[int], width: int = 32) -> None:
        super().__init__()
        c, h, w = chw(input_shape)
        width = int(width)
        if width < 1:
            raise ValueError(f"DenoiserUNet needs width >= 1, got {width}")
        if h % 4 or w % 4:
            raise ValueError(f"DenoiserUNet needs H and W divisible by 4 (two poolings), got {h}x{w}")
        self.down1, self.down2 = _block(c, width), _block(width, 2 * width)
        self.bottom = _block(2 * width, 4 * width)
        self.up2, self.up1 = _block(6 * width, 2 * width), _block(3 * width, width)
        self.head = nn.Conv2d(width, c, 3, padding=1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool, up = nn.functional.max_pool2d, nn.functional.interpolate
        a = self.down1(x)
        b = self.down2(pool(a, 2))
        m = self.bottom(pool(b, 2))
        b = self.up2(torch.cat([up(m, scale_factor=2.0, mode="nearest"), b], dim=1))
        a = self.up1(torch.cat([up(b, scale_factor=2.0, mode="nearest"), a], dim=1))
        return x - self.head(a)


class DenoisedClassifier(nn.Module):
    """The base classifier of denoised smoothing, ``f(D(x))`` (Salman et al. 2020, Eq. 4): a deterministic
    function of the noisy input like any base classifier, so every sampler, noise and certificate applies to
    it unchanged; the radius is σ's, the σ the noisy inputs carry.

    Args:
        denoiser: D, [0,1]-space images to [0,1]-space images of the same shape.
        classifier: f, with its normalization layer (:func:`~rs_lightning.models.normalize.build_classifier`).
    """

    def __init__(self, denoiser: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.denoiser, self.classifier = denoiser, classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.denoiser(x))


def check_denoiser_output(denoiser: nn.Module, input_shape: Sequence[int], key: str) -> None:
    """Refuse (ConfigError naming ``key``) a denoiser whose output is not an image of ``input_shape``: f
    reads D's output as its input. One zero image goes through D in eval mode; its mode is kept."""
    from rs_lightning.validation import ConfigError

    shape = chw(input_shape)
    training = denoiser.training
    try:
        with torch.no_grad():
            device = next((p.device for p in denoiser.parameters()), torch.device("cpu"))
            out = denoiser.eval()(torch.zeros(1, *shape, device=device))
    finally:
        denoiser.train(training)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, *shape):
        got = tuple(out.shape[1:]) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(
            key,
            type(denoiser).__name__,
            f"a denoiser whose output has the input's shape {shape}",
            f"it gives {got}, which the classifier cannot read",
        )
