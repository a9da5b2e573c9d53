"""Attacks on smoothed classifiers used by the training methods (pure torch, no Lightning)."""

from .common import (
    frozen_eval,
    loss_precision,
    noise_copies,
    normalize_l2,
    per_sample_norm,
    project_l2,
    smoothed_nll,
    smoothed_softmax,
)
from .noise_space import kl_noise_pgd, noise_pgd, restandardize, sphere_noise_pgd
from .smoothadv import smoothadv_ddn, smoothadv_pgd, smoothadv_pgd_nograd
from .smoothmix import smoothmix_pgd

__all__ = [
    "frozen_eval",
    "kl_noise_pgd",
    "loss_precision",
    "noise_copies",
    "noise_pgd",
    "normalize_l2",
    "per_sample_norm",
    "project_l2",
    "restandardize",
    "smoothadv_ddn",
    "smoothadv_pgd",
    "smoothadv_pgd_nograd",
    "smoothed_nll",
    "smoothed_softmax",
    "smoothmix_pgd",
    "sphere_noise_pgd",
]
