"""Statistics of randomized smoothing (Cohen, Rosenfeld & Kolter, ICML 2019, arXiv 1902.02918).

Pure functions over counts; scipy does every quantile and test. Shapes broadcast like numpy. What a bound
on p_A certifies (the radius) is the certificate's: :mod:`.certificate`.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq
from scipy.special import rel_entr
from scipy.stats import beta, binomtest

PA_GRID = np.round(np.linspace(0.5, 1.0, 501), 3)
"""The p grid 0.500, 0.501, …, 1.000: of ISS's sample-size table ψ (as in Chen et al.'s ``generate_iss``) and
of the pA ECDF (as in Sun et al.'s acr-weakness release; ``rs_lightning.analysis.metrics.ECDF_GRID``)."""


def clopper_pearson_lower(k, n, alpha: float):
    """One-sided (1 - alpha) Clopper–Pearson lower bound on a binomial proportion.

    Equals ``BetaInv(alpha; k, n - k + 1)`` and is 0 when ``k == 0`` (Cohen et al. 2019, Alg. 1
    ``LowerConfBound``; the lower end of statsmodels' two-sided ``method="beta"`` interval at level 2·alpha).
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bound = beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1)
    return np.where(k <= 0, 0.0, bound)


def clopper_pearson_upper(k, n, alpha: float):
    """One-sided (1 - alpha) Clopper–Pearson upper bound ``BetaInv(1 - alpha; k + 1, n - k)``; 1 at k = n."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bound = beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, bound)


def clopper_pearson_interval(k, n, alpha: float):
    """Two-sided (1 - alpha) Clopper–Pearson interval ``(low, high)``, alpha/2 in each tail."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        low = beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1)
        high = beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k <= 0, 0.0, low), np.where(k >= n, 1.0, high)


def top_two_pvalue(n_top: int, n_second: int) -> float:
    """Two-sided exact binomial-test p-value of ``n_top`` successes in ``n_top + n_second`` trials at p=1/2.

    PREDICT (Cohen et al. 2019, Alg. 1; Hung & Fithian, Ann. Statist. 2019) abstains when this exceeds alpha.
    """
    total = int(n_top) + int(n_second)
    if total == 0:
        return 1.0
    return float(binomtest(int(n_top), total, 0.5).pvalue)


def clopper_pearson_reach(t: float, n: int, alpha: float) -> float:
    """The smallest share p̂ = k/n (k taken as continuous) whose lower bound at ``n`` draws reaches ``t``:
    ``BetaInv(alpha; p̂n, n - p̂n + 1) = t``; 1 where even n of n draws stay below t. An input whose p_A is
    below it is more likely than not to miss t after all n draws."""
    gap = lambda share: float(beta.ppf(alpha, share * n, n - share * n + 1)) - t  # noqa: E731
    top = 1 - 1e-12
    if t <= 0:
        return 0.0
    if gap(top) < 0:
        return 1.0
    return float(brentq(gap, min(t, top), top, xtol=1e-12))


def bernoulli_kl(p, q):
    """KL(Bernoulli(p) ‖ Bernoulli(q)) in nats, with 0·ln 0 = 0 (inf where q is 0 or 1 and p is not)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    return rel_entr(p, q) + rel_entr(1 - p, 1 - q)


def oracle_draws(p, lower, upper, alpha: float, beta_: float, cap: int):
    """The fewest draws an oracle that knows p needs, per input, to decide p's bucket [lower, upper):
    Wald's bound (Wald, *Sequential Analysis*, 1947, §3; the lower bound on the expected sample size of a
    sequential test) ``max[ln(1/alpha)/KL(p‖lower), ln(1/beta_)/KL(p‖upper)]``, a term dropped where its
    threshold is NaN (no bucket below, or the top bucket), capped at ``cap``; at p = lower or upper the
    bound is infinite, so the cap."""
    p, lower, upper = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (p, lower, upper)))
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.where(np.isnan(lower), 0.0, np.log(1 / alpha) / bernoulli_kl(p, np.nan_to_num(lower)))
        high = np.where(np.isnan(upper), 0.0, np.log(1 / beta_) / bernoulli_kl(p, np.nan_to_num(upper)))
    return np.minimum(np.maximum(low, high), float(cap))
