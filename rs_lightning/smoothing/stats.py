"""Statistics of randomized smoothing (Cohen, Rosenfeld & Kolter, ICML 2019, arXiv 1902.02918).

Pure functions over counts; scipy does every quantile and test. Shapes broadcast like numpy. What a bound
on p_A certifies (the radius) is the certificate's: :mod:`.certificate`.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import beta, binomtest


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
