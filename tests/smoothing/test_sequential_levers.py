"""The sequential sampler's levers (``beta``, ``alpha_spending``, ``abstain_after``; ``futility`` in
test_oracle_floor.py): each keeps the certificate sound. Bounds are recomputed with scipy
(``stat_testing.cp_lower``); each test names the bug it exists to catch."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom, norm
from stat_testing import Halfspace, cp_lower, halfspace_inputs

from rs_lightning.smoothing import ABSTAIN, CertificationSpec, Sequential, certify_batch

SIGMA = 0.5
RADII = (0.0, 0.25, 0.5, 0.75)


def spec(alpha=0.001, **settings) -> CertificationSpec:
    settings = {"alpha_spending": "even", "futility": False} | settings  # one lever at a time
    sampler = Sequential(radii=RADII, first_look=256, growth=1.5, **settings)
    return CertificationSpec(sigma=SIGMA, n0=64, n=20_000, alpha=alpha, batch_size=20_000, sampler=sampler)


def test_beta_only_decides_when_to_stop_never_the_certificate():
    """At alpha = 0.001 and beta = 0.2, every row's bound is still CP(nA, n, alpha/K) (scipy). Catches beta
    used in the lower bound (a certificate at level 0.2/K: pA_lower far above CP at alpha/K). Its effect:
    inputs just below a threshold stop earlier than with beta = null (the lower bound's level)."""
    margins = np.r_[np.full(100, 0.5 * SIGMA * 0.97), np.full(100, -0.02)]  # just below r=0.5, and near 1/2
    xs = halfspace_inputs(margins)
    loose, strict = spec(beta=0.2), spec(beta=None)
    fast = certify_batch(Halfspace(), xs, range(len(margins)), loose, num_classes=2)
    slow = certify_batch(Halfspace(), xs, range(len(margins)), strict, num_classes=2)
    looks = len(loose.sampler.schedule(loose))
    for result in (fast, slow):
        np.testing.assert_allclose(result.pa_lower, cp_lower(result.n_a, result.n, 0.001 / looks), rtol=1e-10)
    assert fast.n.mean() < 0.8 * slow.n.mean(), (fast.n.mean(), slow.n.mean())


def test_selection_spending_sums_to_alpha_over_each_inputs_looks():
    """Conditionally on the n0 draws, the levels of an input's looks must sum to at most alpha (the union
    bound). Catches: alpha/2 at the agreeing look added to alpha/K at every look (sum 1.5 alpha), or the
    other looks' share not divided among them. Computed from the schedule, not from the sampler's sum."""
    s = spec(alpha_spending="selection").resolved(2)
    sampler = s.sampler
    own = sampler.schedule(s)
    special = sampler.agreeing_look(s, 2)
    agreeing_looks = np.union1d(own, [special])
    levels = sampler.levels(s, agreeing_looks, np.full(len(agreeing_looks), s.n0), 2)
    assert levels.sum() <= s.alpha * (1 + 1e-12) and levels.sum() > 0.999 * s.alpha
    assert levels[agreeing_looks == special][0] == s.alpha / 2  # half where it is expected to stop
    others = sampler.levels(s, own, np.full(len(own), s.n0 - 1), 2)  # n0 draws not all agreeing
    np.testing.assert_allclose(others, s.alpha / len(own))
    # the all-agreeing estimate first passes the top threshold at alpha/2 at that look (scipy)
    top = norm.cdf(RADII[-1] / SIGMA)
    assert (
        cp_lower(special, special, s.alpha / 2) >= top > cp_lower(special - 256, special - 256, s.alpha / 2)
    )


def test_selection_spending_is_sound_for_inputs_whose_n0_draws_agree():
    """4,000 inputs with pA just below the top threshold Φ(0.75/σ) whose selection draws all agree: every
    certificate at radius >= 0.75 is wrong; their share must stay within the binomial limit of alpha. The
    rule is simulated through the real ``estimate`` with n0 fixed (the selection stream is independent of
    the estimation draws, so conditioning on it is exact). Catches agreeing inputs bounded at alpha at every
    look (a split that does not sum to alpha), whose failure rate is simulated here and fails the same limit
    with probability > 99%. (alpha at the agreeing look alone, 1.5 alpha in all, moves the failure rate too
    little near one threshold for this size; the exact sum test above catches it.)"""
    alpha = 0.05
    s = spec(alpha=alpha, alpha_spending="selection").resolved(2)
    p = np.full(4000, norm.cdf(RADII[-1] / SIGMA) - 1e-4)
    rng = np.random.default_rng(3)
    top = norm.cdf(RADII[-1] / SIGMA)

    class Overspent(Sequential):  # alpha at every look of an agreeing input, as if the split were free
        def levels(self, spec, n, n_a0, dim=None):
            out = super().levels(spec, n, n_a0, dim)
            return np.where(np.asarray(n_a0) == spec.n0, spec.alpha, out)

    def wrong(sampler, count):
        pp = np.resize(p, count)
        n_a0 = np.full(count, s.n0)
        n_a, n = sampler.estimate(s, lambda o, st, sp: rng.binomial(sp - st, pp[o]), n_a0, 2)
        return int((cp_lower(n_a, n, sampler.levels(s, n, n_a0, 2)) >= top).sum())

    high = binom.ppf(1 - 1e-6, len(p), alpha)
    count = wrong(s.sampler, len(p))
    assert count <= high, (count, high)
    fields = {f: getattr(s.sampler, f) for f in ("radii", "first_look", "growth", "beta", "alpha_spending")}
    rate = wrong(Overspent(**fields), 40_000) / 40_000
    assert binom.cdf(high, len(p), rate) < 0.01, rate


def test_abstain_after_abstains_and_never_certifies():
    """Inputs at pA = 1/2 run to the cap without a budget; with abstain_after = 1024 they stop by the first
    look past it and abstain. Catches a budget that certifies at the stop instead of abstaining (at pA = 1/2
    every certificate is wrong: the share certified must stay within the binomial limit of alpha)."""
    margins = np.zeros(2000)
    s = spec(alpha=0.05, abstain_after=1024)
    result = certify_batch(Halfspace(), halfspace_inputs(margins), range(2000), s, num_classes=2)
    first_past = min(n for n in s.sampler.schedule(s) if n >= 1024)
    assert (result.n <= first_past).all()
    assert (
        result.predict[cp_lower(result.n_a, result.n, 0.05 / len(s.sampler.schedule(s))) < 0.5] == ABSTAIN
    ).all()
    assert int((result.predict != ABSTAIN).sum()) <= binom.ppf(1 - 1e-6, 2000, 0.05)
