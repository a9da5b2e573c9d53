"""L2 geometry every attack on a (smoothed) classifier shares. Pure torch: no Lightning.

The soft smoothed classifier itself (the forward over noisy copies, its softmax and NLL, ``loss_precision``,
``frozen_eval``) lives in :mod:`rs_lightning.smoothing.soft`, shared with the training methods.
"""

from __future__ import annotations

import torch


def per_sample_norm(t: torch.Tensor) -> torch.Tensor:
    """L2 norm of each sample, shaped ``(B, 1, ..., 1)`` for broadcasting."""
    return t.flatten(1).norm(dim=1).view(-1, *([1] * (t.dim() - 1)))


def normalize_l2(g: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``g / (||g||_2 + eps)`` per sample (the normalized-gradient step of all the reference attacks)."""
    return g / (per_sample_norm(g) + eps)


def project_l2(delta: torch.Tensor, radius: float | torch.Tensor) -> torch.Tensor:
    """Rescale each sample of ``delta`` onto the L2 ball of ``radius`` if it lies outside."""
    norm = per_sample_norm(delta)
    return delta * torch.clamp(radius / (norm + 1e-12), max=1.0)
