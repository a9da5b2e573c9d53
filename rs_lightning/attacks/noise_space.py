"""Attacks in noise space: search for a worse Gaussian-noise draw around a sampled one, x fixed. Pure torch.

Unlike input-space attacks (SmoothAdv, SmoothMix), these move the noise δ of ``f(x + δ)`` and keep the
clean input x unchanged. :func:`noise_pgd` is the shared loop (normalized-gradient ascent on a per-copy
objective followed by a constraint); :func:`kl_noise_pgd` is CAT-RS's instance. :func:`sphere_noise_pgd`
(Sun et al., ICML 2025) searches on the exact sphere of each draw and keeps the first fooling iterate.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from rs_lightning.smoothing.soft import soft_kl

from .common import normalize_l2, per_sample_norm, project_l2


def mean_rms(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample mean and *uncentred* RMS ``sqrt(mean(δ²))``, each shaped ``(N, 1, ..., 1)``."""
    flat = delta.flatten(1)
    shape = (-1, *([1] * (delta.dim() - 1)))
    return flat.mean(dim=1).view(shape), flat.pow(2).mean(dim=1).sqrt().view(shape)


def restandardize(delta: torch.Tensor, mean0: torch.Tensor, rms0: torch.Tensor) -> torch.Tensor:
    """``δ ← μ0 + (δ − mean(δ))·s0 / RMS(δ)`` per sample (alinlab/smoothing-catrs ``KL_PGD``).

    The result has per-sample mean exactly ``μ0``; its RMS equals ``s0`` only when ``mean/RMS`` of δ equals
    that of the original draw, i.e. up to O(μ²/s²) terms (negligible for high-dimensional Gaussian draws,
    where μ ≈ 0): RMS(out)² = μ0² + s0²·(1 − mean(δ)²/RMS(δ)²).
    """
    mean, rms = mean_rms(delta)
    return mean0 + (delta - mean) * (rms0 / rms)


def noise_pgd(
    model: nn.Module,
    x: torch.Tensor,
    noise0: torch.Tensor,
    objective: Callable[[torch.Tensor], torch.Tensor],
    *,
    steps: int,
    step_size: float,
    constrain: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``steps`` times: ``δ ← constrain(δ + a·g/(‖g‖₂ + 1e-8), δ0)`` with ``g = ∇_δ objective(f(x + δ))``.

    The gradient is normalized per row (per noise copy). The caller puts ``model`` in eval mode with frozen
    parameters (:func:`~rs_lightning.smoothing.soft.frozen_eval`).

    Args:
        model: base classifier f: [0,1] inputs -> logits.
        x: clean inputs, one row per noise copy (e.g. ``copy_rows(x, m)``), ``(N, ...)``; kept fixed.
        noise0: the sampled draws δ0, ``(N, ...)``; the search starts there.
        objective: ``logits (N, K) -> scalar`` to maximise.
        steps: number of ascent steps T >= 1.
        step_size: L2 length a of each step, in [0,1]-pixel units.
        constrain: ``(δ, δ0) -> δ`` applied after each step (projection, re-standardisation, ...).

    Returns:
        The final noise, detached, shaped like ``noise0``.
    """
    x = x.detach()
    noise0 = noise0.detach()
    noise = noise0
    with torch.enable_grad():
        for _ in range(steps):
            noise = noise.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(objective(model(x + noise)), noise)
            noise = constrain(noise.detach() + step_size * normalize_l2(grad), noise0).detach()
    return noise


def kl_noise_pgd(
    model: nn.Module,
    x: torch.Tensor,
    noise0: torch.Tensor,
    target: torch.Tensor,
    *,
    epsilon: float,
    steps: int,
    copies: int = 1,
) -> torch.Tensor:
    """CAT-RS worst-case noise (Jeong, Kim & Shin, AAAI 2023; alinlab/smoothing-catrs
    ``code/train_catrs.py`` ``KL_PGD``).

    Maximises ``(1/copies)·Σ_rows KL(p ‖ softmax(f(x + δ)))`` — Σ_b (1/M) Σ_i KL(p_b ‖ F(x_b + δ_i)) when the
    rows are the M copies of each image — by T steps of length ``a = 2ε/T``; after each step ``δ − δ0`` is
    projected onto the L2 ball of radius ε, then δ is re-standardised to the per-sample mean and uncentred
    RMS of δ0 (:func:`restandardize`), a search "on the sphere of the drawn noise".

    Args:
        model: base classifier (eval mode, frozen parameters: the caller's ``frozen_eval``).
        x: clean inputs in [0,1], one row per noise copy, ``(N, ...)``.
        noise0: the sampled draws δ0, ``(N, ...)``.
        target: the KL target p of each row, ``(N, K)`` (CAT-RS: the pre-trained soft label p_b).
        epsilon: L2 radius ε of the search around δ0, in [0,1]-pixel units (reference ``--epsilon/256``).
        steps: number of steps T >= 1.
        copies: rows per image M (only scales the objective; the normalized step does not depend on it).

    Returns:
        δ*, detached, shaped like ``noise0``.

    Raises:
        ValueError: if x leaves [0,1] (noise must not be added before the attack).
    """
    if x.min() < 0 or x.max() > 1:
        raise ValueError("kl_noise_pgd expects clean inputs in [0, 1]")
    mean0, rms0 = mean_rms(noise0.detach())

    def objective(logits: torch.Tensor) -> torch.Tensor:
        return soft_kl(logits, target).sum() / copies

    def constrain(noise: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        return restandardize(start + project_l2(noise - start, epsilon), mean0, rms0)

    return noise_pgd(
        model, x, noise0, objective, steps=steps, step_size=2.0 * epsilon / steps, constrain=constrain
    )


def sphere_noise_pgd(
    model: nn.Module,
    x: torch.Tensor,
    noise0: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    step_size: float,
    copies: int = 1,
) -> torch.Tensor:
    """Adversarial noise of the same L2 norm as each draw, with early stopping (Sun, Mao, Müller & Vechev,
    ICML 2025, "ACR is a poor metric", eth-sri/acr-weakness ``code/train_utils.py`` ``radius_PGD``).

    Starting from δ = δ0, for t = 0..S−1:

    1. z = f(x + δ); every row not yet recorded with ``argmax z ≠ y`` records the current δ — the check comes
       **before** the update, so a δ0 that already fools the model is returned unchanged;
    2. L = Σ_rows CE(z, y) / copies, g = ∇_δ L;
    3. δ ← δ + η_s·g/(‖g‖₂ + 1e-8) per row, then δ ← δ·‖δ0‖₂/(‖δ‖₂ + 1e-8) (exact sphere, no ball around δ0).

    Rows never misclassified get the last iterate (not re-checked). Stops early once every row is recorded
    (same result). The caller puts ``model`` in eval mode with frozen parameters (``frozen_eval``).

    Args:
        model: base classifier f: [0,1] inputs -> logits.
        x: clean inputs in [0,1], one row per noise copy ``(N, ...)``; kept fixed.
        noise0: the sampled draws δ0 ``(N, ...)``.
        y: true label of each row ``(N,)``.
        steps: S >= 1 attack steps.
        step_size: η_s, L2 length of each step in [0,1]-pixel units (the reference's ``--epsilon``).
        copies: rows per image m (only scales L; the normalized step does not depend on it).

    Returns:
        The adversarial noise, detached, shaped like ``noise0``; each row has the L2 norm of its δ0.

    Raises:
        ValueError: if x leaves [0,1] (noise must not be added before the attack).
    """
    if x.min() < 0 or x.max() > 1:
        raise ValueError("sphere_noise_pgd expects clean inputs in [0, 1]")
    x, noise0 = x.detach(), noise0.detach()
    norm0 = per_sample_norm(noise0)
    noise = noise0
    result = noise0.clone()
    recorded = torch.zeros(len(x), dtype=torch.bool, device=x.device)
    with torch.enable_grad():
        for _ in range(steps):
            noise = noise.clone().requires_grad_(True)
            logits = model(x + noise)
            fooled = (logits.detach().argmax(dim=1) != y) & ~recorded
            result[fooled] = noise.detach()[fooled]
            recorded |= fooled
            if recorded.all():
                return result
            (grad,) = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum") / copies, noise)
            noise = noise.detach() + step_size * normalize_l2(grad)
            noise = noise * (norm0 / (per_sample_norm(noise) + 1e-8))
    result[~recorded] = noise[~recorded]
    return result
