"""The attack of Voráček & Hein (ICLR 2023) on randomized smoothing in floating point, in a construction of
our own, and its failure under lattice noise.

The base classifier reads low float bits: class 0 ("on the 2⁻²⁴ grid") if every coordinate of its input is
a multiple of 2⁻²⁴, else class 1. Under float noise at the clean input x = (1, 1, 1, 1) (pixel level 255
everywhere, on the 8-bit grid), the engine's noisy input fl(1 + δ) is *always* a multiple of 2⁻²⁴, whatever
the float32 δ: in [½, 2) the floats are multiples of 2⁻²⁴; below ½ the sum 1 + δ needs δ < −½, whose own
grid is 2⁻²⁴. So p_A = 1 and CERTIFY certifies class 0 with radius σΦ⁻¹(α^(1/n)) ≈ 3.2σ. But
x′ = (0, 0, 0, 0), at L2 distance 2 < 3.2, has noisy inputs fl(δ) = δ, whose bits below 2⁻²⁴ are zero only
by chance when |δ| < ½: there the float-smoothed classifier votes class 0 with probability ≈ 0.30 (< ½), so
the certificate is false.

Under lattice noise the base classifier sees (255 + j)/255, a function of the lattice point: the smoothed
classifier is the Gaussian smoothing of f∘round₂₅₅ and Cohen's theorem holds for it, so no such certificate
appears; at x its vote for class 0 is ≈ 0.33 and CERTIFY certifies class 1 there, at radius ≈ 0.40 (measured
at n = 10⁴, seed 0).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rs_lightning.smoothing import CertificationSpec, certify_batch, sample_counts
from rs_lightning.smoothing.noise import Phase
from rs_lightning.smoothing.noises import noise_of
from rs_lightning.smoothing.stats import clopper_pearson_interval

SIGMA = 1.0
N = 10_000
X = torch.ones(1, 1, 2, 2)
X_ADVERSARIAL = torch.zeros(1, 1, 2, 2)
DISTANCE = float((X - X_ADVERSARIAL).norm())


class ReadsLowBits(nn.Module):
    """Class 0 iff every coordinate is a multiple of 2⁻²⁴ (y·2²⁴ is exact in float32: a power of two)."""

    def forward(self, y):
        scaled = y.to(torch.float32).flatten(1) * 2.0**24
        on_grid = (scaled == scaled.round()).all(dim=1)
        return torch.stack([on_grid, ~on_grid], dim=1).float()


def certify(noise: str, x: torch.Tensor):
    spec = CertificationSpec(sigma=SIGMA, n0=100, n=N, alpha=0.001, noise=noise, batch_size=2000)
    return certify_batch(ReadsLowBits(), x, [0], spec, num_classes=2)


def vote_for_class_0(noise: str, x: torch.Tensor) -> tuple[float, float]:
    """A 99.99 % Clopper–Pearson interval for P(f(x + δ) = 0) under ``noise``, from 20,000 draws."""
    counts = sample_counts(
        ReadsLowBits(),
        x,
        [7],
        phase=Phase.ESTIMATION,
        num_samples=20_000,
        sigma=SIGMA,
        num_classes=2,
        batch_size=2000,
        noise=noise_of(noise),
    )
    low, high = clopper_pearson_interval(int(counts[0, 0]), 20_000, 1e-4)
    return float(low), float(high)


def test_float_noise_certifies_a_radius_that_an_adversarial_point_inside_it_violates():
    result = certify("gaussian", X)
    assert result.predict[0] == 0 and result.n_a[0] == N  # every noisy input on the 2⁻²⁴ grid: p_A = 1
    assert result.radius[0] > 3.1 * SIGMA > DISTANCE
    low, high = vote_for_class_0("gaussian", X_ADVERSARIAL)
    assert high < 0.5  # inside the certified ball, the float-smoothed classifier does not vote class 0


def test_lattice_noise_gives_no_such_certificate():
    result = certify("gaussian_lattice", X)
    assert not (result.predict[0] == 0 and result.radius[0] >= DISTANCE)
    low, high = vote_for_class_0("gaussian_lattice", X)
    assert high < 0.5  # the lattice-smoothed classifier at x itself does not vote class 0: nothing to certify
    assert np.isfinite(result.radius[0])
