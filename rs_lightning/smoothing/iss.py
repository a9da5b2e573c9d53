"""Input-specific sampling (ISS; Chen, Li, Yan, Li & Sheng, AAAI 2022, arXiv 2112.12084).

Chen et al. 2022, §4 (Alg. 2): with the planning radius R(k, p) = radius(CP_lower(k·p, k, α)) (the one-sided
Clopper–Pearson bound at the *expected* count k·p, turned into a radius by the run's certificate — σ·Φ⁻¹ for
Gaussian L2 — :mod:`.certificate`), the sample size for a true pA = p is

    ψ(p) = min{k ∈ {g, 2g, …, K} : R(k, p) ≥ t(p)},   t(p) = R(K, p) − c (AD)  or  (1 − c)·R(K, p) (RD),

ψ(p) = 0 where t(p) ≤ 0 (abstain without sampling), K where no k qualifies; p runs over 0.500, 0.501, …, 1.
A pilot's two-sided CP interval [p_low, p_up] on pA then gives k̂ = max ψ over every grid point from the one
below p_low to the one above p_up. The reference takes the max of ψ at the two brackets of each endpoint,
which is the same where ψ is monotone (AD) or U-shaped (RD) on the interval; where it is not (RD with
p_low < 0.5 reaching ψ's zero region) ours is larger, i.e. it never plans fewer draws. ψ is a planning
heuristic only: the guarantee comes from the estimation draws (see the engine).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.stats import beta
from scipy.stats import norm as normal

from .certificate import Certificate
from .stats import clopper_pearson_interval

PA_GRID = np.round(np.linspace(0.5, 1.0, 501), 3)
"""The p grid of ψ (as in the authors' ``generate_iss``)."""
_ONE_SIGMA = float(normal.cdf(1.0))


def planning_radius(
    k, p, alpha: float, certificate: Certificate, sigma: float, dim: int | None
) -> np.ndarray:
    """R(k, p): the certificate's radius at CP_lower(k·p, k, α), the bound at the non-integer expected count
    k·p (0 where that bound is below 1/2)."""
    k = np.asarray(k, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    successes = k * p
    with np.errstate(invalid="ignore", divide="ignore"):
        lower = beta.ppf(alpha, np.maximum(successes, 1e-300), k - successes + 1)
    return certificate.radius(np.where(successes <= 0, 0.0, lower), sigma, dim)


@lru_cache(maxsize=32)
def _psi_cached(n, alpha, certificate, sigma, dim, decline, max_decline, granularity):
    sizes = np.arange(granularity, n + 1, granularity, dtype=np.float64)
    if sizes.size == 0 or sizes[-1] != n:
        sizes = np.append(sizes, float(n))
    full = planning_radius(n, PA_GRID, alpha, certificate, sigma, dim)
    target = full - max_decline if decline == "ad" else (1.0 - max_decline) * full
    radii = planning_radius(sizes[:, None], PA_GRID[None, :], alpha, certificate, sigma, dim)  # (sizes, grid)
    unit = float(certificate.radius(_ONE_SIGMA, sigma, dim))  # σ for Gaussian L2: the radius of p = Φ(1)
    ok = radii >= target[None, :] - 1e-12 * unit
    first = np.where(ok.any(axis=0), ok.argmax(axis=0), sizes.size - 1)
    psi = sizes[first].astype(np.int64)
    psi[target <= 0] = 0
    psi.setflags(write=False)
    return psi


def iss_table(
    n: int, alpha: float, certificate: Certificate, sigma: float, dim: int | None, decline: str,
    max_decline: float, granularity: int,
) -> np.ndarray:  # fmt: skip
    """ψ on :data:`PA_GRID` (int64, read-only); computed once per setting with scipy, then cached."""
    return _psi_cached(int(n), float(alpha), certificate, float(sigma), None if dim is None else int(dim),
                       str(decline), float(max_decline), int(granularity))  # fmt: skip


def sample_sizes_for_interval(psi: np.ndarray, p_low, p_up) -> np.ndarray:
    """k̂ = max ψ over the grid points bracketing [p_low, p_up] (ψ(0.5) below the grid), per input."""
    p_low, p_up = np.atleast_1d(np.asarray(p_low, dtype=float)), np.atleast_1d(np.asarray(p_up, dtype=float))
    step = PA_GRID[1] - PA_GRID[0]
    lo = np.clip(np.floor((p_low - 0.5) / step + 1e-9), 0, PA_GRID.size - 1).astype(np.int64)
    hi = np.clip(np.ceil((p_up - 0.5) / step - 1e-9), 0, PA_GRID.size - 1).astype(np.int64)
    return np.array([psi[a : b + 1].max() for a, b in zip(lo, hi, strict=True)], dtype=np.int64)


def pilot_sample_sizes(pilot_counts, k0: int, psi: np.ndarray, alpha: float) -> np.ndarray:
    """k̂ from the pilot count of the selected class: the two-sided (α/2 per tail) CP interval, then
    :func:`sample_sizes_for_interval` (as ``certify_iss.py`` of roy-ch/Input-Specific-Certification)."""
    p_low, p_up = clopper_pearson_interval(np.asarray(pilot_counts), k0, alpha)
    return sample_sizes_for_interval(psi, p_low, p_up)
