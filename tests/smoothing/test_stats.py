"""Clopper–Pearson bounds, radii and PREDICT's test against scipy/statsmodels and closed forms."""

import numpy as np
import pytest
from scipy.stats import beta, binomtest, norm
from statsmodels.stats.proportion import proportion_confint

from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.stats import (
    clopper_pearson_interval,
    clopper_pearson_lower,
    top_two_pvalue,
)

L2 = Certificate()


@pytest.mark.parametrize("n", [1, 10, 100, 1000, 100_000])
@pytest.mark.parametrize("alpha", [0.001, 0.01, 0.05])
def test_lower_bound_matches_statsmodels_including_k0_and_kn(n, alpha):
    ks = np.unique(np.r_[0, 1, np.linspace(0, n, 23).astype(int), n - 1, n].clip(0, n))
    ours = clopper_pearson_lower(ks, n, alpha)
    # Cohen et al.'s code: the lower end of statsmodels' two-sided interval at level 2*alpha.
    reference = np.array([proportion_confint(k, n, alpha=2 * alpha, method="beta")[0] for k in ks])
    np.testing.assert_allclose(ours, np.nan_to_num(reference), rtol=1e-9, atol=1e-12)
    assert ours[0] == 0.0
    assert ours[-1] == pytest.approx(alpha ** (1 / n), rel=1e-12)  # k = n: exactly alpha^(1/n)


def test_two_sided_interval_matches_statsmodels():
    for k, n in [(0, 50), (3, 50), (25, 50), (50, 50), (9_990, 10_000)]:
        low, high = clopper_pearson_interval(k, n, 0.01)
        ref_low, ref_high = proportion_confint(k, n, alpha=0.01, method="beta")
        assert low == pytest.approx(np.nan_to_num(ref_low), abs=1e-12)
        assert high == pytest.approx(np.nan_to_num(ref_high, nan=1.0), abs=1e-12)


def test_radius_formula_and_abstention_threshold():
    pa = np.array([0.0, 0.3, 0.4999, 0.5, 0.6, 0.9, 0.999])
    radius = L2.radius(pa, sigma=0.5)
    expected = np.where(pa < 0.5, 0.0, 0.5 * norm.ppf(pa))
    np.testing.assert_allclose(radius, expected, rtol=1e-12)
    assert radius[3] == 0.0  # Phi^-1(1/2) = 0


@pytest.mark.parametrize(("n", "factor"), [(100_000, 3.811), (10_000, 3.199), (1_000, 2.463), (100, 1.500)])
def test_radius_cap_closed_form(n, factor):
    # sigma * Phi^-1(alpha^(1/n)) at alpha = 0.001 (the constant classifier's radius, Sun et al. 2025, Thm 1).
    sigma = 0.25
    assert L2.max_radius(sigma, n, 0.001) == pytest.approx(sigma * norm.ppf(0.001 ** (1 / n)))
    assert L2.max_radius(1.0, n, 0.001) == pytest.approx(factor, abs=5e-4)
    assert L2.radius(clopper_pearson_lower(n, n, 0.001), sigma) == pytest.approx(
        L2.max_radius(sigma, n, 0.001), rel=1e-12
    )


def test_top_two_pvalue_is_scipys_two_sided_binomtest():
    for top, second in [(0, 0), (5, 5), (60, 40), (990, 10), (51, 49)]:
        expected = 1.0 if top + second == 0 else binomtest(top, top + second, 0.5).pvalue
        assert top_two_pvalue(top, second) == pytest.approx(expected)


def test_lower_bound_is_beta_quantile():
    assert clopper_pearson_lower(7, 20, 0.05) == pytest.approx(beta.ppf(0.05, 7, 14))
