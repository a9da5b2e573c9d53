"""Gaussian data augmentation (Cohen, Rosenfeld & Kolter, ICML 2019, §4 / locuslab/smoothing train.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rs_lightning.smoothing.certificate import NOISES

from .base import SmoothingMethod


class GaussianAugmentation(SmoothingMethod):
    """min_theta E_(x,y) E_delta CE(f(x + delta), y): one fresh delta ~ N(0, sigma^2 I) per image per step.

    Loss per step: L = (1/B) sum_i CE(f(x_i + delta_i), y_i) (locuslab/smoothing train.py). The loss does not
    assume the Gaussian: ``noise=laplace|uniform`` trains with that noise at standard deviation sigma (the
    augmentation Yang et al., ICML 2020, use for every noise).
    """

    noises = NOISES

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        logits, _ = self.noisy_logits(x, 1)
        return F.cross_entropy(logits[0], y)
