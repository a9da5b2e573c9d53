"""Adaptive Randomized Smoothing (Lyu, Shaikh, Shpilevskiy, Shelhamer & Lécuyer, NeurIPS 2024): the certified
pipeline (ubc-systopia/adaptive-randomized-smoothing ``src/models/two_query_arch.py``,
``src/models/single_query_arch.py``).

For total noise σ and budget share f ∈ (0, 1), on inputs of d = C·H·W coordinates:

1. query 1: m₁ = x + σ₁ε₁ with σ₁ = σ/√f;
2. mask: w = mask_net(m₁) ∈ (0, 1)^(1×H×W), a function of m₁ only (never of the clean x);
3. σ₂ = (σ/√(1−f))·‖w‖₂/√d with ‖w‖₂ over all d coordinates (√C times the one-channel norm), ≥ 1e-6;
4. query 2: m₂ = w⊙x + σ₂ε₂;
5. x̂ = (σ₂²·m₁ + σ₁²·w·m₂)/(σ₂² + σ₁²·w²) (inverse-variance average of m₁ and m₂/w, unbiased for x);
6. logits = f(x̂) (normalization is f's first layer).

Accounting (Gaussian DP: Dong, Roth & Su, JRSS-B 2022, §3, adaptive composition of μ-GDP, as Lyu et al.
use it): over the L∞ ball of radius r, query 1 is (√d·r/σ₁)-GDP and query 2, whose σ₂ is fixed by w,
(r‖w‖₂/σ₂)-GDP; they compose adaptively to μ = √d·r/σ for every mask, i.e. d/σ₁² + ‖w‖²/σ₂² = d/σ², so
CERTIFY's L∞ radius is σΦ⁻¹(pA_lower)/√d — Cohen's L2 certificate divided by √d, as for plain Gaussian
noise. The σ₂ floor only adds noise. ``static`` is one query w⊙x + σ_wε
with a learned input-independent mask and σ_w = σ‖w‖₂/√d (same μ); ``vanilla`` is Cohen's f(x + σε). The
pipeline holds no other randomness: no augmentation inside it (the reference's batch-wide random flip makes
votes dependent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from rs_lightning.smoothing.certificate import LINF
from rs_lightning.validation import ConfigError

from ._shape import chw
from .unet import MaskUNet

MODES = ("ars", "static", "vanilla")
SIGMA2_FLOOR = 1e-6
"""σ₂'s floor (the reference's): a near-zero mask may leave near-zero step-2 noise; μ₂ is unchanged."""


def query_sigmas(sigma: float, budget_frac: float) -> tuple[float, float]:
    """``(σ/√f, σ/√(1−f))``: the first query's noise and the second's before the mask-norm factor."""
    try:
        valid = not isinstance(budget_frac, bool) and 0.0 < float(budget_frac) < 1.0
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ConfigError(
            "method.first_query_budget_frac",
            budget_frac,
            "in the open interval (0, 1)",
            "the share f of the privacy budget spent on the first query (reference 0.5)",
        )
    return sigma / math.sqrt(budget_frac), sigma / math.sqrt(1.0 - budget_frac)


def mask_norm(w: torch.Tensor, channels: int) -> torch.Tensor:
    """‖w‖₂ over all C·H·W coordinates of a one-channel mask ``(B, 1, H, W)`` broadcast to C channels."""
    return math.sqrt(channels) * w.flatten(1).norm(dim=1)


def step2_sigma(w: torch.Tensor, sigma2_base: float, channels: int, dim: int) -> torch.Tensor:
    """Per-sample σ₂ = σ/√(1−f) · ‖w‖₂/√d (≥ :data:`SIGMA2_FLOOR`), shaped ``(B, 1, 1, 1)``."""
    s2 = sigma2_base * mask_norm(w, channels) / math.sqrt(dim)
    return s2.clamp_min(SIGMA2_FLOOR).view(-1, 1, 1, 1)


def combine(m1: torch.Tensor, m2: torch.Tensor, w: torch.Tensor, s1: float, s2: torch.Tensor) -> torch.Tensor:
    """x̂ = (σ₂²m₁ + σ₁²·w·m₂)/(σ₂² + σ₁²w²): per-pixel noise variance 1/(1/σ₁² + w²/σ₂²)."""
    v1, v2 = s1 * s1, s2 * s2
    return (v2 * m1 + v1 * w * m2) / (v2 + v1 * w * w)


class StaticMask(nn.Module):
    """A learned input-independent mask ``(1, 1, H, W)``, initialized to ones (ARS ``static`` baseline)."""

    def __init__(self, *, input_shape: Sequence[int]) -> None:
        super().__init__()
        _, h, w = chw(input_shape)
        self.weight = nn.Parameter(torch.ones(1, 1, h, w))

    def forward(self) -> torch.Tensor:
        return self.weight

    @torch.no_grad()
    def clamp_(self) -> None:
        """Keep the mask in [0, 1] (the reference clamps after every optimizer step)."""
        self.weight.clamp_(0.0, 1.0)


class AdaptiveSmoothing(nn.Module):
    """The randomized base classifier ``F(x, ε)`` of ARS (``mode="ars"``: ε = (ε₁, ε₂)), of its static-mask
    baseline or of Cohen's smoothing (``static``/``vanilla``: one ε); certified in L∞ only (a
    :class:`~rs_lightning.smoothing.pipeline.NoisePipeline`). Inputs must have ``input_shape``: σ₂ and σ_w
    are calibrated to its d = C·H·W, which the certificate divides by.

    Args:
        classifier: the base classifier f on [0,1] inputs (normalization first).
        sigma: total noise level σ ([0,1]-pixel units): the certificate is that of Gaussian noise σ.
        input_shape: (C, H, W) of the canvas.
        mode: ``ars`` | ``static`` | ``vanilla``.
        mask: the :class:`MaskUNet` (``ars``) or :class:`StaticMask` (``static``); None for ``vanilla``.
        first_query_budget_frac: f (``ars`` only; reference 0.5).
    """

    norms = (LINF,)

    def __init__(
        self,
        classifier: nn.Module,
        *,
        sigma: float,
        input_shape: Sequence[int],
        mode: str = "ars",
        mask: nn.Module | None = None,
        first_query_budget_frac: float = 0.5,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ConfigError("method.mode", mode, "one of " + ", ".join(MODES))
        if not (math.isfinite(float(sigma)) and float(sigma) > 0):
            raise ConfigError("sigma", sigma, "a finite number > 0")
        if (mask is None) != (mode == "vanilla"):
            raise ValueError(f"mode={mode!r} needs {'no' if mode == 'vanilla' else 'a'} mask module")
        self.classifier, self.mask = classifier, mask
        self.mode, self.sigma = mode, float(sigma)
        self.input_shape = chw(input_shape)
        self.channels, self.dim = self.input_shape[0], math.prod(self.input_shape)
        self.first_query_budget_frac = float(first_query_budget_frac)
        query_sigmas(self.sigma, self.first_query_budget_frac)  # validates f
        self.noise_draws = 2 if mode == "ars" else 1

    def queries(self, x: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(classifier input, mask)`` for clean ``x`` ``(B, C, H, W)`` and standard-normal ``noise``
        ``(B, noise_draws, C, H, W)``; the mask is all ones for ``vanilla``. Differentiable (reparameterized
        noise) for training."""
        if tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(
                f"the pipeline was built for inputs {self.input_shape} (its noise is calibrated to d = "
                f"{self.dim}) but got {tuple(x.shape[1:])}: certify it on data of that shape"
            )
        noise = noise.to(x.dtype)
        if self.mode == "vanilla":
            return x + self.sigma * noise[:, 0], torch.ones_like(x[:, :1])
        if self.mode == "static":
            w = self.mask().to(x.dtype)
            s_w = self.sigma * mask_norm(w, self.channels) / math.sqrt(self.dim)
            return w * x + s_w.clamp_min(SIGMA2_FLOOR) * noise[:, 0], w.expand(x.shape[0], -1, -1, -1)
        s1, s2_base = query_sigmas(self.sigma, self.first_query_budget_frac)
        m1 = x + s1 * noise[:, 0]
        w = self.mask(m1).to(x.dtype)  # sees m1 only (float32 under autocast)
        s2 = step2_sigma(w, s2_base, self.channels, self.dim)
        m2 = w * x + s2 * noise[:, 1]
        return combine(m1, m2, w, s1, s2), w

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.queries(x, noise)[0])


def build_mask(mode: str, input_shape: Sequence[int], mask_width: int = 32) -> nn.Module | None:
    """The mask of ``mode``: a :class:`MaskUNet` of width ``mask_width``, a :class:`StaticMask` or None."""
    if mode not in MODES:
        raise ConfigError("method.mode", mode, "one of " + ", ".join(MODES))
    if mode == "ars":
        return MaskUNet(input_shape=input_shape, width=mask_width)
    return StaticMask(input_shape=input_shape) if mode == "static" else None


def pipeline_from_checkpoint(
    classifier: nn.Module,
    settings: Mapping,
    state: Mapping[str, torch.Tensor],
    *,
    sigma: float,
    input_shape: Sequence[int],
) -> AdaptiveSmoothing:
    """The pipeline a checkpoint's ``pipeline`` metadata describes, with its ``mask.*`` weights loaded."""
    mode = str(settings.get("mode"))
    mask = build_mask(mode, input_shape, int(settings.get("mask_width", 32)))
    if mask is not None:
        mask.load_state_dict({k.removeprefix("mask."): v for k, v in state.items() if k.startswith("mask.")})
    return AdaptiveSmoothing(
        classifier,
        sigma=sigma,
        input_shape=input_shape,
        mode=mode,
        mask=mask,
        first_query_budget_frac=float(settings.get("first_query_budget_frac", 0.5)),
    )
