"""Pieces every attack on a (smoothed) classifier shares. Pure torch: no Lightning."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn


@contextmanager
def frozen_eval(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode with parameter gradients off, as every reference attack runs (BN uses running stats);
    restores the previous mode and ``requires_grad`` flags afterwards."""
    was_training = model.training
    flags = [p.requires_grad for p in model.parameters()]
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p, flag in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(flag)
        model.train(was_training)


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


def loss_precision(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` in float32 if autocast made them bfloat16/float16, else unchanged (fp32 and fp64 pass
    through untouched, so full-precision runs are bit-identical).

    Under ``trainer.precision=bf16-mixed`` the network's logits come out in bf16 (8-bit mantissa); softmax,
    log, entropy and Phi^-1 on them would then run in bf16 too (CPU autocast upcasts only cross-entropy and
    KL, CUDA autocast a few more ops), rounding probabilities near 1 to 1, and gradients from several loss
    terms would add up in bf16. Every loss or attack objective that does its own arithmetic on logits calls
    this first; the forward passes themselves stay in bf16.
    """
    return logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits


def noise_copies(noise: torch.Tensor, m: int) -> torch.Tensor:
    """Split noise drawn for an image-major batch ``(B*m, ...)`` into ``(m, B, ...)`` (copy j of image b)."""
    return noise.view(-1, m, *noise.shape[1:]).transpose(0, 1)


def smoothed_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Soft smoothed prediction (1/m) sum_j softmax(z_j): ``logits`` is ``(m, B, K)`` -> ``(B, K)``."""
    return F.softmax(loss_precision(logits), dim=-1).mean(dim=0)


def smoothed_nll(logits: torch.Tensor, y: torch.Tensor, floor: float = 1e-20, reduction: str = "mean"):
    """-log((1/m) sum_j softmax(z_j)_y), the CE of the Monte-Carlo soft smoothed classifier.

    Salman et al. 2019 Eq. (S) / SmoothAdv-PGD objective: softmax first, average over the m draws, clamp at
    ``floor``, then log. ``logits``: ``(m, B, K)``.
    """
    p_y = smoothed_softmax(logits).gather(1, y[:, None]).squeeze(1)
    loss = -torch.log(p_y.clamp_min(floor))
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss
