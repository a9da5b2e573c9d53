"""Laplace noise with scale λ = σ/√2 per coordinate (Teng, Lee & Yuan, *ℓ1 Adversarial Robustness
Certificates: a Randomized Smoothing Approach*, OpenReview 2019, Thm. 1; Yang et al., ICML 2020, Table 1):
L1 radius −λ·ln(2(1 − p))."""

from __future__ import annotations

import math

import numpy as np
import torch

from .base import Noise, cast, uniform_float32


class Laplace(Noise):
    name = "laplace"
    norms = ("l1",)
    scale_over_sigma = 1 / math.sqrt(2)

    def sample(self, shape, generator, device, dtype=torch.float32, out=None):
        """By inversion: −sign(v)·ln(1 − 2|v|) for v = u − ½ uniform on (−½, ½), in float32."""
        v = uniform_float32(shape, generator, device).sub_(0.5)
        return cast(v.sign() * -torch.log1p(-2 * v.abs().clamp(max=0.5 - 1e-7)), dtype, out)

    def radius(self, p, lam, norm, dim):
        with np.errstate(divide="ignore"):
            return -lam * np.log(2 * (1 - p))

    def threshold(self, r, lam, norm, dim):
        return 1 - 0.5 * np.exp(-r / lam)

    def radius_at_tail(self, q, lam, norm, dim):
        with np.errstate(divide="ignore"):
            return -lam * np.log(2 * q)

    def log_threshold(self, r, lam, norm, dim):
        return np.log1p(-0.5 * np.exp(-r / lam))
