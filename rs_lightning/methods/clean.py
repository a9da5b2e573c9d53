"""Training without noise: cross-entropy on the clean inputs, the "off-the-shelf" classifier that denoised
smoothing starts from (Salman et al., NeurIPS 2020, §4: their CIFAR-10 ResNet-110 trained at noise 0.00)
and the noise-free baseline of its table. The checkpoint records no training sigma, so certify.py needs
``sigma=``; ``sigma`` here only sets the noise of the validation accuracy (``val/acc_noisy``) and of the
certification callback, which show how such a classifier fares under noise.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from rs_lightning.models.checkpoint import CheckpointMeta
from rs_lightning.smoothing.certificate import NOISES

from .base import SmoothingMethod


class CleanTraining(SmoothingMethod):
    """min_θ E_(x,y) CE(f(x), y): no noise in training."""

    noises = NOISES  # the validation noise only

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        return F.cross_entropy(self.model(x), y)

    def checkpoint_meta(self) -> CheckpointMeta:
        return dataclasses.replace(super().checkpoint_meta(), sigma=None)
