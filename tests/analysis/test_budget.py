"""Budget conversion (Sun et al. 2025, Appendix B; acr-weakness data/ecdf) and the constant classifier's
closed form (Theorem 1), against exact identities, scipy's binomial pmf and Monte Carlo."""

import json

import numpy as np
import pytest
from rs_testing import certify_config
from scipy.stats import beta, binom, norm

from rs_lightning.analysis import average_certified_radius, certified_accuracy
from rs_lightning.analysis.budget import (
    EXTRAPOLATION_WARNING,
    BudgetExtrapolationWarning,
    acr_at_budget,
    budget_table,
    certified_accuracy_at_budget,
    constant_classifier_acr,
    constant_classifier_budget,
    expected_certified_accuracy,
    expected_radius,
    plugin_radius,
    radius_at_count,
)
from rs_lightning.analysis.metrics import true_label_pa
from rs_lightning.runs import read_results
from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.stats import clopper_pearson_lower

SIGMA, ALPHA = 0.5, 0.001
RADII = np.array([0.0, 0.25, 0.5, 0.75, 1.0, 1.5])


def synthetic_run(n: int, size: int = 400, seed: int = 0) -> dict:
    """Rows as CERTIFY writes them: nA of the selected class; wrong selections and abstentions included."""
    rng = np.random.default_rng(seed)
    pa = np.concatenate([rng.beta(6, 1, size - 20), np.ones(10), np.full(10, 0.5)])
    n_a = rng.binomial(n, pa)
    n_a[:5] = n  # p̂ = 1 exactly
    pa_lower = clopper_pearson_lower(n_a, n, ALPHA)
    abstain = pa_lower < 0.5
    selected_true = rng.random(size) > 0.1  # 10% select a wrong class
    correct = ~abstain & selected_true
    radius = Certificate().radius(pa_lower, SIGMA)
    return {"nA": n_a, "n": np.full(size, n), "correct": correct, "radius": radius}


@pytest.mark.parametrize("n", [100, 1000, 100_000])
def test_plugin_at_the_run_budget_reproduces_certified_accuracy_and_acr_exactly(n):
    rows = synthetic_run(n)
    pa = true_label_pa(rows["correct"], n_a=rows["nA"], n=rows["n"])
    radius, certified = plugin_radius(pa, n, SIGMA, ALPHA)
    np.testing.assert_array_equal(certified, rows["correct"])
    np.testing.assert_array_equal(radius, np.where(rows["correct"], rows["radius"], 0.0))
    assert acr_at_budget(pa, n, SIGMA, ALPHA) == average_certified_radius(rows["radius"], rows["correct"])
    np.testing.assert_array_equal(
        certified_accuracy_at_budget(pa, n, SIGMA, ALPHA, RADII),
        certified_accuracy(rows["radius"], rows["correct"], RADII),
    )


def test_plugin_at_the_run_budget_reproduces_a_real_certify_run(trained_digits, tmp_path):
    from rs_lightning.cli.certify import certify

    summary = certify(certify_config(tmp_path, trained_digits["checkpoint"], ["n=500", "skip=6"]))
    rows = read_results(tmp_path / "certify.tsv")
    n, sigma, alpha = summary["settings"]["n"], summary["settings"]["sigma"], summary["settings"]["alpha"]
    pa = true_label_pa(rows["correct"], n_a=rows["nA"], n=rows["n"])
    radius, certified = plugin_radius(pa, n, sigma, alpha)
    np.testing.assert_array_equal(certified, rows["correct"].astype(bool))
    # the TSV stores radii with 10 significant digits; the recomputed ones print identically
    assert [f"{r:.10g}" for r in np.where(certified, radius, rows["radius"])] == [
        f"{r:.10g}" for r in rows["radius"]
    ]
    assert acr_at_budget(pa, n, sigma, alpha) == pytest.approx(summary["acr"], rel=1e-9, abs=1e-12)
    radii = [float(r) for r in summary["certified_accuracy"]]
    np.testing.assert_array_equal(
        certified_accuracy_at_budget(pa, n, sigma, alpha, radii), list(summary["certified_accuracy"].values())
    )
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["acr"] == summary["acr"]


@pytest.mark.parametrize("budget", [1, 7, 50, 1000])
def test_expectation_rule_equals_the_full_sum_over_scipys_binomial_pmf(budget):
    pa = np.array([0.0, 0.3, 0.5, 0.62, 0.9, 0.97, 0.999, 1.0])
    ks = np.arange(budget + 1)
    r_k, _ = radius_at_count(ks, budget, SIGMA, ALPHA)
    reference = binom.pmf(ks[None, :], budget, pa[:, None]) @ r_k
    exact = expected_radius(pa, budget, SIGMA, ALPHA, tol=0)
    np.testing.assert_allclose(exact, reference, rtol=1e-12, atol=0)
    # the effective support leaves out at most 2·tol of mass: error <= 2·tol·(radius cap)
    bound = 2e-12 * max(0.0, Certificate().max_radius(SIGMA, budget, ALPHA)) + 1e-15
    assert np.abs(expected_radius(pa, budget, SIGMA, ALPHA) - reference).max() <= bound
    # certified accuracy: exact tail sums
    for r in (0.0, 0.3, 1.0):
        k_r = ks[(r_k >= r) & (clopper_pearson_lower(ks, budget, ALPHA) >= 0.5)]
        want = binom.pmf(k_r[None, :], budget, pa[:, None]).sum(axis=1).mean() if k_r.size else 0.0
        assert expected_certified_accuracy(pa, budget, SIGMA, ALPHA, [r])[0] == pytest.approx(want, abs=1e-12)


def test_expectation_rule_agrees_with_monte_carlo():
    rng = np.random.default_rng(1)
    pa = np.array([0.55, 0.8, 0.95, 0.995, 0.9999])
    budget, draws = 2000, 20_000
    counts = rng.binomial(budget, pa[:, None], size=(pa.size, draws))
    radius, certified = radius_at_count(counts, budget, SIGMA, ALPHA)
    mean, se = radius.mean(axis=1), radius.std(axis=1) / np.sqrt(draws)
    assert np.all(np.abs(expected_radius(pa, budget, SIGMA, ALPHA) - mean) <= 5 * se + 1e-12)
    for r in (0.0, 0.5, 1.0):
        hits = (certified & (radius >= r)).mean(axis=1)
        se = np.sqrt(hits * (1 - hits) / draws).mean() + 1e-4
        got = expected_certified_accuracy(pa, budget, SIGMA, ALPHA, [r])[0]
        assert abs(got - hits.mean()) <= 5 * se


def test_expectation_rule_is_close_to_plugin_for_large_budgets():
    pa = np.random.default_rng(2).beta(8, 1, 1000)
    plug, expect = acr_at_budget(pa, 10**5, SIGMA, ALPHA), acr_at_budget(pa, 10**5, SIGMA, ALPHA, "expected")
    assert expect == pytest.approx(plug, abs=2e-3)


@pytest.mark.parametrize("bad", [0, -5, 0.5, 2.5])
def test_budgets_below_one_or_fractional_name_n_prime(bad):
    with pytest.raises(ValueError, match=r"^N'="):
        plugin_radius([0.9], bad, SIGMA, ALPHA)
    with pytest.raises(ValueError, match=r"N'"):
        budget_table([0.9], n=100, sigma=SIGMA, alpha=ALPHA, budgets=[100, bad])


def test_budgets_above_the_run_budget_warn_and_are_flagged():
    with pytest.warns(BudgetExtrapolationWarning, match="biased upward: inputs with p̂ = 1 are assumed"):
        rows = budget_table([1.0, 0.9], n=1000, sigma=SIGMA, alpha=ALPHA, budgets=[100, 1000, 10_000])
    assert [(r["budget"], r["rule"], r["extrapolated"]) for r in rows] == [
        (100, "plugin", False),
        (100, "expected", False),
        (1000, "plugin", False),
        (1000, "expected", False),
        (10_000, "plugin", True),
        (10_000, "expected", True),
    ]
    assert EXTRAPOLATION_WARNING in rows[-1]["note"]


def test_radius_cap_at_p_hat_one_and_clopper_pearson_behaviour():
    for budget in (16, 100, 10_000, 100_000):
        cap = Certificate().max_radius(SIGMA, budget, ALPHA)
        assert plugin_radius([1.0], budget, SIGMA, ALPHA)[0][0] == pytest.approx(cap, rel=1e-12)
        assert expected_radius([1.0], budget, SIGMA, ALPHA)[0] == pytest.approx(cap, rel=1e-12)
    # acr-weakness --dataset_weight: sigma-free radius at N = 16, alpha = 0.1 for k = 12 ... 16
    radius, certified = radius_at_count(np.arange(12, 17), 16, 1.0, 0.1)
    np.testing.assert_allclose(radius, [0.154, 0.329, 0.526, 0.765, 1.108], atol=6e-4)
    assert certified.all() and not radius_at_count(11, 16, 1.0, 0.1)[1]
    # the radius grows with the count and with the budget at a fixed p̂
    ks = np.arange(0, 1001)
    assert np.all(np.diff(radius_at_count(ks, 1000, SIGMA, ALPHA)[0]) >= 0)
    assert np.all(np.diff([acr_at_budget([0.99], b, SIGMA, ALPHA) for b in (10, 100, 1000, 10**4)]) > 0)


def test_constant_classifier_closed_form_and_the_reference_numbers():
    """Sun et al. 2025, Theorem 1: Φ⁻¹(α^(1/N)) at α = 0.001, the CIFAR-10 ACRs (Table 2), and N ≈ 4e17."""
    budgets = [1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e9]
    np.testing.assert_allclose(
        constant_classifier_acr(1.0, 1.0, ALPHA, budgets),
        [1.500, 2.463, 3.199, 3.811, 4.347, 4.828, 5.676],
        atol=6e-4,
    )
    assert constant_classifier_acr(1.0, 1.0, ALPHA, 1e9) == pytest.approx(norm.ppf(ALPHA ** (1 / 1e9)), 1e-6)
    cifar = [constant_classifier_acr(0.1, s, ALPHA, 1e5) for s in (0.25, 0.5, 1.0)]
    np.testing.assert_allclose(cifar, [0.095, 0.191, 0.381], atol=6e-4)
    need = constant_classifier_budget(0.844, 0.1, 1.0, ALPHA)
    assert 3e17 < need < 5e17
    assert constant_classifier_acr(0.1, 1.0, ALPHA, need) == pytest.approx(0.844, rel=1e-9)
    with pytest.raises(ValueError, match="N'"):
        constant_classifier_acr(0.1, 1.0, ALPHA, 0)


@pytest.mark.parametrize("n", [100, 10_000])
def test_constant_classifier_run_converts_to_the_closed_form_at_every_budget(n):
    """A synthetic TSV of h ≡ 0: class-0 inputs have nA = N and are correct, all others are wrong."""
    labels = np.random.default_rng(3).integers(0, 10, 500)
    correct = labels == 0
    radius = np.where(correct, Certificate().radius(clopper_pearson_lower(n, n, ALPHA), SIGMA), 0.0)
    pa = true_label_pa(correct, n_a=np.full(500, n), n=np.full(500, n))
    share = correct.mean()
    assert average_certified_radius(radius, correct) == pytest.approx(
        constant_classifier_acr(share, SIGMA, ALPHA, n), rel=1e-12
    )
    with pytest.warns(BudgetExtrapolationWarning):
        rows = budget_table(pa, n=n, sigma=SIGMA, alpha=ALPHA, budgets=[10, 100, 10_000, 10**6])
    for row in rows:
        assert row["acr"] == pytest.approx(constant_classifier_acr(share, SIGMA, ALPHA, row["budget"]), 1e-12)


def test_true_label_pa_uses_each_rows_own_n_and_zero_for_unsampled_rows():
    """Input-specific sampling writes per-row n, and n = 0 for inputs abstained without estimation."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 warning
        pa = true_label_pa([1, 0, 1, 0], n_a=[90, 0, 450, 10], n=[100, 0, 500, 20])
    np.testing.assert_allclose(pa, [0.9, 0.0, 0.9, 0.0])


def test_plugin_rule_rounds_p_hat_times_n_prime_at_a_budget_other_than_the_runs():
    """At N′ ≠ N the plug-in count is round(p̂·N′), halves up, not ⌊p̂·N′⌋: p̂ = n_A/N of a run with N = 1000
    converted to N′ = 100, and p̂ = 928/1024 = 29/32 to N′ = 16 (p̂·N′ = 14.5 exactly). Expected radii from
    the counts worked out by hand, Clopper-Pearson with scipy's beta quantile and σ·Φ⁻¹.

    Exists to catch the one-line mutation of ``plugin_counts`` (rs_lightning/analysis/budget.py) from
    rounding to flooring, ``np.floor(p * budget + 0.5)`` -> ``np.floor(p * budget + 1e-6)`` (the epsilon only
    absorbs p̂·N′ landing just below an integer): at N′ = N it reproduces the run, so every test at N′ = N lets
    it through. The plain ``np.floor(p * budget)`` and numpy's half-to-even ``np.round`` fail here too."""

    def certify(k, budget):  # CERTIFY with n_A = k >= 1 of N′ draws: (radius, certified)
        lower = beta.ppf(ALPHA, k, budget - k + 1)  # k = N′ gives α^(1/N′)
        return np.where(lower >= 0.5, SIGMA * norm.ppf(lower), 0.0), lower >= 0.5

    n_a = np.array([957, 951, 806, 999, 500])  # p̂·100 = 95.7, 95.1, 80.6, 99.9, 50
    counts = np.array([96, 95, 81, 100, 50])  # rounded (floor: 95, 95, 80, 99, 50)
    want_radius, want_certified = certify(counts, 100)
    radius, certified = plugin_radius(n_a / 1000, 100, SIGMA, ALPHA)
    np.testing.assert_array_equal(certified, [True, True, True, True, False])
    np.testing.assert_array_equal(certified, want_certified)
    np.testing.assert_allclose(radius, want_radius, rtol=1e-9, atol=0)
    assert acr_at_budget(n_a / 1000, 100, SIGMA, ALPHA, n=1000) == pytest.approx(want_radius.mean(), rel=1e-9)
    np.testing.assert_allclose(
        certified_accuracy_at_budget(n_a / 1000, 100, SIGMA, ALPHA, RADII, n=1000),
        [(want_certified & (want_radius >= r)).mean() for r in RADII],
    )
    # an exact half rounds up: 15 of 16 certifies (CP lower 0.550), 14 of 16 would abstain (0.471)
    radius, certified = plugin_radius([928 / 1024], 16, SIGMA, ALPHA)
    want_radius, want_certified = certify(15, 16)
    assert certified[0] and want_certified and not certify(14, 16)[1]
    assert radius[0] == pytest.approx(float(want_radius), rel=1e-9)
