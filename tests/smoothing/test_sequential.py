"""Sequential CERTIFY: a confidence sequence over a geometric schedule of looks, stopping once
the input's bucket on a radius grid is decided. Statistical tests with power; each names the bug it catches.

Bounds are recomputed with scipy (``stat_testing.cp_lower``), never with the engine's own code, and the
probabilities of the bugs passing are computed (simulated where no closed form exists) in the tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import beta, binom, norm
from stat_testing import Halfspace, cp_lower, halfspace_inputs

from rs_lightning.smoothing import ABSTAIN, CertificationSpec, Sequential, certify_batch
from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.stats import clopper_pearson_lower
from rs_lightning.validation import ConfigError

SIGMA, ALPHA = 0.5, 0.05
RADII = (0.0, 0.25, 0.5, 0.75)
LIMIT = 1e-6  # acceptance quantiles of the exact binomial law


def spec(**overrides) -> CertificationSpec:
    values = dict(sigma=SIGMA, n=20_000, alpha=ALPHA, batch_size=20_000, sampling="sequential")
    values["sampler"] = Sequential(
        radii=RADII, first_look=256, growth=1.5, alpha_spending="even", futility=False
    )
    return CertificationSpec(**(values | overrides))


class Peeking(Sequential):
    """The peeking bug: a fixed-n bound at level alpha at every look."""

    def levels(self, spec, n, n_a0, dim=None):
        return np.full(np.shape(n), spec.alpha)


def simulate(
    p: np.ndarray, s: CertificationSpec, rng, sampler=None, n_a0=None
) -> tuple[np.ndarray, np.ndarray]:
    """The real stopping rule (:meth:`Sequential.estimate`) on Binomial draws of known p: ``(n_a, n)``."""
    sampler = s.sampler if sampler is None else sampler
    n_a0 = np.zeros(len(p), dtype=np.int64) if n_a0 is None else n_a0
    return sampler.estimate(s, lambda open_, starts, stop: rng.binomial(stop - starts, p[open_]), n_a0, None)


# ---------------------------------------------------------------- the schedule


def test_the_schedule_is_geometric_in_whole_blocks_and_ends_at_n():
    default = CertificationSpec(sigma=0.25, n=100_000, sampling="sequential")
    looks = default.sampler.schedule(default)
    assert looks[0] == 1024 and looks[-1] == 100_000 and (np.diff(looks) > 0).all()
    assert (looks[:-1] % 256 == 0).all()  # each look continues the per-input noise stream at a block
    ratios = looks[1:-1] / looks[:-2]
    assert (ratios >= 1.5).all() and (ratios < 1.5 + 256 / looks[:-2]).all()
    assert default.bound_alpha == pytest.approx(0.001 / len(looks))
    assert len(looks) == 12  # 93,440 would be less than half a step short of n: n is looked at instead


# ---------------------------------------------------------------- the confidence sequence


@pytest.mark.parametrize("p", [0.6, 0.9, 0.99, 0.999])
def test_the_confidence_sequence_covers_under_continuous_monitoring(p):
    """Brute force: 20,000 paths watched at every look of the schedule (no stopping). The share of paths
    whose lower bound exceeds p at *some* look must stay within the binomial limit of alpha (the union
    bound makes it at most alpha), and likewise the upper bound below p. Catches: a bound at level alpha at
    every look (peeking), whose crossing rate is computed here from 200,000 paths and must fail the same
    limit with probability > 99%; and the bound's parameters of the upper side used for the lower."""
    s = spec(n=10_000)
    looks, level = s.sampler.schedule(s), s.bound_alpha
    rng = np.random.default_rng(int(p * 1000))

    def crossing_rate(paths: int, at: float, side: str) -> float:
        counts = rng.binomial(np.diff(np.r_[0, looks])[None, :], p, size=(paths, len(looks))).cumsum(axis=1)
        if side == "lower":
            crossed = cp_lower(counts, looks, at) > p
        else:  # upper: BetaInv(1 - at; k + 1, n - k), 1 at k = n
            with np.errstate(invalid="ignore"):
                upper = beta.ppf(1 - at, counts + 1, np.maximum(looks - counts, 1e-300))
            crossed = np.where(counts >= looks, 1.0, upper) < p
        return float(crossed.any(axis=1).mean())

    paths = 20_000
    high = binom.ppf(1 - LIMIT, paths, ALPHA)
    for side in ("lower", "upper"):
        assert crossing_rate(paths, level, side) * paths <= high, side
    peeking = crossing_rate(200_000, ALPHA, "lower")
    assert binom.cdf(high, paths, peeking) < 0.01, peeking  # the peeking bug would fail the limit
    # the engine's own bounds are these (scipy) bounds at alpha/K
    k = np.arange(0, 1001, 37)
    np.testing.assert_allclose(clopper_pearson_lower(k, 1000, level), cp_lower(k, 1000, level), rtol=1e-12)


def test_optional_stopping_just_below_a_grid_threshold():
    """4,000 inputs whose pA sits just below t = Φ(0.5/σ) (their true radius is a hair under 0.5): every
    certificate at radius >= 0.5 is wrong. Its share must stay within the binomial limit of alpha. Catches
    peeking (a fixed-n bound at level alpha checked at every look and stopped on), whose failure rate is
    simulated here and fails the same limit with probability > 99%."""
    s = spec()
    targets = Certificate().threshold(RADII, SIGMA)
    p = np.full(4000, norm.cdf(0.5 / SIGMA) - 1e-4)
    rng = np.random.default_rng(1)
    peeking = Peeking(**{f: getattr(s.sampler, f) for f in ("radii", "first_look", "growth", "beta")})

    def wrong(sampler, count: int) -> int:
        n_a, n = simulate(np.resize(p, count), s, rng, sampler)
        level = sampler.levels(s, n, np.zeros(count))
        return int((cp_lower(n_a, n, level) >= targets[2]).sum())

    high = binom.ppf(1 - LIMIT, len(p), ALPHA)
    count = wrong(s.sampler, len(p))
    assert count <= high, (count, high)
    peeking_rate = wrong(peeking, 40_000) / 40_000
    assert binom.cdf(high, len(p), peeking_rate) < 0.01, peeking_rate


def test_the_stopping_rule_stops_where_the_bucket_is_decided_and_saves_draws():
    """Catches a rule that never stops early (every input at n), or one that stops before the bucket is
    decided (an input between thresholds stopped while its interval still spans one)."""
    s = spec(n=100_000)
    looks, level, targets = s.sampler.schedule(s), s.bound_alpha, Certificate().threshold(RADII, SIGMA)
    rng = np.random.default_rng(2)
    p = np.r_[np.full(500, 0.9999), np.full(500, 0.35), np.full(500, norm.cdf(0.37 / SIGMA))]
    n_a, n = simulate(p, s, rng)
    lower, upper = cp_lower(n_a, n, level), 1 - cp_lower(n - n_a, n, level)
    assert np.isin(n, looks).all()
    stopped_early = n < s.n
    reached = np.searchsorted(targets, lower, side="right")
    decided = (reached == len(targets)) | (upper < targets[np.minimum(reached, len(targets) - 1)])
    assert decided[stopped_early].all()
    assert n[:500].max() == 256  # pA ~ 1 passes Φ(0.75/0.5) = 0.933 at the first look
    assert n[500:1000].max() <= 2048  # pA = 0.35: shown to abstain at once
    assert n[1000:].mean() < 0.2 * s.n and (reached[1000:] == 2).mean() > 0.95  # bucket [0.25, 0.5)


# ---------------------------------------------------------------- the engine on an analytic classifier


def failures(result, margins) -> np.ndarray:
    truth = (np.asarray(margins) > 0).astype(int)
    certified = result.predict != ABSTAIN
    return certified & ((result.predict != truth) | (result.radius > np.abs(margins)))


def test_sequential_certify_is_sound_on_the_halfspace():
    """4,000 inputs, |margin| in [0.05σ, 2σ], both signs: failures (wrong class or radius above the true
    radius |margin|) within the binomial limit of alpha. Rows are Cohen-style: pA_lower = CP(nA, n, α/K) from
    scipy, n one of the looks, samples = n0 + n, radius = σΦ⁻¹(pA_lower). Tightness: fewer draws than n on
    average and radii tracking the grid buckets."""
    magnitude = np.linspace(0.05 * SIGMA, 2 * SIGMA, 2000)
    margins = np.r_[magnitude, -magnitude]
    s = spec()
    result = certify_batch(Halfspace(), halfspace_inputs(margins), range(len(margins)), s, num_classes=2)
    count = int(failures(result, margins).sum())
    assert count <= binom.ppf(1 - LIMIT, len(margins), ALPHA), count
    looks = s.sampler.schedule(s)
    assert np.isin(result.n, looks).all() and (result.samples == s.n0 + result.n).all()
    np.testing.assert_allclose(result.pa_lower, cp_lower(result.n_a, result.n, s.bound_alpha), rtol=1e-10)
    ok = result.predict != ABSTAIN
    np.testing.assert_allclose(result.radius[ok], SIGMA * norm.ppf(result.pa_lower[ok]), rtol=1e-10)
    assert result.n.mean() < 0.5 * s.n
    correct = ok & (result.predict == (margins > 0))
    buckets = np.searchsorted(RADII, np.abs(margins), side="right")
    got = np.searchsorted(RADII, result.radius, side="right")
    assert (got[correct] == buckets[correct]).mean() > 0.8  # most land in their true bucket


def test_sequential_certify_at_the_decision_boundary():
    """4,000 inputs at margin 0 (pA = 1/2): every certificate is wrong; the share certified must stay within
    the binomial limit of alpha. pA = ½ sits on the threshold t_0 = ½, so no look decides it: the worst
    case, which runs to the cap."""
    margins = np.zeros(4000)
    s = spec(n=5000)
    result = certify_batch(Halfspace(), halfspace_inputs(margins), range(4000), s, num_classes=2)
    assert int((result.predict != ABSTAIN).sum()) <= binom.ppf(1 - LIMIT, 4000, ALPHA)
    assert (result.n == s.n).mean() > 0.9


def test_rows_do_not_depend_on_batch_size_order_or_grouping():
    """Per-input noise streams continue across looks: any batch size, order or split gives the same rows
    (shards, DDP ranks and resumes rely on it). Catches a look that restarts a stream or draws from another
    input's."""
    margins = np.linspace(-1.2, 1.2, 24)
    xs, s = halfspace_inputs(margins), spec(n=5000)
    whole = certify_batch(Halfspace(), xs, range(24), s, num_classes=2)
    small = certify_batch(Halfspace(), xs, range(24), spec(n=5000, batch_size=37), num_classes=2)
    order = np.random.default_rng(0).permutation(24)
    shuffled = certify_batch(Halfspace(), xs[order], order.tolist(), s, num_classes=2)
    halves = [certify_batch(Halfspace(), xs[k::2], list(range(24))[k::2], s, num_classes=2) for k in (0, 1)]
    for other, where in ((small, np.arange(24)), (shuffled, np.argsort(order))):
        for field in ("predict", "radius", "n", "n_a", "n_a0"):
            np.testing.assert_array_equal(getattr(whole, field), getattr(other, field)[where], field)
    np.testing.assert_array_equal(whole.n_a[0::2], halves[0].n_a)
    np.testing.assert_array_equal(whole.n_a[1::2], halves[1].n_a)


def test_the_first_n_draws_are_cohens_estimation_draws():
    """An input that runs to the cap has counted exactly the estimation draws of a fixed-n run (same
    stream, same blocks): catches a look that skips or repeats a block."""
    margins = np.array([0.5 * SIGMA * 0.999])  # just below a threshold: runs to the cap
    s = spec(n=3000)
    sequential = certify_batch(Halfspace(), halfspace_inputs(margins), [7], s, num_classes=2)
    assert sequential.n[0] == 3000
    cohen = CertificationSpec(sigma=SIGMA, n=3000, alpha=ALPHA, batch_size=20_000)
    fixed = certify_batch(Halfspace(), halfspace_inputs(margins), [7], cohen, num_classes=2)
    assert sequential.n_a[0] == fixed.n_a[0] and sequential.n_a0[0] == fixed.n_a0[0]


# ---------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("sequential", "key"),
    [
        ({"radii": []}, "sequential.radii"),
        ({"radii": [0.5, 0.25]}, "sequential.radii"),
        ({"radii": [-0.25, 0.25]}, "sequential.radii"),
        ({"radii": [0, float("nan")]}, "sequential.radii"),
        ({"radii": "0.25"}, "sequential.radii"),
        ({"first_look": 0}, "sequential.first_look"),
        ({"first_look": 200_000}, "sequential.first_look"),
        ({"growth": 1.0}, "sequential.growth"),
        ({"growth": float("inf")}, "sequential.growth"),
        ({"speed": 2}, "sequential"),
    ],
)
def test_bad_sequential_settings_name_the_key(sequential, key):
    with pytest.raises(ConfigError, match=rf"^{key}="):
        CertificationSpec(sigma=0.25, sampling="sequential", sampler=sequential)


def test_a_grid_above_the_largest_certifiable_radius_is_refused_and_the_default_is_resolved():
    s = CertificationSpec(sigma=0.25, n=10_000, sampling="sequential", sampler={"radii": [0, 1.0]})
    with pytest.raises(ConfigError, match=r"sequential.radii=\[0.0, 1.0\].*largest L2 radius certifiable"):
        s.resolved(64)
    resolved = CertificationSpec(sigma=0.25, n=100_000, sampling="sequential").resolved(64)
    assert resolved.sampler.radii == (0.0, 0.25, 0.5, 0.75)  # the report's grid up to the cap 0.93
    linf = CertificationSpec(sigma=0.25, sampling="sequential", norm="linf").resolved(784)
    assert linf.sampler.radii[1] == pytest.approx(1 / 255, abs=1e-6) and len(linf.sampler.radii) == 9
    with pytest.raises(ConfigError, match="^cohen="):
        CertificationSpec(sigma=0.25, sampling="cohen", sampler={"radii": [0, 0.25]})  # another sampler's


def test_the_smooth_api_certifies_sequentially():
    """``Smooth.certify(..., sampler=Sequential(...))``: margin 2σ (true radius 1.0) lands in the top
    bucket."""
    from rs_lightning.smoothing import Smooth

    smooth = Smooth(Halfspace(), num_classes=2, sigma=SIGMA)
    label, radius = smooth.certify(
        torch.tensor([[[1.0, 0.0]]]),
        n0=64,
        n=5000,
        alpha=ALPHA,
        batch_size=1000,
        sampling="sequential",
        sampler=Sequential(radii=RADII),
    )
    assert label == 1 and 0.75 <= radius <= 1.0
