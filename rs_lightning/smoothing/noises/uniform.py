"""Uniform noise on [−λ, λ]^d with λ = √3·σ (Yang et al., ICML 2020, Table 1 and their code tonyduan/rs4a
``src/noises.py``): L1 radius 2λ(p − ½); L∞ radius 2λ(1 − (3/2 − p)^(1/d))."""

from __future__ import annotations

import math

import numpy as np
import torch

from .base import Noise, cast, dim_of, uniform_float32


class Uniform(Noise):
    name = "uniform"
    norms = ("l1", "linf")
    scale_over_sigma = math.sqrt(3)

    def sample(self, shape, generator, device, dtype=torch.float32, out=None):
        return cast(uniform_float32(shape, generator, device).mul_(2).sub_(1), dtype, out)

    def radius(self, p, lam, norm, dim):
        if norm == "l1":
            return 2 * lam * (p - 0.5)
        return 2 * lam * (1 - (1.5 - p) ** (1 / dim_of(dim)))

    def threshold(self, r, lam, norm, dim):
        if norm == "l1":
            return 0.5 + r / (2 * lam)
        with np.errstate(invalid="ignore"):
            return np.where(r < 2 * lam, 1.5 - (1 - r / (2 * lam)) ** dim_of(dim), np.inf)

    def radius_at_tail(self, q, lam, norm, dim):
        if norm == "l1":
            return 2 * lam * (0.5 - q)
        return 2 * lam * (1 - (0.5 + q) ** (1 / dim_of(dim)))
