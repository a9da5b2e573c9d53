"""CERTIFY with Laplace and uniform noise (Teng et al., OpenReview 2019; Yang et al., ICML 2020) on the
analytic halfspace f(x) = 1[x_0 > 0], whose L1 and L∞ distance from x is |x_0|.

Along x_0 the noise is λ·ε with ε standard Laplace or uniform on [−1, 1], so p_A = F(|x_0| / λ) with F the
standard noise's CDF (scipy), and the L1 certificates of both noises are tight there: the radius at the exact
p_A is |x_0|. A failure is therefore exactly "the bound exceeds p_A", and its count over many inputs follows
a Poisson-binomial law computed from scipy (tests/stat_testing.py), as for Gaussian noise in
test_soundness.py. Each test names the bugs it exists to catch and checks from the same exact law that each
would pass with probability < 1%.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta, binom, kstest, laplace, uniform
from stat_testing import (
    Halfspace,
    acceptance_region,
    certify_failure_probability,
    cp_lower,
    halfspace_inputs,
    miss_probability,
)

from rs_lightning.smoothing import ABSTAIN, CertificationSpec, InputSpecific, certify_batch
from rs_lightning.smoothing.noise import standard_noise_block
from rs_lightning.smoothing.noises import noise_of

SIGMA, ALPHA, N0, N = 0.5, 0.05, 64, 1000
INPUTS, BOUNDARY_INPUTS = 4000, 2000
MAX_MISS = 0.01
SCALE = {"laplace": SIGMA / math.sqrt(2), "uniform": math.sqrt(3) * SIGMA}
"""λ at standard deviation σ, from the distributions' variances 2λ² and λ²/3 (not from the code)."""
CDF = {"laplace": laplace.cdf, "uniform": lambda z: np.clip((1 + np.asarray(z)) / 2, 0.0, 1.0)}
SPAN = {"laplace": (1.0, 6.5), "uniform": (0.8, 0.999)}
"""|margin| / λ: p_A from 0.82 to 0.9992 (Laplace) and from 0.90 to 0.9995 (uniform; 1 beyond λ), reaching
close to 1, where an off-by-one in the bound shows most."""


def off_by_one(k, n, alpha):
    """Bug: BetaInv(alpha; k + 1, n - k) (the upper bound's parameters)."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where(k >= n, 1.0, beta.ppf(alpha, k + 1, np.maximum(n - k, 1e-300)))


def margins_of(noise: str) -> np.ndarray:
    low, high = SPAN[noise]
    magnitude = np.linspace(low, high, INPUTS // 2) * SCALE[noise]
    return np.concatenate([magnitude, -magnitude])


def certify(margins, noise: str, norm: str | None = None, batch_size: int = 50_000):
    spec = CertificationSpec(
        sigma=SIGMA, n0=N0, n=N, alpha=ALPHA, batch_size=batch_size, noise=noise, norm=norm
    )
    return certify_batch(Halfspace(), halfspace_inputs(margins), range(len(margins)), spec, num_classes=2)


def failures(result, margins) -> np.ndarray:
    truth = (np.asarray(margins) > 0).astype(int)
    certified = result.predict != ABSTAIN
    return certified & ((result.predict != truth) | (result.radius > np.abs(margins)))


@pytest.mark.parametrize("noise", ["laplace", "uniform"])
def test_l1_certify_is_sound_and_tight(noise):
    """Failures of 4,000 inputs lie within the exact law of a correct engine. Catches: the noise drawn at
    scale σ instead of its λ (Laplace: too few failures, uniform: too many), an off-by-one in the bound's
    parameters (too many), each with probability > 99% (checked from the exact law). Tightness: certified
    radii track |margin|."""
    margins, scale, cdf = margins_of(noise), SCALE[noise], CDF[noise]
    exact = certify_failure_probability(margins, scale, N0, N, ALPHA, cdf=cdf)
    low, high = acceptance_region(exact)
    for bug in (
        certify_failure_probability(margins, scale, N0, N, ALPHA, cdf=cdf, draw_scale=SIGMA),
        certify_failure_probability(margins, scale, N0, N, ALPHA, bound=off_by_one, cdf=cdf),
    ):
        assert miss_probability(bug, low, high) < MAX_MISS
    result = certify(margins, noise)
    count = int(failures(result, margins).sum())
    assert low <= count <= high, (low, count, high)
    right = (result.predict != ABSTAIN) & (result.predict == (margins > 0))
    assert np.median(result.radius[right] / np.abs(margins[right])) > 0.8


def test_uniform_linf_certify_is_sound():
    """The uniform L∞ radius 2λ(1 − (3/2 − p)^(1/d)) is not tight on this halfspace (d = 2): a failure is a
    bound above the p_A that |margin| needs, 3/2 − (1 − |margin|/(2λ))^d (closed form), and the count
    follows that exact law. Catches the L∞ radius computed with d = 1 (the L1 radius: too many)."""
    margins, scale, cdf = margins_of("uniform"), SCALE["uniform"], CDF["uniform"]
    needed = 1.5 - (1 - np.abs(margins) / (2 * scale)) ** 2
    low, high = acceptance_region(
        certify_failure_probability(margins, scale, N0, N, ALPHA, cdf=cdf, threshold=needed)
    )
    as_l1 = certify_failure_probability(margins, scale, N0, N, ALPHA, cdf=cdf)
    assert miss_probability(as_l1, low, high) < MAX_MISS
    count = int(failures(certify(margins, "uniform", "linf"), margins).sum())
    assert low <= count <= high, (low, count, high)


@pytest.mark.parametrize("noise", ["laplace", "uniform"])
def test_boundary_inputs_certify_at_rate_alpha(noise):
    """4,000 inputs at margin 0 (p_A = p_B = 1/2 for a symmetric noise): every certificate is wrong and the
    share certified must follow the exact rate (~alpha). Catches a noise that is not centred (e.g. uniform on
    [0, 1] or a Laplace sign drawn with bias 0.6), which certifies most boundary inputs."""
    pmf = binom.pmf(np.arange(N + 1), N, 0.5)
    rate = float(pmf[cp_lower(np.arange(N + 1), N, ALPHA) >= 0.5].sum())
    low, high = binom.ppf(1e-6, BOUNDARY_INPUTS, rate), binom.ppf(1 - 1e-6, BOUNDARY_INPUTS, rate)
    biased = float(binom.sf(np.searchsorted(cp_lower(np.arange(N + 1), N, ALPHA), 0.5) - 1, N, 0.6))
    assert binom.cdf(high, BOUNDARY_INPUTS, biased) < MAX_MISS
    count = int((certify(np.zeros(BOUNDARY_INPUTS), noise).predict != ABSTAIN).sum())
    assert low <= count <= high, (low, count, high)


@pytest.mark.parametrize("noise", ["laplace", "uniform"])
def test_rows_do_not_depend_on_the_batch_size(noise):
    """Per-input seeded streams: the same rows at any batch size (a stream tied to batch positions fails)."""
    margins = margins_of(noise)[::100]
    a, b = certify(margins, noise), certify(margins, noise, batch_size=97)
    np.testing.assert_array_equal(a.counts, b.counts)
    np.testing.assert_array_equal(a.radius, b.radius)


@pytest.mark.parametrize(
    ("noise", "reference"), [("laplace", laplace(scale=1.0)), ("uniform", uniform(loc=-1.0, scale=2.0))]
)
def test_the_seeded_streams_draw_the_standard_noise(noise, reference):
    """First draws of 2,000 inputs' streams (one per input, as the engine reads them) against scipy's law
    (KS at 1e-4), and the first coordinate of 2,000 blocks of one input. Catches streams that repeat across
    inputs or blocks (a KS of repeated values fails) and a noise not at scale 1."""
    first = [
        standard_noise_block(0, i, 1, 0, 1, (1,), noise=noise_of(noise), device="cpu").item()
        for i in range(2000)
    ]
    blocks = [
        standard_noise_block(0, 7, 1, b, 1, (1,), noise=noise_of(noise), device="cpu").item()
        for b in range(2000)
    ]
    for draws in (first, blocks):
        assert kstest(draws, reference.cdf).pvalue > 1e-4
        assert len(set(draws)) == len(draws)


@pytest.mark.parametrize("noise", ["laplace", "uniform"])
def test_a_part_of_the_inputs_gives_the_same_rows(noise):
    """Shards and ranks certify parts of the inputs: input i's rows depend on i, not on its neighbours."""
    margins = margins_of(noise)[::200]
    xs = halfspace_inputs(margins)
    spec = CertificationSpec(sigma=SIGMA, n0=N0, n=N, alpha=ALPHA, batch_size=5000, noise=noise)
    whole = certify_batch(Halfspace(), xs, range(len(margins)), spec, num_classes=2)
    odd = list(range(1, len(margins), 2))
    part = certify_batch(Halfspace(), xs[odd], odd, spec, num_classes=2)
    np.testing.assert_array_equal(whole.counts[odd], part.counts)
    np.testing.assert_array_equal(whole.radius[odd], part.radius)


@pytest.mark.parametrize("sampling", ["iss", "sequential"])
@pytest.mark.parametrize("noise", ["laplace", "uniform"])
def test_input_specific_and_sequential_sampling_are_sound_with_other_noises(noise, sampling):
    """ISS (AD 0.05) and the sequential sampler plan and stop with the noise's own certificate: on the 4,000
    halfspace inputs, failures (wrong class, or an L1 radius above |x_0|) stay within the binomial limit of α
    (each input fails with probability <= α, independently), and the radii track |x_0| (median ratio > 0.75;
    0.82-0.95 when written). Catches a radius off by the scale (Laplace radii × √2: ~3,600 failures against a
    limit of 269) and the Gaussian radius stated for Laplace noise (~500 failures)."""
    margins = margins_of(noise)
    iss = InputSpecific(decline="ad", max_decline=0.05, k0=50, granularity=10) if sampling == "iss" else None
    spec = CertificationSpec(
        sigma=SIGMA,
        n0=None if iss else N0,
        n=N,
        alpha=ALPHA,
        noise=noise,
        norm="l1",
        sampling=sampling,
        sampler=iss,
    )
    result = certify_batch(Halfspace(), halfspace_inputs(margins), range(len(margins)), spec, num_classes=2)
    truth = (margins > 0).astype(int)
    certified = result.predict != ABSTAIN
    failed = certified & ((result.predict != truth) | (result.radius > np.abs(margins)))
    assert int(failed.sum()) <= binom.ppf(1 - 1e-6, len(margins), ALPHA), int(failed.sum())
    right = certified & (result.predict == truth)
    assert right.mean() > 0.95 and np.median(result.radius[right] / np.abs(margins[right])) > 0.75
    assert result.n.mean() < N  # the samplers stop early on average
