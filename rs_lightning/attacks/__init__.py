"""Attacks on smoothed classifiers used by the training methods (pure torch, no Lightning).

Noise is in the package's copy layout ``(m, B, ...)`` (:mod:`rs_lightning.smoothing.soft`); the noise-space
attacks work on one row per copy (``copy_rows(x, m)`` with ``noise.flatten(0, 1)``).
"""

from .common import normalize_l2, per_sample_norm, project_l2
from .noise_space import kl_noise_pgd, noise_pgd, restandardize, sphere_noise_pgd
from .smoothadv import smoothadv_ddn, smoothadv_pgd, smoothadv_pgd_nograd
from .smoothmix import smoothmix_pgd

__all__ = [
    "kl_noise_pgd",
    "noise_pgd",
    "normalize_l2",
    "per_sample_norm",
    "project_l2",
    "restandardize",
    "smoothadv_ddn",
    "smoothadv_pgd",
    "smoothadv_pgd_nograd",
    "smoothmix_pgd",
    "sphere_noise_pgd",
]
