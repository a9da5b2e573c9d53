"""A certificate is a noise with a norm: what a lower bound on p_A certifies, in that norm, under that noise.

The noise (:mod:`.noises`, one class per distribution) owns its sampling, its scale λ from ``sigma`` (always
the per-coordinate standard deviation, as in Yang et al., ICML 2020, *Randomized Smoothing of All Shapes and
Sizes*, which compares noises at equal σ), and its radius, threshold and tail in each norm it certifies
(Gaussian: L2, L1, L∞; Laplace: L1; uniform: L1, L∞; the formulas and their sources are in each noise's
module). A :class:`Certificate` adds what is common to every noise: the pair's validation, the abstention at
p ≤ ½, the largest radius n draws can certify, the default radius step of reports and the label of tables.
Other (noise, norm) pairs have no certificate here and are refused naming the pairs that have one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm as normal

from rs_lightning.validation import ConfigError

from .noises import NOISE_CLASSES, Gaussian, Noise, noise_of

NOISES = NOISE_CLASSES.keys()
"""The known noises' names (a live view: a noise registered later is in it)."""
NORMS = ("l2", "l1", "linf")
L2, L1, LINF = NORMS  # for code that names one norm
LABELS = {"l2": "L2", "l1": "L1", "linf": "L∞"}
STEPS = {"l2": 0.25, "l1": 0.25, "linf": 1 / 255}
"""Default radius step of reports: 0.25 (L2/L1, as Cohen et al.) and one 8-bit grey level (L∞)."""


_PHI_OF_ONE = float(normal.cdf(1.0))


def pairs_text() -> str:
    return ", ".join(f"{name}+{norm}" for name, cls in NOISE_CLASSES.items() for norm in cls.norms)


@dataclass(frozen=True)
class Certificate:
    """The certificate of the noise named ``noise`` stated in ``norm`` (None = the noise's own: L2 for
    Gaussian, L1 for the others; validated: a pair without a certificate is refused)."""

    noise: str = "gaussian"
    norm: str | None = None

    def __post_init__(self) -> None:
        if self.noise not in NOISES:
            raise ConfigError("noise", self.noise, "one of " + ", ".join(NOISES))
        norms = NOISE_CLASSES[self.noise].norms
        if self.norm is None:
            object.__setattr__(self, "norm", norms[0])
        if self.norm not in norms:
            raise ConfigError(
                "norm",
                self.norm,
                f"a norm {self.noise} noise certifies",
                f"the pairs with a certificate are {pairs_text()}",
            )

    @property
    def distribution(self) -> Noise:
        """The noise itself (:mod:`.noises`): what training and certification draw."""
        return noise_of(self.noise)

    @property
    def label(self) -> str:
        return LABELS[self.norm]

    @property
    def needs_dim(self) -> bool:
        """Whether the radius depends on the input dimension d (the L∞ certificates, the lattice noise's)."""
        return self.distribution.needs_dim(self.norm)

    @property
    def default_step(self) -> float:
        return STEPS[self.norm]

    def scale(self, sigma: float) -> float:
        """λ, the noise's scale parameter at per-coordinate standard deviation ``sigma``."""
        return self.distribution.scale(sigma)

    def gaussian_scale(self, sigma: float, dim: int | None = None) -> float:
        """s in the Gaussian radius s·Φ⁻¹(p): σ in L2 and L1, σ/√d in L∞ (budget conversions scale by it)."""
        if not isinstance(self.distribution, Gaussian):
            raise ValueError(f"{self.noise} radii are not s·Φ⁻¹(p_A): only Gaussian ones are")
        return Gaussian.radius_scale(self.scale(sigma), self.norm, dim)

    def conversion_factor(self, norm: str, dim: int | None = None) -> float:
        """What this certificate's radii are multiplied by to state them in ``norm`` — Gaussian only, where
        every norm's radius is the L2 radius over the inclusion of balls (L2 → L∞: 1/√d, L∞ → L2: √d)."""
        target = Certificate(self.noise, norm)
        return target.gaussian_scale(1.0, dim) / self.gaussian_scale(1.0, dim)

    def radius(self, pa_lower, sigma: float, dim: int | None = None) -> np.ndarray:
        """The radius in ``norm`` certified by ``pa_lower`` (0 where it is <= 1/2); L∞ needs ``dim``."""
        p = np.clip(np.asarray(pa_lower, dtype=np.float64), 0.5, 1.0)
        r = self.distribution.radius(p, self.scale(sigma), self.norm, dim)
        return np.where(np.asarray(pa_lower) <= 0.5, 0.0, r)

    def threshold(self, radius, sigma: float, dim: int | None = None) -> np.ndarray:
        """The p_A a lower bound must reach to certify ``radius`` (the inverse of :meth:`radius`; above 1 for
        a radius no bound can certify)."""
        r = np.asarray(radius, dtype=np.float64)
        return self.distribution.threshold(r, self.scale(sigma), self.norm, dim)

    def radius_at_tail(self, tail, sigma: float, dim: int | None = None) -> np.ndarray:
        """:meth:`radius` at p = 1 − ``tail``, computed from the tail so that p within 1e-16 of 1 keeps its
        precision (e.g. α^(1/N) for budgets N of 10^12 and more); 0 where ``tail`` >= 1/2."""
        q = np.clip(np.asarray(tail, dtype=np.float64), 0.0, 0.5)
        r = self.distribution.radius_at_tail(q, self.scale(sigma), self.norm, dim)
        return np.where(np.asarray(tail) >= 0.5, 0.0, r)

    def log_threshold(self, radius, sigma: float, dim: int | None = None) -> np.ndarray:
        """ln :meth:`threshold`, accurate where the threshold is within 1e-16 of 1 (Gaussian: ln Φ(r/s))."""
        r = np.asarray(radius, dtype=np.float64)
        return self.distribution.log_threshold(r, self.scale(sigma), self.norm, dim)

    def max_radius(self, sigma: float, n: int, alpha: float, dim: int | None = None) -> float:
        """The largest radius CERTIFY can return with ``n`` draws at level ``alpha``: all n agreeing gives
        the Clopper–Pearson bound α^(1/n) (for Gaussian L2, n = 1e5 and α = 1e-3: 3.811·σ)."""
        return float(self.radius(alpha ** (1.0 / n), sigma, dim))

    def radius_grid(
        self, sigma: float, n: int, alpha: float, step: float | None = None, dim: int | None = None
    ) -> np.ndarray:
        """Radii 0, step, 2·step, … up to :meth:`max_radius` (the certified-accuracy grid of reports and of
        the sequential sampler); ``step`` None = :attr:`default_step`."""
        top = self.max_radius(sigma, n, alpha, dim)
        return grid_to(top, self.default_step if step is None else step, fit=step is None)

    def unit(self, sigma: float, dim: int | None = None) -> float:
        """The radius certified by p_A = Φ(1) (σ for Gaussian L2): a natural unit for tolerances."""
        return float(self.radius(_PHI_OF_ONE, sigma, dim))


def default_norm(noise: str) -> str:
    """The norm ``noise`` certifies natively: L2 for Gaussian, L1 for Laplace and uniform."""
    return NOISE_CLASSES[noise].norms[0] if noise in NOISE_CLASSES else "l2"


def of(noise: str | None = None, norm: str | None = None) -> Certificate:
    """The certificate of a run's recorded ``noise`` and ``norm`` (None, as in runs written before the key
    existed: Gaussian, and the noise's own norm)."""
    return Certificate(noise or "gaussian", norm)


def grid_to(top: float, step: float, fit: bool = True) -> np.ndarray:
    """0, step, 2·step, … up to ``top``, rounded to 6 digits (more for steps below 1e-3). ``fit``: a step
    larger than ``top`` becomes a tenth of it (two significant digits) — e.g. uniform L∞, whose radii are
    ~2λ·ln 2/d, far below the L∞ step 1/255 — so the grid is not just [0]."""
    if fit and 0 < top < step:
        step = float(f"{top / 10:.2g}")
    digits = max(6, 3 - math.floor(math.log10(step)))
    return np.round(np.arange(0.0, top + min(1e-9, step * 1e-6), step), digits)
