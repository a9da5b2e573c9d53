"""Statistical soundness of CERTIFY, ISS and PREDICT on an analytic classifier, with tests that have power.

Every test compares the number of failures with the exact distribution of that number under a correct
engine (per-input failure probabilities from scipy, their Poisson-binomial law), accepting counts between its
1e-6 and 1 - 1e-6 quantiles. Each test names the plausible bugs it exists to catch, and a companion check
computes, from the same exact formulas, the probability that each bug would still pass (required < 1%).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy.stats import beta, binom, binomtest, norm
from stat_testing import (
    Halfspace,
    acceptance_region,
    certify_failure_probability,
    conditional_failure_probability,
    cp_lower,
    halfspace_inputs,
    iss_boundary_certify_rate,
    miss_probability,
)

from rs_lightning.smoothing import (
    ABSTAIN,
    CertificationSpec,
    InputSpecific,
    certify_batch,
    predict_batch,
)
from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.samplers.iss import iss_table

SIGMA, ALPHA, N0, N = 0.5, 0.05, 64, 1000
SPREAD_INPUTS, BOUNDARY_INPUTS = 5000, 4000
MAX_MISS = 0.01


def spread_margins() -> np.ndarray:
    """|margin| evenly in [σ, 3σ] (pA 0.84 … 0.9987, where a wrong bound shows most), both signs."""
    magnitude = np.linspace(SIGMA, 3 * SIGMA, SPREAD_INPUTS // 2)
    return np.concatenate([magnitude, -magnitude])


def cp_off_by_one(k, n, alpha):
    """Bug: BetaInv(alpha; k + 1, n - k) (the upper bound's parameters)."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where(k >= n, 1.0, beta.ppf(alpha, k + 1, np.maximum(n - k, 1e-300)))


def cp_missing_plus_one(k, n, alpha):
    """Bug: BetaInv(alpha; k, n - k)."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        b = beta.ppf(alpha, np.maximum(k, 1e-300), np.maximum(n - k, 1e-300))
    return np.where(k <= 0, 0.0, np.where(k >= n, 1.0, b))


def wald(k, n, alpha):
    """Bug: the normal-approximation (Wald) bound."""
    p = np.asarray(k, dtype=float) / n
    return np.clip(p - norm.ppf(1 - alpha) * np.sqrt(p * (1 - p) / n), 0.0, 1.0)


def two_sided(k, n, alpha):
    """Bug: alpha split over two tails (sound but loose: halves the failure rate)."""
    return cp_lower(k, n, alpha / 2)


def certify(margins, **spec):
    settings = dict(sigma=SIGMA, n=N, alpha=ALPHA, batch_size=50_000) | spec
    if settings.get("sampling", "cohen") == "cohen":
        settings.setdefault("n0", N0)
    return certify_batch(
        Halfspace(),
        halfspace_inputs(margins),
        range(len(margins)),
        CertificationSpec(**settings),
        num_classes=2,
    )


def failures(result, margins) -> np.ndarray:
    truth = (np.asarray(margins) > 0).astype(int)
    certified = result.predict != ABSTAIN
    wrong_class = certified & (result.predict != truth)
    too_large = certified & (result.predict == truth) & (result.radius > np.abs(margins))
    return wrong_class | too_large


def test_certify_soundness_has_power_against_wrong_bounds():
    """The test below would catch an off-by-one in the Clopper–Pearson parameters, a Wald bound (too many
    failures) and a two-sided alpha (too few), each with probability > 99%."""
    correct = certify_failure_probability(spread_margins(), SIGMA, N0, N, ALPHA)
    low, high = acceptance_region(correct)
    for bug in (cp_off_by_one, cp_missing_plus_one, wald, two_sided):
        buggy = certify_failure_probability(spread_margins(), SIGMA, N0, N, ALPHA, bound=bug)
        assert miss_probability(buggy, low, high) < MAX_MISS, bug.__name__


def test_certify_is_sound_and_tight_on_an_analytic_classifier():
    """Failures (a wrong class, or a radius above the true radius |margin|) of 5,000 inputs lie within the
    exact law of a correct engine. Catches: an off-by-one in the CP parameters, a Wald bound (too many);
    alpha split over two tails (too few). The certificates track the true radius (tightness)."""
    margins = spread_margins()
    result = certify(margins)
    low, high = acceptance_region(certify_failure_probability(margins, SIGMA, N0, N, ALPHA))
    count = int(failures(result, margins).sum())
    assert low <= count <= high, (low, count, high)
    certified = (result.predict != ABSTAIN) & (result.predict == (margins > 0))
    band = certified & (np.abs(margins) < 2 * SIGMA)
    assert np.median(result.radius[band] / np.abs(margins[band])) > 0.85
    # the true class's estimation count is Binomial(n, pA) with the analytic pA = Phi(|margin| / sigma)
    truth = (margins > 0).astype(int)
    pa = norm.cdf(np.abs(margins) / SIGMA)
    z = (result.counts[np.arange(len(margins)), truth] - N * pa) / np.sqrt(N * pa * (1 - pa))
    assert abs(z.mean()) < 5 / np.sqrt(len(margins)) and 0.9 < z.std() < 1.1


def boundary_certify_probability(n: int, alpha: float, select_from_estimation: bool = False) -> float:
    """P(CERTIFY certifies an input whose pA = pB = 1/2): every such certificate is wrong."""
    k = np.arange(n + 1)
    pmf = binom.pmf(k, n, 0.5)
    if select_from_estimation:
        k = np.maximum(k, n - k)  # the bug: the selected class is the estimation counts' top class
    return float(pmf[cp_lower(k, n, alpha) >= 0.5].sum())


def test_certify_at_the_decision_boundary_certifies_at_rate_alpha():
    """4,000 inputs at margin 0 (pA = pB = 1/2): the share certified must follow the exact rate (~alpha).
    Catches: selecting the class from the estimation counts (rate ~2·alpha) and an alpha split over two
    tails (~alpha/2), each with probability > 99% (checked here from the exact rates)."""
    margins = np.zeros(BOUNDARY_INPUTS)
    rate = boundary_certify_probability(N, ALPHA)
    low, high = binom.ppf(1e-6, BOUNDARY_INPUTS, rate), binom.ppf(1 - 1e-6, BOUNDARY_INPUTS, rate)
    for bug_rate in (
        boundary_certify_probability(N, ALPHA, True),
        boundary_certify_probability(N, ALPHA / 2),
    ):
        assert (
            binom.cdf(high, BOUNDARY_INPUTS, bug_rate) - binom.cdf(low - 1, BOUNDARY_INPUTS, bug_rate)
            < MAX_MISS
        )
    count = int((certify(margins).predict != ABSTAIN).sum())
    assert low <= count <= high, (low, count, high)


def iss_margins() -> np.ndarray:
    """|margin| in [0.2σ, 3σ]: pilots spread over small and large sample sizes."""
    magnitude = np.linspace(0.2 * SIGMA, 3 * SIGMA, SPREAD_INPUTS // 2)
    return np.concatenate([magnitude, -magnitude])


ISS = InputSpecific(decline="ad", max_decline=0.05 * SIGMA, k0=50, granularity=10)


def test_iss_default_mode_is_sound_given_its_pilot():
    """ISS (default: fresh estimation draws) on 5,000 inputs: conditionally on each pilot's class and k̂,
    failures follow the exact law of Binomial(k̂, p) counts. Catches a CP bound told n instead of k̂ (far too
    few failures; its miss probability is computed below from the same pilots). Pilot reuse barely moves
    failures far from the boundary: the boundary test below is the one with power against it. Tightness:
    the certificates track the true radius, with k̂ below n on average."""
    margins = iss_margins()
    result = certify(margins, sampling="iss", sampler=ISS)
    assert ((result.n >= 0) & (result.n <= N)).all() and (result.samples == ISS.k0 + result.n).all()
    probabilities = conditional_failure_probability(margins, SIGMA, result.selected, result.n, ALPHA)
    low, high = acceptance_region(probabilities)
    count = int(failures(result, margins).sum())
    assert low <= count <= high, (low, count, high)
    told_n = conditional_failure_probability(margins, SIGMA, result.selected, result.n, ALPHA, bound_n=N)
    assert miss_probability(told_n, low, high) < MAX_MISS
    assert result.n.mean() < 0.75 * N
    certified = (result.predict != ABSTAIN) & (result.predict == (margins > 0))
    band = certified & (np.abs(margins) > SIGMA) & (np.abs(margins) < 2 * SIGMA)
    assert np.median(result.radius[band] / np.abs(margins[band])) > 0.8


def test_iss_at_the_boundary_default_is_sound_and_reusing_the_pilot_is_not():
    """4,000 inputs at margin 0 with a large pilot (k0 = n/2): the default mode certifies at the exact
    conditional rate (~alpha); ``reuse_pilot=true`` (the reference code: pilot counts of the class the pilot
    chose added to the bound) certifies far more often — why it is not the default. Catches, with the
    computed miss probabilities < 1%: pilot counts added to the bound, and a pilot drawn from the
    estimation stream (its draws then enter the bound too; both certify at ~2·alpha here)."""
    margins = np.zeros(BOUNDARY_INPUTS)
    iss = InputSpecific(decline="rd", max_decline=0.05, k0=N // 2, granularity=10)
    psi = iss_table(N, ALPHA, Certificate(), SIGMA, None, iss.decline, iss.max_decline, iss.granularity)
    rate = iss_boundary_certify_rate(N, iss.k0, ALPHA, psi)
    limits = binom.ppf(1e-6, BOUNDARY_INPUTS, rate), binom.ppf(1 - 1e-6, BOUNDARY_INPUTS, rate)
    for bug in ("reuse", "prefix"):
        bug_rate = iss_boundary_certify_rate(N, iss.k0, ALPHA, psi, bug)
        miss = binom.cdf(limits[1], BOUNDARY_INPUTS, bug_rate) - binom.cdf(
            limits[0] - 1, BOUNDARY_INPUTS, bug_rate
        )
        assert miss < MAX_MISS, bug
    result = certify(margins, sampling="iss", sampler=iss)
    assert (result.n > 0).mean() > 0.9  # RD plans large samples near pA = 1/2: the test is not vacuous
    low, high = acceptance_region(
        conditional_failure_probability(margins, SIGMA, result.selected, result.n, ALPHA)
    )
    assert low <= int((result.predict != ABSTAIN).sum()) <= high
    with pytest.warns(UserWarning, match="not established"):
        reused = certify(margins, sampling="iss", sampler=dataclasses.replace(iss, reuse_pilot=True))
    assert int((reused.predict != ABSTAIN).sum()) > high


def boundary_predict_rate(n: int, alpha: float, pvalue=lambda k, n: binomtest(k, n, 0.5).pvalue) -> float:
    """P(PREDICT does not abstain) at pA = pB = 1/2 with n draws of 2 classes (top count max(k, n - k))."""
    k = np.arange(n + 1)
    top = np.maximum(k, n - k)
    rejects = np.array([pvalue(int(t), n) <= alpha for t in top])
    return float(binom.pmf(k, n, 0.5)[rejects].sum())


def test_predict_at_the_decision_boundary_answers_at_rate_alpha():
    """4,000 inputs at pA = pB = 1/2: PREDICT must abstain except at the exact rate (<= alpha). Catches a
    one-sided binomial test (rate ~2·alpha), a test at 2·alpha, and one at alpha/2 (too rarely answers),
    each with probability > 99%; the lower limit also fails an engine that always abstains."""
    n = 500
    rate = boundary_predict_rate(n, ALPHA)
    assert rate <= ALPHA
    low, high = binom.ppf(1e-6, BOUNDARY_INPUTS, rate), binom.ppf(1 - 1e-6, BOUNDARY_INPUTS, rate)
    one_sided = boundary_predict_rate(
        n, ALPHA, lambda k, m: binomtest(k, m, 0.5, alternative="greater").pvalue
    )
    for bug_rate in (one_sided, boundary_predict_rate(n, 2 * ALPHA), boundary_predict_rate(n, ALPHA / 2)):
        assert (
            binom.cdf(high, BOUNDARY_INPUTS, bug_rate) - binom.cdf(low - 1, BOUNDARY_INPUTS, bug_rate)
            < MAX_MISS
        )
    spec = CertificationSpec(sigma=SIGMA, mode="predict", n=n, alpha=ALPHA, batch_size=50_000)
    result = predict_batch(
        Halfspace(), torch.zeros(BOUNDARY_INPUTS, 1, 1, 2), range(BOUNDARY_INPUTS), spec, num_classes=2
    )
    answered = int((result.predict != ABSTAIN).sum())
    assert low <= answered <= high, (low, answered, high)
    np.testing.assert_allclose(
        result.pvalue[:50], [binomtest(int(a), n, 0.5).pvalue for a in result.n_top[:50]], rtol=1e-12
    )


def test_predict_near_the_boundary_is_rarely_wrong_and_far_from_it_answers():
    """pA = Phi(0.05) ~ 0.52 for class 1: wrong answers (class 0) at most at rate alpha; far away, answers."""
    n, count = 500, 2000
    spec = CertificationSpec(sigma=SIGMA, mode="predict", n=n, alpha=ALPHA, batch_size=50_000)
    near = halfspace_inputs(np.full(count, 0.05 * SIGMA))
    wrong = int((predict_batch(Halfspace(), near, range(count), spec, num_classes=2).predict == 0).sum())
    assert wrong <= binom.ppf(1 - 1e-6, count, ALPHA)
    far = predict_batch(Halfspace(), halfspace_inputs(np.full(10, 2 * SIGMA)), range(10), spec, num_classes=2)
    assert (far.predict == 1).all()
