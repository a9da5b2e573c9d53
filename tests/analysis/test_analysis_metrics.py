"""Result metrics vs their definitions (Cohen et al. 2019 analyze.py, MACER's ACR, Sun et al. 2025 ECDF)."""

import numpy as np
import pytest

from rs_lightning.analysis import (
    ECDF_GRID,
    average_certified_radius,
    certified_accuracy,
    pa_ecdf,
    summarize,
)
from rs_lightning.smoothing.certificate import Certificate


def test_certified_accuracy_counts_abstains_as_failures_and_uses_ge():
    radius = np.array([0.0, 0.5, 0.25, 0.0, 1.0])
    correct = np.array([1, 1, 0, 0, 1])  # idx 2 wrong, idx 3 abstained
    assert certified_accuracy(radius, correct, [0.0, 0.25, 0.5, 1.0, 1.5]).tolist() == [
        0.6,
        0.4,
        0.4,
        0.2,
        0.0,
    ]


def test_acr_is_mean_radius_of_correct_over_all_inputs():
    radius = np.array([0.3, 0.9, 0.4, 0.0])
    correct = np.array([True, True, False, False])
    assert average_certified_radius(radius, correct) == pytest.approx((0.3 + 0.9) / 4)
    assert average_certified_radius([], []) == 0.0


def test_pa_ecdf_is_share_at_or_above_x():
    pa = np.array([0.0, 0.5, 0.9, 0.99, 1.0])
    y = pa_ecdf(pa, [0.5, 0.9, 0.95, 1.0])
    assert y.tolist() == [0.8, 0.6, 0.4, 0.2]
    assert ECDF_GRID[0] == 0.5 and ECDF_GRID[-1] == 1.0 and len(ECDF_GRID) == 501


def test_summary_ties_ecdf_at_half_to_clean_accuracy():
    rng = np.random.default_rng(1)
    n = 200
    pa_hat = rng.uniform(0.3, 1.0, n)
    correct = (pa_hat > 0.55) & (rng.uniform(size=n) > 0.1)
    predict = np.where(pa_hat > 0.55, 1, -1)
    radius = np.where(correct, rng.uniform(0, 1, n), 0.0)
    summary = summarize(radius, correct, predict, pa_hat, radii=[0.0, 0.5])
    assert summary["pa_ecdf"]["y"][0] == pytest.approx(summary["clean_accuracy"])
    assert summary["certified_accuracy"]["0.0"] == pytest.approx(correct.mean())
    assert summary["abstain_rate"] == pytest.approx((predict < 0).mean())
    assert summary["num_inputs"] == n


def test_radius_grid_stops_at_the_budget_cap():
    l2 = Certificate()
    assert l2.radius_grid(0.25, 100_000, 0.001).tolist() == [0.0, 0.25, 0.5, 0.75]  # cap 0.953
    assert l2.radius_grid(0.5, 100_000, 0.001, step=0.5).tolist() == [0.0, 0.5, 1.0, 1.5]  # cap 1.906
