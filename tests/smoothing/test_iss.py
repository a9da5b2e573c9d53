"""Input-specific sampling's sample-size table ψ (Chen et al., AAAI 2022; roy-ch/Input-Specific-Certification
``certify_iss.py`` ``generate_iss``)."""

import numpy as np
import pytest
from scipy.stats import beta, norm

from rs_lightning.analysis.metrics import ECDF_GRID
from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.samplers.iss import (
    iss_table,
    pilot_sample_sizes,
    planning_radius,
    sample_sizes_for_interval,
)
from rs_lightning.smoothing.stats import PA_GRID

K, ALPHA, GRANULARITY = 100_000, 0.001, 200
GAUSSIAN = Certificate()
REFERENCE_P = (0.51, 0.6, 0.8, 0.9, 0.99, 0.999, 1.0)


def at(psi, p):
    return [int(psi[int(round((x - 0.5) * 1000))]) for x in p]


@pytest.mark.parametrize(
    ("decline", "c", "expected"),
    [  # generate_iss's rule computed independently with scipy (K = 1e5, b = 200, alpha = 0.001, sigma = 1)
        ("ad", 0.05, [0, 4_000, 4_800, 6_400, 17_600, 40_400, 81_800]),
        ("ad", 0.01, [30_400, 30_800, 34_000, 39_200, 61_400, 80_800, 96_200]),
        ("rd", 0.01, [98_000, 70_200, 39_600, 32_400, 37_600, 55_600, 85_800]),
    ],
)
def test_psi_matches_the_reference_values(decline, c, expected):
    assert at(iss_table(K, ALPHA, GAUSSIAN, 1.0, None, decline, c, GRANULARITY), REFERENCE_P) == expected


def test_planning_radius_is_the_clopper_pearson_bound_at_the_expected_count():
    """R(k, p) = sigma * Phi^-1(BetaInv(alpha; k p, k - k p + 1)), computed here with scipy directly."""
    k, p = 12_345, 0.987
    expected = 0.5 * norm.ppf(beta.ppf(ALPHA, k * p, k - k * p + 1))
    assert planning_radius(k, p, ALPHA, GAUSSIAN, 0.5, None) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("sigma", "c"), [(1.0, 0.05), (0.5, 0.05), (0.5, 0.1), (0.25, 0.01)])
def test_ad_psi_is_non_decreasing_in_p(sigma, c):
    psi = iss_table(K, ALPHA, GAUSSIAN, sigma, None, "ad", c, GRANULARITY)
    assert (np.diff(psi) >= 0).all() and psi[-1] <= K and (psi % GRANULARITY == 0).all()


@pytest.mark.parametrize("c", [0.01, 0.05])
def test_rd_psi_is_u_shaped(c):
    """0 where the full-budget radius is <= 0, then non-increasing to a minimum, then non-decreasing."""
    psi = iss_table(K, ALPHA, GAUSSIAN, 1.0, None, "rd", c, GRANULARITY)
    positive = np.flatnonzero(psi > 0)
    first, low = positive[0], positive[np.argmin(psi[positive])]
    assert (psi[:first] == 0).all() and (
        planning_radius(K, PA_GRID[:first], ALPHA, GAUSSIAN, 1.0, None) <= 0
    ).all()
    assert (np.diff(psi[first : low + 1]) <= 0).all() and (np.diff(psi[low:]) >= 0).all()
    assert psi[first] > 0.9 * K and psi[-1] > psi[low] > 0 and 0.6 < PA_GRID[low] < 0.99


@pytest.mark.parametrize(
    ("decline", "c", "sigma"), [("ad", 0.05, 0.5), ("ad", 0.1, 0.25), ("rd", 0.01, 1.0), ("rd", 0.05, 0.5)]
)
def test_decline_stays_within_max_decline_on_synthetic_pa(decline, c, sigma):
    """For any pA whose pilot interval contains it, the planned radius with k̂ draws is at most c (AD) or
    c·R (RD) below the full-budget one, at the expected counts (ψ is a plan; realised counts vary). Catches
    a ψ searched from the previous grid point for RD, a wrong bracket, or k̂ from one endpoint only."""
    rng = np.random.default_rng(0)
    psi = iss_table(K, ALPHA, GAUSSIAN, sigma, None, decline, c, GRANULARITY)
    p = np.concatenate([rng.uniform(0.5, 1.0, 4000), PA_GRID])
    width = rng.uniform(0, 0.05, p.size)
    p_low, p_up = np.clip(p - width * rng.uniform(size=p.size), 0.4, 1), np.clip(p + width, 0, 1)
    k_hat = sample_sizes_for_interval(psi, p_low, p_up)
    full = np.maximum(planning_radius(K, p, ALPHA, GAUSSIAN, sigma, None), 0.0)
    planned = np.where(
        k_hat > 0,
        np.maximum(planning_radius(np.maximum(k_hat, 1), p, ALPHA, GAUSSIAN, sigma, None), 0.0),
        0.0,
    )
    allowed = c if decline == "ad" else c * full
    assert (full - planned <= allowed + 1e-5 * sigma).all()
    assert (k_hat <= K).all() and (k_hat < K).mean() > 0.5  # ISS does save samples here


def test_pilot_interval_is_two_sided_at_alpha():
    """k̂ comes from the pilot's two-sided CP interval (alpha/2 per tail): a pilot of 990/1000 brackets
    p in [BetaInv(alpha/2; 990, 11), BetaInv(1 - alpha/2; 991, 10)]."""
    psi = iss_table(K, ALPHA, GAUSSIAN, 1.0, None, "ad", 0.05, GRANULARITY)
    low, high = beta.ppf(ALPHA / 2, 990, 11), beta.ppf(1 - ALPHA / 2, 991, 10)
    expected = psi[
        int(np.floor((low - 0.5) * 1000 + 1e-9)) : int(np.ceil((high - 0.5) * 1000 - 1e-9)) + 1
    ].max()
    assert pilot_sample_sizes([990], 1000, psi, ALPHA).tolist() == [expected]


def test_table_is_cached_and_read_only():
    a = iss_table(K, ALPHA, GAUSSIAN, 1.0, None, "ad", 0.05, GRANULARITY)
    assert iss_table(K, ALPHA, GAUSSIAN, 1.0, None, "ad", 0.05, GRANULARITY) is a
    with pytest.raises(ValueError):
        a[0] = 1


def test_one_p_grid_serves_psi_and_the_pa_ecdf():
    """ψ's grid and the pA ECDF's are one array of the core (0.500, 0.501, …, 1.000), not two copies."""
    assert ECDF_GRID is PA_GRID and PA_GRID[0] == 0.5 and PA_GRID[-1] == 1.0 and len(PA_GRID) == 501
