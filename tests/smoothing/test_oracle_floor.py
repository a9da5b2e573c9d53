"""The sequential sampler's ``futility`` lever and the oracle floor every sequential run reports.

Bounds and divergences are recomputed with scipy (``scipy.stats.beta``, ``scipy.stats.entropy``); each test
names the bug it exists to catch. The rule is simulated through the real ``Sequential.estimate`` on binomial
draws with the n0 selection draws fixed (their stream is independent of the estimation draws).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta, binom, entropy, norm
from stat_testing import cp_lower

from rs_lightning.smoothing import CertificationSpec, Sequential
from rs_lightning.smoothing.stats import bernoulli_kl, clopper_pearson_reach, oracle_draws

SIGMA = 0.5
RADII = (0.0, 0.25, 0.5, 0.75)
FIELDS = ("radii", "first_look", "growth", "beta", "alpha_spending", "abstain_after", "futility")


def spec(n=100_000, alpha=0.001, **settings) -> CertificationSpec:
    settings = {"alpha_spending": "even"} | settings
    sampler = Sequential(radii=RADII, **settings)
    return CertificationSpec(sigma=SIGMA, n0=100, n=n, alpha=alpha, sampler=sampler).resolved(2)


def run(s: CertificationSpec, p, seed=0):
    """(nA, n, pA_lower) of each input at its stop, pA_lower recomputed with scipy at the rule's level."""
    rng = np.random.default_rng(seed)
    p = np.asarray(p, dtype=float)
    n_a0 = np.full(len(p), s.n0)
    n_a, n = s.sampler.estimate(s, lambda o, start, stop: rng.binomial(stop - start, p[o]), n_a0, 2)
    return n_a, n, cp_lower(n_a, n, s.sampler.levels(s, n, n_a0, 2))


@pytest.mark.parametrize(
    ("t", "n", "alpha"), [(0.99865, 100_000, 0.001 / 13), (0.8413, 20_000, 1e-4), (0.6, 300, 0.05)]
)
def test_reach_is_the_share_whose_clopper_pearson_bound_first_passes_t(t, n, alpha):
    """The lower bound (scipy) at the count just above the reach passes t, just below does not. Catches the
    reach solved for the upper bound, or at n + 1 / n - 1 draws (an off-by-one moves it a whole count)."""
    r = clopper_pearson_reach(t, n, alpha)
    above, below = math.ceil(r * n), math.floor(r * n - 1e-9)
    assert beta.ppf(alpha, above, n - above + 1) >= t - 1e-12 > beta.ppf(alpha, below, n - below + 1)
    assert clopper_pearson_reach(0.9999, 100, 0.001) == 1.0  # 100 of 100 draws never reach it


def test_kl_and_wald_bound_match_scipy_and_the_all_agreeing_count():
    """KL against scipy's entropy; an input whose draws all agree needs the smallest m with
    BetaInv(α; m, 1) >= t, i.e. m = ln(1/α)/ln(1/t) (scipy). Catches KL(t‖p) for KL(p‖t) (infinite at p = 1),
    log2 for ln, and the two terms added instead of maximised."""
    p, q = np.array([0.9, 0.51, 0.999]), np.array([0.8, 0.5, 0.99])
    want = [entropy([a, 1 - a], [b, 1 - b]) for a, b in zip(p, q, strict=True)]
    np.testing.assert_allclose(bernoulli_kl(p, q), want, rtol=1e-12)
    for t, alpha in ((0.99865, 0.001), (0.9332, 0.05)):
        m = oracle_draws(1.0, t, np.nan, alpha, 0.05, 10**9)
        smallest = next(k for k in range(1, 100_000) if beta.ppf(alpha, k, 1) >= t)
        assert math.ceil(m - 1e-9) == smallest
    both = oracle_draws(0.9, 0.8, 0.95, 0.001, 0.05, 10**9)
    terms = math.log(1000) / entropy([0.9, 0.1], [0.8, 0.2]), math.log(20) / entropy([0.9, 0.1], [0.95, 0.05])
    assert both == pytest.approx(max(terms))
    assert oracle_draws(0.8, 0.8, 0.95, 0.001, 0.05, 5000) == 5000  # at a threshold: the cap


def test_floor_of_a_row_is_walds_bound_for_its_own_bucket_without_futility():
    """Without futility only p̂'s own bucket is accepted: the floor is Wald's bound between the thresholds on
    either side of p̂ (Φ(r/σ), scipy), at α and β. Catches the bucket located off by one (the bound to the
    wrong pair of thresholds is many times larger or smaller) and β replaced by α in the upper term."""
    s = spec(futility=False)
    t = norm.cdf(np.asarray(RADII) / SIGMA)
    n_a, n = np.array([99_000, 85_000, 30_000, 0]), np.array([100_000, 100_000, 100_000, 0])
    floor = s.sampler.oracle_floor(s, n_a, n, 2)
    kl = lambda a, b: entropy([a, 1 - a], [b, 1 - b])  # noqa: E731
    top = math.log(1 / s.alpha) / kl(0.99, t[3])
    middle = max(math.log(1 / s.alpha) / kl(0.85, t[2]), math.log(1 / 0.05) / kl(0.85, t[3]))
    below = math.log(1 / 0.05) / kl(0.3, 0.5)  # abstains: only "p below 1/2" must be decided
    np.testing.assert_allclose(floor, [top, middle, below, 0.0], rtol=1e-9)


def test_futility_keeps_the_certificate_clopper_pearson_and_sound():
    """4,000 inputs with pA just below the threshold of r = 0.5 at α = 0.01, β = 0.2: every certificate at
    r >= 0.5 is wrong and their share must stay within the binomial limit of α. Catches futility's stopping
    bound leaking into the certificate (the lower bound taken at β/K, the level futility stops at), whose
    failure rate is simulated here and fails the same limit with probability > 99%."""
    s = spec(n=20_000, alpha=0.01, futility=True, beta=0.2)
    t = norm.cdf(0.5 / SIGMA)
    p = np.full(4000, t - 1e-4)
    high = binom.ppf(1 - 1e-6, len(p), s.alpha)
    assert int((run(s, p)[2] >= t).sum()) <= high

    class Leaky(Sequential):  # the certificate at the stopping bound's level
        def levels(self, spec, n, n_a0, dim=None):
            return np.full(np.shape(n), self.beta / len(self.schedule(spec)))

    leaky = spec(n=20_000, alpha=0.01, futility=True, beta=0.2)
    leaky = CertificationSpec(
        sigma=SIGMA,
        n0=100,
        n=20_000,
        alpha=0.01,
        sampler=Leaky(**{f: getattr(leaky.sampler, f) for f in FIELDS}),
    ).resolved(2)
    rate = (run(leaky, np.resize(p, 20_000), seed=5)[2] >= t).mean()
    assert binom.cdf(high, len(p), rate) < 0.01, rate


def test_futility_stops_inputs_just_below_a_threshold_early_and_keeps_those_above_its_reach():
    """p = t - 0.001 (t = Φ(0.5/σ)) is ruled out only after ~900k draws, so without futility it runs to
    n = 100,000; with it, its upper bound drops below the reach r (~t + 0.0045) after ~30k: at least 2×
    fewer draws, the same bucket. Inputs at p = r + 0.003 must still reach t at the same rate as without
    futility (~97%). Catches the reach computed at too few draws (at n/10 it is ~t + 0.014 > p: those inputs
    stop early at the bucket below: the rate drops to about a third), or at the upper bound's level."""
    on, off = spec(futility=True), spec(futility=False)
    t = norm.cdf(0.5 / SIGMA)
    r = clopper_pearson_reach(t, on.n, on.sampler.plan_level(on))
    assert 0.003 < r - t < 0.006
    below, above = np.full(300, t - 0.001), np.full(300, r + 0.003)
    _, n_on, lower_on = run(on, below, seed=1)
    _, n_off, lower_off = run(off, below, seed=2)
    assert n_on.mean() < 0.5 * n_off.mean(), (n_on.mean(), n_off.mean())
    first = norm.cdf(0.25 / SIGMA)
    assert (lower_on >= first).mean() > 0.99 and (lower_off >= first).mean() > 0.99
    reached_on = (run(on, above, seed=3)[2] >= t).mean()
    reached_off = (run(off, above, seed=4)[2] >= t).mean()
    assert reached_off > 0.85 and reached_on > reached_off - 4 * math.sqrt(0.25 / 300), (
        reached_on,
        reached_off,
    )
