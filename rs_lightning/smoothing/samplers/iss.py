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
heuristic only: the guarantee comes from the estimation draws: k̂ is a function of the pilot, whose draws
(their own stream) never enter the bound, so the bound holds conditionally on it (:class:`InputSpecific`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch
from scipy.stats import beta
from scipy.stats import norm as normal

from rs_lightning.validation import ConfigError

from ..certificate import Certificate
from ..noise import Phase
from ..stats import PA_GRID, clopper_pearson_interval
from .base import Count, Draws, Sampler, choice, finite, flag, pick

if TYPE_CHECKING:
    from ..spec import CertificationSpec

DECLINES = ("ad", "rd")

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
    n: int,
    alpha: float,
    certificate: Certificate,
    sigma: float,
    dim: int | None,
    decline: str,
    max_decline: float,
    granularity: int,
) -> np.ndarray:
    """ψ on :data:`PA_GRID` (int64, read-only); computed once per setting with scipy, then cached."""
    return _psi_cached(
        int(n),
        float(alpha),
        certificate,
        float(sigma),
        None if dim is None else int(dim),
        str(decline),
        float(max_decline),
        int(granularity),
    )


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


class UnestablishedGuaranteeWarning(UserWarning):
    """``iss.reuse_pilot=true``: the reference implementation's bound, whose guarantee is not established."""


@dataclass(frozen=True)
class InputSpecific(Sampler):
    """Input-specific sampling (Chen et al., AAAI 2022; roy-ch/Input-Specific-Certification).

    Args:
        decline: ``ad`` (radius at most ``max_decline`` below the full-budget radius, in [0,1]-pixel units of
            the spec's ``norm``: L2, or L∞ where radii are √d times smaller) or ``rd`` (at most the share
            ``max_decline`` of it).
        max_decline: the allowed decline c (paper: AD 0.05 / 0.1, RD 0.01 / 0.05).
        k0: pilot draws; None → 0.01·n (this project's default, not checked against Chen et al. 2022's
            text; roy-ch/Input-Specific-Certification ``scripts/run_cifar10.sh`` uses 0.02·n).
        granularity: sample sizes are multiples of this; None → n / 500 (the authors' batch 200 at n = 1e5).
        reuse_pilot: add the pilot counts to the bound, as the reference implementation does. Its guarantee
            is not established (the sample size depends on the pilot); off by default.
    """

    decline: str = "ad"
    max_decline: float = 0.05
    k0: int | None = None
    granularity: int | None = None
    reuse_pilot: bool = False

    name = "iss"
    fixed_n = False
    selects_with_n0 = False
    n0_unset_reason = "The pilot (iss.k0 draws) selects the class"

    def validated(self, spec: CertificationSpec) -> InputSpecific:
        decline = choice("iss.decline", self.decline, DECLINES)
        upper = "in the open interval (0, 1)" if decline == "rd" else "> 0"
        max_decline = finite("iss.max_decline", self.max_decline, upper)
        if max_decline <= 0 or (decline == "rd" and max_decline >= 1):
            raise ConfigError("iss.max_decline", self.max_decline, f"{upper} for iss.decline={decline}")
        k0 = max(1, spec.n // 100) if self.k0 is None else self.k0
        if isinstance(k0, bool) or not isinstance(k0, int | np.integer) or not 1 <= k0 < spec.n:
            raise ConfigError("iss.k0", self.k0, f"an integer in [1, n) = [1, {spec.n})")
        granularity = max(1, spec.n // 500) if self.granularity is None else self.granularity
        if isinstance(granularity, bool) or not isinstance(granularity, int | np.integer):
            raise ConfigError("iss.granularity", self.granularity, f"an integer in [1, n] = [1, {spec.n}]")
        if not 1 <= granularity <= spec.n:
            raise ConfigError("iss.granularity", self.granularity, f"an integer in [1, n] = [1, {spec.n}]")
        reuse = flag("iss.reuse_pilot", self.reuse_pilot)
        return replace(
            self,
            decline=decline,
            max_decline=max_decline,
            k0=int(k0),
            granularity=int(granularity),
            reuse_pilot=reuse,
        )

    def resolve(self, spec: CertificationSpec, dim: int) -> InputSpecific:
        """An absolute (AD) decline must be below the largest radius certifiable in the spec's norm: ISS
        would otherwise plan zero draws and abstain everywhere (e.g. the L2 default 0.05 in L∞ units, where
        radii are ≈ 0.01)."""
        top = spec.certificate.max_radius(spec.require_sigma(), spec.n, spec.alpha, dim)
        if self.decline == "ad" and self.max_decline >= top:
            raise ConfigError(
                "iss.max_decline",
                self.max_decline,
                f"below the largest {spec.norm} radius certifiable (n={spec.n}, alpha={spec.alpha:g}): "
                f"{top:.4g}",
                "the decline is in the radius's own units (for norm=linf e.g. iss.max_decline=0.001, or "
                "iss.decline=rd for a relative one)",
            )
        return self

    def draw(self, spec: CertificationSpec, count: Count, groups: int, dim: int) -> Draws:
        """The pilot (own stream) picks the class and k̂; k̂ fresh estimation draws (``reuse_pilot``: k̂ - k0
        more, with the pilot counts added, as the reference code does)."""
        k0 = self.k0
        counts0 = count(Phase.PILOT, k0)
        selected = counts0.argmax(dim=1)
        self.resolve(spec, dim)
        psi = iss_table(
            spec.n,
            spec.alpha,
            spec.certificate,
            spec.sigma,
            dim,
            self.decline,
            self.max_decline,
            self.granularity,
        )  # max_decline is in the spec's norm
        k_hat = pilot_sample_sizes(pick(counts0, selected).cpu().numpy(), k0, psi, spec.alpha)
        n0, level = np.full(groups, k0, dtype=np.int64), np.full(groups, spec.alpha)
        if not self.reuse_pilot:
            counts = count(Phase.ESTIMATION, k_hat)
            return Draws(counts0, selected, counts, k_hat.astype(np.int64), n0, n0 + k_hat, level)
        warnings.warn(
            "iss.reuse_pilot=true adds the pilot counts to the Clopper-Pearson bound as the ISS reference "
            "code does; the sample size depends on those counts, so the 1 - alpha guarantee is not "
            "established (use the default iss.reuse_pilot=false for certificates)",
            UnestablishedGuaranteeWarning,
            stacklevel=4,
        )
        extra = np.where(k_hat > 0, np.maximum(k_hat - k0, 0), 0)
        counts = count(Phase.ESTIMATION, extra)
        counts = counts + counts0 * torch.as_tensor(k_hat > 0, device=counts.device)[:, None]
        n = np.where(k_hat > 0, np.maximum(k_hat, k0), 0)
        return Draws(counts0, selected, counts, n, n0, n0 + extra, level)

    def rows_fit(self, spec: CertificationSpec, n, n0, n_a0=None, dim: int | None = None) -> np.ndarray:
        return np.asarray(n) <= spec.n

    def expected(self, spec: CertificationSpec) -> str:
        return f"n <= {spec.n}"

    def max_draws(self, spec: CertificationSpec) -> int:
        return self.k0 + spec.n

    def describe(self, spec: CertificationSpec) -> str:
        reuse = ", reuse_pilot" if self.reuse_pilot else ""
        return f"sampling=iss({self.decline} {self.max_decline:g}, k0={self.k0}{reuse})"

    def label(self) -> str:
        return "ISS"
