"""CERTIFY around an Adaptive-RS pipeline is sound, on a construction whose answer is known exactly.

The pipeline (Lyu et al. 2024) runs a data-dependent mask: w = 0.2 + 0.6·sigmoid(4·m₁[1]) on every
coordinate, a function of the first query's second coordinate only. Given w, σ₂ = σ·w/√(1 − f) (the mask
norm over √d is w), so x̂₀ − x₀ has variance 1/(1/σ₁² + w²/σ₂²) = σ² whatever w is, and it is independent of
m₁[1]: x̂₀ ~ N(x₀, σ²) unconditionally. A half-space classifier on x̂₀ therefore has pA = Φ(|x₀|/σ), and a
certificate fails when it names a wrong class or its bound exceeds that pA. The failure count over 5,000
inputs must follow the exact law of a correct pipeline and engine (the Poisson-binomial acceptance region
of :mod:`stat_testing`). Plausible bugs and why they fail: a second query that reuses ε₁, averaging weights
swapped, or σ₂ off by the mask factor all change the noise on x̂₀; a pipeline whose noise is 10% below what
its accounting assumes (σ_eff = 0.9σ) — the shape of a lost factor — passes with probability < 1%
(computed below from the same exact formulas).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import binom, norm
from stat_testing import Halfspace, acceptance_region, cp_lower, miss_probability, prob_bound_exceeds
from torch import nn

from rs_lightning.models.ars import AdaptiveSmoothing
from rs_lightning.smoothing import ABSTAIN, CertificationSpec, certify_batch

SIGMA, ALPHA, N0, N, INPUTS, MAX_MISS = 0.5, 0.05, 64, 1000, 5000, 0.01


class SecondCoordinateMask(nn.Module):
    """w = 0.2 + 0.6·sigmoid(4·m₁[..., 1]) on every coordinate: adaptive, and blind to coordinate 0."""

    def forward(self, m1):
        value = 0.2 + 0.6 * torch.sigmoid(4 * m1.flatten(1)[:, 1])
        return value.view(-1, 1, 1, 1).expand(-1, 1, *m1.shape[2:])


def margins() -> np.ndarray:
    """|x₀| evenly in [σ, 3σ] (pA 0.84 … 0.9987), both signs; x₁ spread so the mask varies."""
    m = np.linspace(SIGMA, 3 * SIGMA, INPUTS // 2)
    return np.concatenate([m, -m])


def failure_probability(margins, sigma_actual: float = SIGMA) -> np.ndarray:
    """Exact P(failure) per input when the pipeline's noise on x̂₀ has std ``sigma_actual`` while the
    truth used for judging is σ: selection by n0 votes (a tie goes to class 0), then the bound on n
    estimation draws compared with the true pA = Φ(|x₀|/σ) (or 1/2 for a wrong class)."""
    q = norm.cdf(margins / sigma_actual)  # P(class 1) under the actual noise
    pa_actual = norm.cdf(np.abs(margins) / sigma_actual)
    pa_true = norm.cdf(np.abs(margins) / SIGMA)
    select_one = binom.sf(N0 // 2, N0, q)
    select_true = np.where(margins > 0, select_one, 1 - select_one)
    right = prob_bound_exceeds(N, pa_actual, pa_true, ALPHA, cp_lower, strict=True)
    wrong = prob_bound_exceeds(N, 1 - pa_actual, 0.5, ALPHA, cp_lower, strict=False)
    return select_true * right + (1 - select_true) * wrong


def test_the_ars_soundness_test_has_power():
    """A pipeline with 10% less noise than accounted for (or 10% more: a wasteful bound) would pass the
    acceptance region below with probability < 1%."""
    low, high = acceptance_region(failure_probability(margins()))
    for factor in (0.9, 1.1):
        assert miss_probability(failure_probability(margins(), factor * SIGMA), low, high) < MAX_MISS


def test_certify_around_an_adaptive_pipeline_is_sound():
    m = margins()
    xs = torch.zeros(len(m), 1, 1, 2)
    xs[:, 0, 0, 0] = torch.as_tensor(m, dtype=torch.float32)
    xs[:, 0, 0, 1] = torch.as_tensor(np.resize([-0.5, 0.0, 0.5, 1.0], len(m)), dtype=torch.float32)
    pipeline = AdaptiveSmoothing(
        Halfspace(), sigma=SIGMA, input_shape=(1, 1, 2), mode="ars", mask=SecondCoordinateMask()
    ).eval()
    spec = CertificationSpec(sigma=SIGMA, n0=N0, n=N, alpha=ALPHA, batch_size=50_000, norm="linf")
    result = certify_batch(pipeline, xs, range(len(m)), spec, num_classes=2)
    truth = (m > 0).astype(int)
    pa_true = norm.cdf(np.abs(m) / SIGMA)
    certified = result.predict != ABSTAIN
    fails = certified & ((result.predict != truth) | (result.pa_lower > pa_true))
    low, high = acceptance_region(failure_probability(m))
    assert low <= int(fails.sum()) <= high, (low, int(fails.sum()), high)
    # the estimation counts of the true class follow Binomial(n, Phi(|x0| / sigma)): the noise is right
    pa = norm.cdf(np.abs(m) / SIGMA)
    z = (result.counts[np.arange(len(m)), truth] - N * pa) / np.sqrt(N * pa * (1 - pa))
    assert abs(z.mean()) < 5 / np.sqrt(len(m)) and 0.9 < z.std() < 1.1


def test_sequential_certify_around_an_adaptive_pipeline_is_sound():
    """sampling=sequential through the same pipeline (an L∞ grid 0, 0.25, 0.5 — the default steps of 1/255
    would make every bucket tiny on this 2-pixel input — looks continuing each input's streams):
    failures (a wrong class, or a bound above the true pA) stay within the binomial limit of alpha, rows
    stop at looks, and most inputs stop before the cap. Catches a look that draws the pipeline's noise from
    another stream than its estimation one (the bound would then not track the true pA)."""
    m = margins()
    xs = torch.zeros(len(m), 1, 1, 2)
    xs[:, 0, 0, 0] = torch.as_tensor(m, dtype=torch.float32)
    xs[:, 0, 0, 1] = torch.as_tensor(np.resize([-0.5, 0.0, 0.5, 1.0], len(m)), dtype=torch.float32)
    pipeline = AdaptiveSmoothing(
        Halfspace(), sigma=SIGMA, input_shape=(1, 1, 2), mode="ars", mask=SecondCoordinateMask()
    ).eval()
    grid = {"first_look": 256, "radii": [0, 0.25, 0.5]}
    spec = CertificationSpec(
        sigma=SIGMA,
        n0=N0,
        n=4 * N,
        alpha=ALPHA,
        batch_size=50_000,
        norm="linf",
        sampling="sequential",
        sampler=grid,
    )
    result = certify_batch(pipeline, xs, range(len(m)), spec, num_classes=2)
    truth = (m > 0).astype(int)
    certified = result.predict != ABSTAIN
    fails = certified & ((result.predict != truth) | (result.pa_lower > norm.cdf(np.abs(m) / SIGMA)))
    assert int(fails.sum()) <= binom.ppf(1 - 1e-6, len(m), ALPHA)
    assert (result.n < 4 * N).mean() > 0.5 and (result.radius[certified] > 0).all()
