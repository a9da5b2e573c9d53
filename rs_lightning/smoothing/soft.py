"""The soft smoothed classifier of training and attacks: G(x) = E_δ softmax(f(x + δ)), δ ~ N(0, σ²I),
estimated with m draws per input (Salman et al., NeurIPS 2019, §3; Zhai et al., ICLR 2020, §4). Pure torch,
no Lightning: the training methods and the attacks both import it.

**Copy layout** (one for the whole package): m draws for a batch of B inputs are a tensor ``noise`` of shape
``(m, B, *x.shape[1:])`` — ``noise[j, b]`` is draw j of input b — and their logits are ``(m, B, K)``,
``logits[j, b] = f(x[b] + noise[j, b])``, from one forward pass over the copy-major batch (row j·B + b).
Train-mode BatchNorm statistics do not depend on the order of a batch, so the layout changes no statistic.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn


@contextmanager
def frozen_eval(model: nn.Module) -> Iterator[nn.Module]:
    """f as a fixed function: eval mode (BN uses running stats) with parameter gradients off, as every
    reference attack and p̂ estimate runs it; restores the previous mode and ``requires_grad`` flags."""
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


def noisy_logits(model: nn.Module, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Logits ``(m, B, K)`` of ``f(x[b] + noise[j, b])`` for ``x`` ``(B, ...)`` and ``noise`` ``(m, B, ...)``:
    all m·B copies in one forward pass (copy-major batch), in float32 under autocast (:func:`loss_precision`).
    Gradients reach ``x``, ``noise`` and the parameters as the caller's autograd mode allows."""
    m, b = noise.shape[:2]
    logits = model((x.unsqueeze(0) + noise).reshape(m * b, *x.shape[1:]))
    return loss_precision(logits).view(m, b, -1)


def copy_rows(t: torch.Tensor, m: int) -> torch.Tensor:
    """A per-input tensor ``(B, ...)`` repeated for each of m copies, ``(m·B, ...)``, aligned with
    ``noise.flatten(0, 1)``: row j·B + b is ``t[b]``. For attacks that work on one row per copy."""
    return t.unsqueeze(0).expand(m, *t.shape).reshape(m * len(t), *t.shape[1:])


def smoothed_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Soft smoothed prediction (1/m) sum_j softmax(z_j): ``logits`` is ``(m, B, K)`` -> ``(B, K)``."""
    return F.softmax(loss_precision(logits), dim=-1).mean(dim=0)


def smoothed_nll(
    logits: torch.Tensor, y: torch.Tensor, floor: float = 1e-20, reduction: str = "mean", offset: float = 0.0
):
    """-log(max((1/m) sum_j softmax(z_j)_y, floor) + offset): CE of the Monte-Carlo soft smoothed classifier.

    Salman et al. 2019 Eq. (S) / SmoothAdv-PGD objective: softmax first, average over the m draws, clamp at
    ``floor``, then log; MACER's classification term (Zhai et al. 2020 Eq. 7, macer.py) adds ``offset=1e-10``
    with ``floor=0`` instead. ``logits``: ``(m, B, K)``.
    """
    p_y = smoothed_softmax(logits).gather(1, y[:, None]).squeeze(1)
    loss = -torch.log(p_y.clamp_min(floor) + offset) if offset else -torch.log(p_y.clamp_min(floor))
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def copies_ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of every copy against its input's label: ``logits`` ``(m, B, K)``, ``y`` ``(B,)``
    (Gaussian augmentation with m draws per image, the CE terms of Consistency, SmoothMix and ACR-gaming)."""
    m = logits.shape[0]
    return F.cross_entropy(logits.flatten(0, 1), y.repeat(m))


def soft_kl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``KL(target ‖ softmax(logits))`` over the last dimension (``0·log 0 = 0``), one value per row; in
    float32 when the logits come from bf16/fp16 autocast (:func:`loss_precision`). ``target`` broadcasts
    against ``logits`` (e.g. p̄ ``(B, K)`` against copies ``(m, B, K)``)."""
    log_p = F.log_softmax(loss_precision(logits), dim=-1)
    return F.kl_div(log_p, target.expand_as(log_p), reduction="none").sum(dim=-1)
