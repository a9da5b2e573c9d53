"""SmoothMix's adversarial path on the soft smoothed classifier (Jeong et al., NeurIPS 2021).

The "SmoothMix-PGD" of jh-jeong/smoothmix ``code/train.py`` (``SmoothMix_PGD``): unbounded
normalized-gradient ascent of ``-log F̄_y`` from the clean input, where F̄ is the softmax averaged over the m
fixed noise draws. It returns both ends of the mixup segment: the clean side x_c (the iterate at
``mix_step``, kept within ``clean_radius`` of x) and the final iterate x̂. Pure torch.
"""

from __future__ import annotations

import torch
from torch import nn

from rs_lightning.smoothing.soft import noisy_logits, smoothed_nll

from .common import normalize_l2, project_l2


def _project(x_t: torch.Tensor, x: torch.Tensor, radius: float | None) -> torch.Tensor:
    """Optional L2 renormalisation of ``x_t - x`` to ``radius``, then clamp to [0,1] (the reference order)."""
    if radius is not None:
        x_t = x + project_l2(x_t - x, radius)
    return x_t.clamp(0.0, 1.0).detach()


def smoothmix_pgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    noises: torch.Tensor,
    *,
    alpha: float,
    num_steps: int,
    mix_step: int = 0,
    clean_radius: float = 0.0,
    maxnorm: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """T steps ``x⁽ᵗ⁺¹⁾ = clamp_[0,1](x⁽ᵗ⁾ + α·g/(‖g‖₂+1e-8))``, ``g = ∇ Σ_b −log max(F̄_y(x⁽ᵗ⁾_b), 1e-20)``.

    The caller puts ``model`` in eval mode with frozen parameters (``frozen_eval``); the m noisy copies of
    each iterate go through ``model`` in one forward pass.

    Args:
        model: base classifier f: [0,1] inputs -> logits.
        x: clean inputs in [0,1], ``(B, ...)``; the path starts at x⁽⁰⁾ = x.
        y: labels ``(B,)``.
        noises: the fixed draws δ_1..δ_m, ``(m, B, ...)``, reused at every step (not re-sampled).
        alpha: step length α in [0,1]-pixel L2 units (a step size, not a radius).
        num_steps: number of steps T >= 1.
        mix_step: x_c = x⁽ᵐⁱˣ_ˢᵗᵉᵖ⁾, snapshotted before step ``mix_step`` (0 <= mix_step < T; 0 gives x).
        clean_radius: x_c - x is renormalised to L2 <= ``clean_radius`` (SmoothMix: w_e·α·mix_step), then
            x_c is clamped to [0,1]. With ``clean_radius = 0``, x_c = x exactly.
        maxnorm: optional L2 bound on every iterate's distance from x (reference ``--maxnorm``; default none:
            the path reaches at most T·α).

    Returns:
        ``(x_c, x_hat)``, both detached, in [0,1].

    Raises:
        ValueError: if x leaves [0,1] (noise must not be added before the attack).
    """
    if x.min() < 0 or x.max() > 1:
        raise ValueError("smoothmix_pgd expects clean inputs in [0, 1]")
    if not 0 <= mix_step < num_steps:
        raise ValueError(f"mix_step={mix_step} must satisfy 0 <= mix_step < num_steps={num_steps}")
    x = x.detach()
    x_t = x
    x_c = x
    for t in range(num_steps):
        if t == mix_step:
            x_c = x_t
        x_t = x_t.clone().requires_grad_(True)
        loss = smoothed_nll(noisy_logits(model, x_t, noises), y, floor=1e-20, reduction="sum")
        (grad,) = torch.autograd.grad(loss, x_t)
        x_t = _project(x_t.detach() + alpha * normalize_l2(grad), x, maxnorm)
    return _project(x_c, x, clean_radius), x_t
