"""SmoothAdv attacks on the Monte-Carlo soft smoothed classifier (Salman et al., NeurIPS 2019, §3 and App. A).

All three attacks maximize, within the L2 ball ``||x' - x||_2 <= eps`` and the box ``[0,1]^d``,

    l_adv(x') = -log( (1/m) sum_j softmax(f(x' + delta_j))_y )                 (Salman et al. Eq. (S))

with the ``m`` noise draws ``delta_j`` fixed for the whole attack (as ``code/attacks.py``). With ``m = 1`` it
is the plain cross-entropy CE(f(x' + delta_1), y) (log-softmax, no floor), as in the reference code.

**Noise layout.** ``noise`` is always **(m, B, *x.shape[1:])**: ``noise[j, b]`` is draw j of image b (the
copy layout of :mod:`rs_lightning.smoothing.soft`, as :meth:`SmoothingMethod.draw_noise` returns it). The
attacks return one adversarial image per input, ``(B, ...)``, detached; the caller adds the same draws for
its loss.

Every attack runs the model under :func:`frozen_eval` (eval mode, parameters frozen: BN uses running
statistics and no parameter gradient is built) and restores the previous state afterwards. Inputs outside
[0,1] raise ``ValueError`` (as the reference's ``attacks.py``). Pure torch: no Lightning.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from rs_lightning.smoothing.soft import frozen_eval, loss_precision, noisy_logits, smoothed_nll

from .common import per_sample_norm, project_l2


def _check_inputs(x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor) -> None:
    lo, hi = float(x.detach().min()), float(x.detach().max())
    if lo < 0 or hi > 1:
        raise ValueError(
            f"SmoothAdv attacks need clean inputs in [0, 1] (pixel space, before normalization); "
            f"got values in [{lo:.4g}, {hi:.4g}]. Pass the un-noised, un-normalized images."
        )
    if noise.dim() != x.dim() + 1 or noise.shape[1:] != x.shape:
        raise ValueError(
            f"noise must have shape (m, B, *x.shape[1:]) = (m, {tuple(x.shape)}); got {tuple(noise.shape)} "
            "(draw j of image b is noise[j, b], as SmoothingMethod.draw_noise returns it)"
        )
    if y.shape != x.shape[:1]:
        raise ValueError(f"y must have shape ({len(x)},); got {tuple(y.shape)}")


def adversarial_loss(logits: torch.Tensor, y: torch.Tensor, floor: float = 1e-20) -> torch.Tensor:
    """Per-sample ``l_adv``: ``logits`` (m, B, K) -> (B,). m > 1: -log of the softmax averaged over the draws,
    clamped at ``floor`` (SmoothAdv-PGD objective); m = 1: CE(f(x' + delta), y). Computed in float32 under
    bf16/fp16 autocast (:func:`loss_precision`)."""
    logits = loss_precision(logits)
    if logits.shape[0] == 1:
        return F.cross_entropy(logits[0], y, reduction="none")
    return smoothed_nll(logits, y, floor=floor, reduction="none")


def _ascent_direction(g: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """``g / ||g||_2`` per sample; samples whose gradient is exactly 0 get a raw N(0, I) direction instead
    (reference ``attacks.py``: "avoid nan or inf if gradient is 0")."""
    norm = per_sample_norm(g)
    direction = g / torch.where(norm > 0, norm, torch.ones_like(norm))
    zero = norm.flatten() == 0
    if zero.any():
        direction[zero] = torch.randn(
            direction[zero].shape, generator=generator, device=g.device, dtype=g.dtype
        )
    return direction


def _clamp_and_project(
    x: torch.Tensor, delta: torch.Tensor, eps: float, clamp_first: bool = True
) -> torch.Tensor:
    if clamp_first:  # SmoothAdv order: box, then ball (the ball projection keeps x + delta in the box)
        return project_l2((x + delta).clamp(0, 1) - x, eps)
    return (x + project_l2(delta, eps)).clamp(0, 1) - x  # Consistency's SmoothAdv_PGD order


def _normalized_ascent(
    x: torch.Tensor,
    direction_at: Callable[[torch.Tensor], torch.Tensor],
    eps: float,
    steps: int,
    clamp_first: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The PGD loop both SmoothAdv-PGD variants share: Delta = 0, alpha = 2 eps / T, T times
    Delta += alpha * d / ||d||_2 with d = ``direction_at(Delta)`` (N(0, I) where d = 0), then box and ball
    (:func:`_clamp_and_project`). Returns ``x + Delta``."""
    alpha = 2.0 * eps / steps
    delta = torch.zeros_like(x)
    for _ in range(steps):
        step = alpha * _ascent_direction(direction_at(delta), generator)
        delta = _clamp_and_project(x, delta + step, eps, clamp_first)
    return x + delta


def smoothadv_pgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor,
    eps: float,
    steps: int,
    *,
    clamp_first: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """SmoothAdv-PGD (Hadisalman/smoothing-adversarial ``PGD_L2``): T normalized-gradient ascents on l_adv.

    Delta starts at 0; step size alpha = 2 eps / T; each step: Delta += alpha * g / ||g||_2 (N(0, I) where
    g = 0), clamp x + Delta into [0,1], then project Delta onto the eps-ball (``clamp_first=False``: project
    then clamp, the order of Consistency's re-implementation).

    Args:
        model: base classifier on [0,1] inputs (normalization inside).
        x: clean images (B, ...) in [0, 1].
        y: labels (B,).
        noise: the m fixed draws, **(m, B, ...)** (see the module docstring).
        eps: L2 radius in [0,1]-pixel units (the current, warmed-up value).
        steps: T >= 1.
        generator: for the random direction used where a gradient is exactly zero.

    Returns:
        ``x + Delta`` (B, ...), detached, with ||Delta||_2 <= eps and x + Delta in [0,1].
    """
    _check_inputs(x, y, noise)
    x, noise = x.detach(), noise.detach()

    def gradient(delta: torch.Tensor) -> torch.Tensor:
        delta = delta.detach().requires_grad_(True)
        loss = adversarial_loss(noisy_logits(model, x + delta, noise), y).sum()
        return torch.autograd.grad(loss, delta)[0]

    with frozen_eval(model), torch.enable_grad():
        return _normalized_ascent(x, gradient, eps, steps, clamp_first, generator).detach()


def nograd_direction(model: nn.Module, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """g_hat = (1/m) sum_j (-F(x + delta_j)_y) * delta_j (``--no-grad-attack``), without backpropagation.

    By the Gaussian-smoothing identity grad E[F(x+delta)_y] = E[delta F(x+delta)_y] / sigma^2, this is
    sigma^2 times an estimate of the ascent direction of -E[F(x+delta)_y] (the probability, not its log).
    """
    with torch.no_grad():
        p_y = F.softmax(noisy_logits(model, x, noise), dim=-1).gather(
            -1, y.expand(noise.shape[0], -1)[..., None]
        )
        return (-p_y.view(*p_y.shape[:2], *([1] * (x.dim() - 1))) * noise).mean(dim=0)


def smoothadv_pgd_nograd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor,
    eps: float,
    steps: int,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """SmoothAdv-PGD with the gradient-free direction of :func:`nograd_direction` (``--no-grad-attack``
    of ``code/train_pgd.py``): same Delta = 0 start, alpha = 2 eps / T, normalization, clamp and projection as
    :func:`smoothadv_pgd`. Needs m >= 2 draws (the reference uses it only then)."""
    _check_inputs(x, y, noise)
    if noise.shape[0] < 2:
        raise ValueError(f"the no-grad SmoothAdv attack needs m >= 2 noise draws; got m = {noise.shape[0]}")
    x, noise = x.detach(), noise.detach()
    with frozen_eval(model):
        return _normalized_ascent(
            x, lambda delta: nograd_direction(model, x + delta, y, noise), eps, steps, generator=generator
        )


def _quantize(t: torch.Tensor, levels: int | None) -> torch.Tensor:
    return t if levels is None else torch.round(t * (levels - 1)) / (levels - 1)


def smoothadv_ddn(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor,
    eps: float,
    steps: int,
    *,
    init_norm: float,
    gamma: float = 0.05,
    levels: int | None = 256,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """SmoothAdv-DDN (reference ``DDN``, from Rony et al., CVPR 2019, jeromerony/fast_adversarial).

    Delta = 0, norm rho = ``init_norm``; step size cosine-annealed from 1 to 0.01 over T steps, the schedule
    advanced *before* each step (lr_t = 0.01 + 0.99 (1 + cos(pi (t+1) / T)) / 2, t = 0..T-1). Each step:
    is_adv = (mode over the m draws of argmax f(x + Delta + delta_j)) != y; keep the smallest-norm
    adversarial Delta seen (best norm starts at ||max(x, 1-x)||); Delta += lr_t * normalized grad of l_adv;
    rho *= (1 - gamma) if adversarial else (1 + gamma), capped at ||max(x, 1-x)||; rescale Delta to norm rho;
    quantize x + Delta to ``levels`` levels; clamp into [0,1].

    Returns ``x + best_Delta`` with best_Delta rescaled to norm <= eps, then quantized as in the reference
    (``levels=None`` skips quantization; with it, the norm can exceed eps by at most
    sqrt(d) / (2 (levels - 1))), and clamped into [0,1]. **Where no adversarial example was found,
    best_Delta = 0: the clean image.**
    """
    _check_inputs(x, y, noise)
    x, noise = x.detach(), noise.detach()
    worst_norm = per_sample_norm(torch.maximum(x, 1 - x)).flatten()
    rho = torch.full_like(worst_norm, float(init_norm))
    best_norm = worst_norm.clone()
    best_delta = torch.zeros_like(x)
    delta = torch.zeros_like(x)
    with frozen_eval(model), torch.enable_grad():
        for t in range(steps):
            lr = 0.01 + (1 - 0.01) * (1 + math.cos(math.pi * (t + 1) / steps)) / 2
            norm = per_sample_norm(delta).flatten()
            delta.requires_grad_(True)
            logits = noisy_logits(model, x + delta, noise)
            (grad,) = torch.autograd.grad(adversarial_loss(logits, y).sum(), delta)
            delta = delta.detach()
            is_adv = torch.mode(logits.detach().argmax(dim=-1), dim=0).values != y
            better = is_adv & (norm < best_norm)
            best_norm = torch.where(better, norm, best_norm)
            best_delta[better] = delta[better]

            delta = delta + lr * _ascent_direction(grad, generator)
            rho = torch.minimum(rho * (1 - (2 * is_adv.to(rho.dtype) - 1) * gamma), worst_norm)
            scale = rho / per_sample_norm(delta).flatten().clamp_min(1e-12)
            delta = delta * scale.view(-1, *([1] * (x.dim() - 1)))
            delta = _quantize(x + delta, levels).clamp(0, 1) - x
    best_delta = _quantize(project_l2(best_delta, eps), levels)
    return (x + best_delta).clamp(0, 1)
