"""Helpers of the statistical tests: an analytic classifier and exact failure probabilities from scipy.

The engine's Clopper–Pearson code is never used here: bounds are recomputed with ``scipy.stats.beta`` so a
bug in the engine's statistics cannot hide in the test's expectation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.stats import beta, binom, hypergeom, norm
from torch import nn


class Halfspace(nn.Module):
    """f(x) = 1[x_0 > 0]: its smoothed pA at x is Phi(|x_0| / sigma) and the smoothed classifier's exact
    robust radius is |x_0| (the distance to the hyperplane)."""

    def forward(self, x):
        z = x.flatten(1)[:, 0]
        return torch.stack([-z, z], dim=1)


def halfspace_inputs(margins) -> torch.Tensor:
    """``(len(margins), 1, 1, 2)`` inputs with x_0 = margin."""
    xs = torch.zeros(len(margins), 1, 1, 2)
    xs[:, 0, 0, 0] = torch.as_tensor(np.asarray(margins), dtype=torch.float32)
    return xs


def cp_lower(k, n, alpha: float) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound BetaInv(alpha; k, n - k + 1), 0 at k = 0 (scipy)."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        bound = beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1)
    return np.where(k <= 0, 0.0, bound)


def prob_bound_exceeds(
    n: int,
    p,
    threshold,
    alpha: float,
    bound: Callable = cp_lower,
    strict: bool = True,
    bound_n: int | None = None,
):
    """P(bound(X, n, alpha) > threshold) for X ~ Binomial(n, p) (``>=`` if not ``strict``), elementwise;
    ``bound_n`` replaces n inside the bound (a bug model: the bound told the wrong number of draws).

    The bound must be non-decreasing in X (checked), so the event is X >= k* for the first k* that passes.
    """
    p, threshold = np.broadcast_arrays(np.asarray(p, dtype=float), np.asarray(threshold, dtype=float))
    if n == 0:
        return np.zeros(p.shape)
    lower = bound(np.arange(n + 1), n if bound_n is None else bound_n, alpha)
    assert (np.diff(lower) >= 0).all(), "the bound must be non-decreasing in the count"
    k_star = np.searchsorted(lower, threshold, side="right" if strict else "left")
    return binom.sf(k_star - 1, n, p)


def certify_failure_probability(
    margins,
    sigma,
    n0,
    n,
    alpha,
    bound: Callable = cp_lower,
    cdf: Callable = norm.cdf,
    draw_scale=None,
    threshold=None,
) -> np.ndarray:
    """Exact P(CERTIFY fails) per input of :class:`Halfspace` (Cohen's Alg. 1: independent n0 selection
    draws, n estimation draws; ``argmax`` breaks a tie towards class 0). A failure is a certified wrong
    class, or the true class with a radius above |margin| (⇔ bound > the p_A that radius needs: pA itself
    where the certificate is tight on the halfspace, else ``threshold``).

    ``cdf`` is the CDF of the standard noise along x_0 and ``sigma`` its scale; ``draw_scale`` (a bug model)
    is the scale the engine actually draws at, which sets the counts while the truth stays at ``sigma``."""
    margins = np.asarray(margins, dtype=float)
    drawn = sigma if draw_scale is None else draw_scale
    q = cdf(margins / drawn)  # P(f = 1) under the drawn noise
    p_drawn = cdf(np.abs(margins) / drawn)
    pa = cdf(np.abs(margins) / sigma) if threshold is None else np.asarray(threshold, dtype=float)
    truth_is_one = margins > 0
    select_one = binom.sf(n0 // 2, n0, q)  # more than half the votes (a tie goes to class 0)
    select_true = np.where(truth_is_one, select_one, 1 - select_one)
    right = prob_bound_exceeds(n, p_drawn, np.maximum(pa, 0.5), alpha, bound, strict=True)
    wrong = prob_bound_exceeds(n, 1 - p_drawn, 0.5, alpha, bound, strict=False)
    return select_true * right + (1 - select_true) * wrong


def conditional_failure_probability(margins, sigma, selected, n_per_input, alpha, bound_n=None) -> np.ndarray:
    """Exact P(fail | the class and sample size chosen before estimation) per input of :class:`Halfspace`:
    the estimation count is Binomial(n_i, p of the selected class) whatever the pilot did, when the
    estimation draws are fresh. ``bound_n``: the bug of a bound computed with that n instead of n_i."""
    margins = np.asarray(margins, dtype=float)
    pa = norm.cdf(np.abs(margins) / sigma)
    truth = (margins > 0).astype(int)
    selected, n_per_input = np.asarray(selected), np.asarray(n_per_input)
    right = selected == truth
    out = np.zeros(margins.shape)
    for n_i in np.unique(n_per_input[n_per_input > 0]):
        rows = n_per_input == n_i
        ok, bad = rows & right, rows & ~right
        kw = dict(alpha=alpha, bound_n=bound_n)
        out[ok] = prob_bound_exceeds(int(n_i), pa[ok], np.maximum(pa[ok], 0.5), strict=True, **kw)
        out[bad] = prob_bound_exceeds(int(n_i), 1 - pa[bad], 0.5, strict=False, **kw)
    return out


def poisson_binomial_pmf(probabilities) -> np.ndarray:
    """pmf of the number of successes of independent Bernoulli(p_i) trials (exact convolution)."""
    pmf = np.zeros(len(probabilities) + 1)
    pmf[0] = 1.0
    for i, p in enumerate(probabilities, start=1):
        pmf[1 : i + 1] = pmf[1 : i + 1] * (1 - p) + pmf[:i] * p
        pmf[0] *= 1 - p
    return pmf


def acceptance_region(probabilities, tail: float = 1e-6) -> tuple[int, int]:
    """``(low, high)``: the count of failures lies in [low, high] except with probability <= 2·tail."""
    cdf = np.cumsum(poisson_binomial_pmf(probabilities))
    low = int(np.searchsorted(cdf, tail, side="left"))
    high = int(np.searchsorted(cdf, 1 - tail, side="left"))
    return low, high


def miss_probability(probabilities, low: int, high: int) -> float:
    """P(low <= count <= high) when the per-input failure probabilities are ``probabilities``: the chance
    that a bug with these probabilities would pass the test (1 - power)."""
    cdf = np.cumsum(poisson_binomial_pmf(probabilities))
    return float(cdf[high] - (cdf[low - 1] if low > 0 else 0.0))


def iss_boundary_certify_rate(n: int, k0: int, alpha: float, psi, variant: str = "fresh") -> float:
    """P(ISS certifies an input at pA = pB = 1/2) — every such certificate is wrong — summed exactly over the
    pilot count c ~ Bin(k0, 1/2) (selected count max(c, k0 - c); k̂ from its two-sided CP interval and the
    engine's ψ lookup, a plan, not a statistic). ``variant``: ``fresh`` (the engine: Bin(k̂, 1/2) new draws),
    ``reuse`` (pilot counts added to max(k̂, k0) draws: the reference code) or ``prefix`` (the bug of
    taking the pilot from the estimation stream: its first k0 draws are the pilot's)."""
    from rs_lightning.smoothing.samplers.iss import sample_sizes_for_interval

    c = np.arange(k0 + 1)
    selected = np.maximum(c, k0 - c)
    with np.errstate(invalid="ignore"):
        low = np.where(
            selected <= 0, 0.0, beta.ppf(alpha / 2, np.maximum(selected, 1e-300), k0 - selected + 1)
        )
        high = np.where(
            selected >= k0, 1.0, beta.ppf(1 - alpha / 2, selected + 1, np.maximum(k0 - selected, 1e-300))
        )
    k_hat = sample_sizes_for_interval(psi, low, high)
    total = 0.0
    for weight, s, k in zip(binom.pmf(c, k0, 0.5), selected, k_hat, strict=True):
        if k == 0:
            continue
        if variant == "fresh":
            x = np.arange(k + 1)
            hit = binom.pmf(x, k, 0.5)[cp_lower(x, k, alpha) >= 0.5].sum()
        elif variant == "reuse" or k >= k0:
            m = max(k, k0)
            y = np.arange(m - k0 + 1)
            hit = binom.pmf(y, m - k0, 0.5)[cp_lower(s + y, m, alpha) >= 0.5].sum()
        else:  # prefix, k̂ < k0: the count among the first k̂ of the pilot's draws
            x = np.arange(k + 1)
            hit = hypergeom.pmf(x, k0, s, k)[cp_lower(x, k, alpha) >= 0.5].sum()
        total += weight * hit
    return float(total)
