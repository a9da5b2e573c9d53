"""Gaussian noise N(0, σ²I) (Cohen, Rosenfeld & Kolter, ICML 2019, Thm. 1): L2 radius σΦ⁻¹(p); by the
inclusion of balls also L1 radius σΦ⁻¹(p) (‖δ‖₂ ≤ ‖δ‖₁) and L∞ radius σΦ⁻¹(p)/√d (‖δ‖₂ ≤ √d‖δ‖∞)."""

from __future__ import annotations

import math

import torch
from scipy.special import log_ndtr
from scipy.stats import norm as normal

from .base import Noise, dim_of


class Gaussian(Noise):
    name = "gaussian"
    norms = ("l2", "l1", "linf")

    def sample(self, shape, generator, device, dtype=torch.float32, out=None):
        return torch.randn(shape, generator=generator, device=device, dtype=dtype, out=out)

    @staticmethod
    def radius_scale(lam: float, norm: str, dim: int | None = None) -> float:
        """s in the radius s·Φ⁻¹(p): σ in L2 and L1, σ/√d in L∞."""
        return lam / math.sqrt(dim_of(dim)) if norm == "linf" else lam

    def radius(self, p, lam, norm, dim):
        return self.radius_scale(lam, norm, dim) * normal.ppf(p)

    def threshold(self, r, lam, norm, dim):
        return normal.cdf(r / self.radius_scale(lam, norm, dim))

    def radius_at_tail(self, q, lam, norm, dim):
        return self.radius_scale(lam, norm, dim) * normal.isf(q)

    def log_threshold(self, r, lam, norm, dim):
        return log_ndtr(r / self.radius_scale(lam, norm, dim))


def gaussian_quantile(p: torch.Tensor) -> torch.Tensor:
    """Φ⁻¹(p) in torch, differentiable (MACER's soft radius, Zhai et al., ICLR 2020, Thm. 1):
    √2·erfinv(2p − 1), the values of ``torch.distributions.Normal(0, 1).icdf``."""
    return torch.erfinv(2 * p - 1) * math.sqrt(2)
