"""Attacks on smoothed classifiers used by the training methods (pure torch)."""

from .common import (
    frozen_eval,
    noise_copies,
    normalize_l2,
    per_sample_norm,
    project_l2,
    smoothed_nll,
    smoothed_softmax,
)

__all__ = [
    "frozen_eval",
    "noise_copies",
    "normalize_l2",
    "per_sample_norm",
    "project_l2",
    "smoothed_nll",
    "smoothed_softmax",
]
