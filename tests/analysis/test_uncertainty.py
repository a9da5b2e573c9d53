"""Bands and paired verdicts: statistical tests with power, each naming the bug it catches.

Populations with a known p_A distribution (point masses at 1 and at a concentrated value, Beta components, a
share of wrong inputs, like real models) are sampled as certify.py would: n0 = 100 selection draws pick the
class (two classes), n estimation draws count it, Clopper–Pearson at α = 0.001 decides abstention.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta as beta_dist
from scipy.stats import binom, norm

from rs_lightning.analysis.uncertainty import (
    Counts,
    acr_ci,
    certified_accuracy_bands,
    check_beta,
    dkw_epsilon,
    pa_curve_band,
    paired_acr_ci,
    paired_certified_accuracy,
    paired_pa_curves,
)
from rs_lightning.validation import ConfigError

BETA, ALPHA, SIGMA = 0.05, 0.001, 0.5
GRID = np.round(np.linspace(0.5, 1.0, 101), 3)
LIMIT = 1e-6


def draw_pa(m: int, rng, shift: float = 0.0) -> np.ndarray:
    """True-label p_A: 35% at 1, 25% concentrated near 0.90 (Beta(900, 100)), 25% Beta(6, 2), 15% wrong
    (uniform on [0, 0.45]); ``shift`` lowers the non-certain part."""
    kind = rng.choice(4, size=m, p=[0.35, 0.25, 0.25, 0.15])
    p = np.select(
        [kind == 0, kind == 1, kind == 2],
        [np.ones(m), rng.beta(900, 100, m), rng.beta(6, 2, m)],
        rng.uniform(0, 0.45, m),
    )
    return np.where(kind == 0, 1.0, np.clip(p - shift, 0.0, 1.0))


def true_curve(x: np.ndarray, shift: float = 0.0) -> np.ndarray:
    """P(p_A >= x) of :func:`draw_pa`, for x in [0.5, 1]."""
    x = np.asarray(x, dtype=float)
    at_one = 0.35 * np.ones_like(x)
    return at_one + 0.25 * beta_dist.sf(x + shift, 900, 100) + 0.25 * beta_dist.sf(x + shift, 6, 2)


def certify(p: np.ndarray, n: int, rng, n0: int = 100) -> Counts:
    """Rows as CERTIFY writes them for two classes: class from n0 draws, n_A of it among n fresh ones."""
    m = p.size
    selected_true = rng.binomial(n0, p) > n0 // 2
    q = np.where(selected_true, p, 1 - p)  # probability of the selected class
    n_a = rng.binomial(n, q)
    lower = beta_dist.ppf(ALPHA, np.maximum(n_a, 1e-300), n - n_a + 1)
    certified = (n_a > 0) & (lower >= 0.5)
    radius = np.where(certified, SIGMA * norm.ppf(np.clip(lower, 0.5, 1.0)), 0.0)
    predict = np.where(certified, np.where(selected_true, 1, 0), -1)
    rows = {
        "idx": np.arange(m),
        "nA": n_a,
        "n": np.full(m, n),
        "correct": (predict == 1).astype(int),
        "predict": predict,
        "radius": radius,
    }
    return Counts.from_rows(rows)


def dkw_only_band(counts: Counts, beta: float):
    """Bug: a band around the p̂ curve that ignores the Monte-Carlo error of each p̂_A."""
    point = (counts.pa[None, :] >= GRID[:, None] - 1e-12).mean(axis=1)
    eps = dkw_epsilon(counts.size, beta)
    return point - eps, point + eps


def pointwise_band(counts: Counts, beta: float):
    """Bug: the band with its input term made pointwise — a binomial interval at each x (level beta/2, as the
    DKW term it replaces) — and called simultaneous; the Monte-Carlo term is kept as in the real band."""
    band = pa_curve_band(counts, beta, GRID)
    m, eps = counts.size, band.parts["dkw"]
    mc_lower, mc_upper = band.lower + eps, band.upper - eps  # the band without its DKW term
    point = band.point
    half = norm.ppf(1 - beta / 4) * np.sqrt(np.maximum(point * (1 - point), 1.0 / m) / m)
    return mc_lower - half, mc_upper + half


MUTANT_FAILS_AT = {"dkw_only": (2000, 1000), "pointwise": (200, 100_000)}
"""Where each bug must fail the coverage test: ignoring the Monte-Carlo error shows at n = 1,000 with many
inputs (the p̂ curve is biased where p_A is concentrated); a pointwise band misses somewhere on the grid in
more than β of the replicates when the input term dominates (M = 200, n = 100,000)."""


@pytest.mark.parametrize(("m", "n"), [(200, 1000), (200, 100_000), (2000, 1000), (2000, 100_000)])
def test_the_band_covers_the_population_curve_everywhere(m, n):
    """1,000 replicates: the simultaneous band must cover the true curve at every x in at least (1 − β) of
    them — at most β·1,000 = 50 misses, as the guarantee says (the band is conservative, a union of two
    bounds: it misses a few times in 1,000). The same replicates must fail a band that ignores the
    Monte-Carlo error of p̂_A and a pointwise band called simultaneous where each shows
    (:data:`MUTANT_FAILS_AT`)."""
    rng = np.random.default_rng(m + n)
    truth = true_curve(GRID)
    replicates = 1000
    misses = {"band": 0, "dkw_only": 0, "pointwise": 0}
    for _ in range(replicates):
        counts = certify(draw_pa(m, rng), n, rng)
        band = pa_curve_band(counts, BETA, GRID)
        misses["band"] += int(((truth < band.lower - 1e-12) | (truth > band.upper + 1e-12)).any())
        for bug, make in (("dkw_only", dkw_only_band), ("pointwise", pointwise_band)):
            if MUTANT_FAILS_AT[bug] == (m, n):  # only where it is asserted (each costs a band per replicate)
                lo, hi = make(counts, BETA)
                misses[bug] += int(((truth < lo - 1e-12) | (truth > hi + 1e-12)).any())
    assert misses["band"] <= BETA * replicates, misses
    for bug, where in MUTANT_FAILS_AT.items():
        if (m, n) == where:
            assert misses[bug] > BETA * replicates, misses


def test_certified_accuracy_bands_cover_per_radius_and_simultaneously():
    """Certified accuracy of the procedure at each radius (computed from a 400,000-input population) is
    covered per radius by the Clopper–Pearson intervals and at all radii by the DKW band, in >= 1 − β of 500
    replicates of M = 500 inputs."""
    rng = np.random.default_rng(3)
    radii = np.array([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5])
    population = certify(draw_pa(400_000, rng), 10_000, rng)
    truth = (population.certified_radius[:, None] >= radii[None, :]).mean(axis=0)
    miss_point, miss_sim = np.zeros(radii.size), 0
    for _ in range(500):
        pointwise, simultaneous = certified_accuracy_bands(
            certify(draw_pa(500, rng), 10_000, rng), radii, BETA
        )
        miss_point += (truth < pointwise.lower) | (truth > pointwise.upper)
        miss_sim += int(((truth < simultaneous.lower) | (truth > simultaneous.upper)).any())
    high = binom.ppf(1 - LIMIT, 500, BETA)
    assert (miss_point <= high).all() and miss_sim <= high, (miss_point, miss_sim)


def test_paired_verdicts_resolve_a_shift_and_rarely_invent_one():
    """Power: a population whose non-certain p_A is 0.03 lower (paired: the same inputs, one model a bit
    worse) is resolved "A>=B" in >= 80% of 100 replicates at M = 2,000. False dominance: two identical
    models (the same p_A per input, independent noise) are called anything but "unresolved" in at most β of
    300 replicates (15; the verdict is conservative: none in 300 when this was written). Catches a band
    without the bootstrap term (false dominance) or an unpaired one (no power)."""
    rng = np.random.default_rng(4)
    resolved = 0
    for _ in range(100):
        p = draw_pa(2000, rng)
        shifted = np.where(p < 1.0, np.clip(p - 0.03, 0, 1), 1.0)
        result = paired_pa_curves(
            certify(p, 10_000, rng), certify(shifted, 10_000, rng), BETA, GRID, resamples=400
        )
        resolved += result["verdict"] == "A>=B"
    assert resolved >= 80, resolved
    false = 0
    for _ in range(300):
        p = draw_pa(2000, rng)
        result = paired_pa_curves(certify(p, 10_000, rng), certify(p, 10_000, rng), BETA, GRID, resamples=400)
        false += result["verdict"] != "unresolved"
    assert false <= BETA * 300, false


def test_the_paired_bootstrap_matches_its_closed_form():
    """A constructed case: per-input differences of 1 on k inputs and 0 elsewhere. The bootstrap mean is then
    exactly Binomial(M, k/M)/M, so the percentile CI must match scipy's quantiles to one step 1/M (catches
    resampling without replacement, a CI at the wrong level, or resampling the two runs independently)."""
    m, k = 400, 120
    radius_a = np.r_[np.ones(k), np.zeros(m - k)]
    rows_a = {
        "idx": np.arange(m),
        "nA": np.full(m, 100),
        "n": np.full(m, 100),
        "correct": np.ones(m, int),
        "predict": np.ones(m, int),
        "radius": radius_a,
    }
    rows_b = rows_a | {"radius": np.zeros(m)}
    low, high = paired_acr_ci(Counts.from_rows(rows_a), Counts.from_rows(rows_b), BETA, names=("a", "b"))
    exact = binom.ppf([BETA / 2, 1 - BETA / 2], m, k / m) / m
    assert abs(low - exact[0]) <= 1.5 / m and abs(high - exact[1]) <= 1.5 / m, (low, high, exact)
    # order and the other runs do not matter: the pair's generator is seeded by the pair
    flipped = paired_acr_ci(Counts.from_rows(rows_b), Counts.from_rows(rows_a), BETA, names=("b", "a"))
    assert flipped == pytest.approx((-high, -low))
    one, two = acr_ci(Counts.from_rows(rows_a), BETA, "x"), acr_ci(Counts.from_rows(rows_a), BETA, "x")
    assert one == two


def test_paired_certified_accuracy_verdicts_and_intervals():
    """B certifies every input A certifies and 10% more at the larger radii: "B>=A", with pointwise CIs of
    the difference inside the simultaneous band."""
    rng = np.random.default_rng(5)
    m = 2000
    a = certify(draw_pa(m, rng), 10_000, rng)
    better = Counts(**{**a.__dict__, "radius": np.where(rng.random(m) < 0.1, a.radius + 0.3, a.radius)})
    result = paired_certified_accuracy(a, better, [0.0, 0.25, 0.5, 0.75, 1.0], BETA, resamples=500)
    assert result["verdict"] == "B>=A" and result["b_above_at"]
    assert (result["pointwise"].lower >= result["band"].lower - 1e-12).all()


def test_bad_beta_and_unpaired_runs_are_refused():
    for bad in (0, 1, -0.1, float("nan"), "x"):
        with pytest.raises(ConfigError, match="beta"):
            check_beta(bad)
    rng = np.random.default_rng(6)
    a = certify(draw_pa(50, rng), 1000, rng)
    b = Counts(**{**a.__dict__, "idx": a.idx + 1})
    with pytest.raises(ConfigError, match=r"49 shared.*certified on the same inputs"):
        paired_pa_curves(a, b)
