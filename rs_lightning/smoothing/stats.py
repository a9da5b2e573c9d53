"""Statistics of randomized smoothing (Cohen, Rosenfeld & Kolter, ICML 2019, arXiv 1902.02918).

Pure functions over counts; scipy does every quantile and test. Shapes broadcast like numpy.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import beta, binomtest
from scipy.stats import norm as norm_dist


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


NORMS = ("l2", "linf")
"""Threat models a certificate can be stated in: the L2 ball (Cohen et al.'s Thm. 1) or the L∞ ball."""


def radius_scale(sigma: float, norm: str = "l2", dim: int | None = None) -> float:
    """The factor s in ``radius = s · Phi^-1(pA_lower)``: ``sigma`` for L2, ``sigma / sqrt(dim)`` for L∞.

    The L∞ ball of radius r in d dimensions lies inside the L2 ball of radius √d·r, so an L2 certificate
    of radius σΦ⁻¹(p) gives the L∞ radius σΦ⁻¹(p)/√d (extensions.md §1.6: ARS's r∞, with d = C·H·W of the
    full input; rs4a's Gaussian L∞ bound). ARS pipelines certify this radius directly (§1.3 accounting).
    """
    if norm == "l2":
        return float(sigma)
    if norm != "linf":
        raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
    if dim is None or int(dim) < 1:
        raise ValueError(f"norm='linf' needs the input dimension d = C*H*W >= 1, got dim={dim!r}")
    return float(sigma) / float(np.sqrt(int(dim)))


def radius_from_pa(pa_lower, sigma: float, norm: str = "l2", dim: int | None = None):
    """Certified radius ``s * Phi^-1(pA_lower)`` with ``s = radius_scale(sigma, norm, dim)``: the L2 radius
    σΦ⁻¹(pA_lower) (Cohen et al. 2019, Thm. 1 with pB = 1 - pA), or the L∞ radius σΦ⁻¹(pA_lower)/√d.

    Returns 0 where ``pA_lower < 1/2`` (CERTIFY abstains there).
    """
    pa = np.asarray(pa_lower, dtype=np.float64)
    scale = radius_scale(sigma, norm, dim)
    return np.where(pa < 0.5, 0.0, scale * norm_dist.ppf(np.clip(pa, 0.5, 1.0)))


def max_certifiable_radius(
    sigma: float, n: int, alpha: float, norm: str = "l2", dim: int | None = None
) -> float:
    """Largest radius CERTIFY can return with ``n`` samples: ``s * Phi^-1(alpha^(1/n))``, s as in
    :func:`radius_scale` (L∞: σ·Φ⁻¹(α^(1/n))/√d, extensions.md §1.6 "radius ceilings").

    With nA = n the Clopper–Pearson bound is exactly alpha^(1/n) (3.811·sigma for n = 1e5, alpha = 1e-3).
    """
    return float(radius_scale(sigma, norm, dim) * norm_dist.ppf(alpha ** (1.0 / n)))


DEFAULT_RADIUS_STEPS = {"l2": 0.25, "linf": 1 / 255}
"""Certified-accuracy grid spacing per norm when none is given: 0.25 (L2, as Cohen et al.) and one 8-bit
grey level 1/255 (L∞, as ARS reports)."""


def radius_grid(
    sigma: float, n: int, alpha: float, step: float | None = None, norm: str = "l2", dim: int | None = None
) -> np.ndarray:
    """Radii 0, step, 2·step, ... up to the largest radius certifiable with ``n`` samples at level ``alpha``
    in ``norm`` (L∞ needs the input dimension ``dim``); ``step`` None = :data:`DEFAULT_RADIUS_STEPS`."""
    top = max_certifiable_radius(sigma, n, alpha, norm, dim)
    step = DEFAULT_RADIUS_STEPS[norm] if step is None else step
    return np.round(np.arange(0.0, top + 1e-9, step), 6)


def top_two_pvalue(n_top: int, n_second: int) -> float:
    """Two-sided exact binomial-test p-value of ``n_top`` successes in ``n_top + n_second`` trials at p=1/2.

    PREDICT (Cohen et al. 2019, Alg. 1; Hung & Fithian 2016) abstains when this exceeds alpha.
    """
    total = int(n_top) + int(n_second)
    if total == 0:
        return 1.0
    return float(binomtest(int(n_top), total, 0.5).pvalue)
