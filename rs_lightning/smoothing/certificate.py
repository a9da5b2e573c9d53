"""One certificate type per (noise distribution, norm): what a lower bound on p_A certifies, and the noise.

A :class:`Certificate` owns, for its noise and norm: the noise's scale from ``sigma`` (``sigma`` is always the
noise's per-coordinate standard deviation, as in Yang et al., ICML 2020, *Randomized Smoothing of All
Shapes and Sizes*, which compares noises at equal σ), the standard noise drawn from a seeded generator, the
radius certified by a lower bound p on p_A (with p_B ≤ 1 − p), the largest radius certifiable with n draws
at level α, the default radius step of reports, and the label of tables.

Radii, with λ the noise's scale (Yang et al. 2020, Table 1 and their code tonyduan/rs4a ``src/noises``;
Cohen, Rosenfeld & Kolter, ICML 2019, Thm. 1; Teng, Lee & Yuan, *ℓ1 Adversarial Robustness
Certificates: a Randomized Smoothing Approach*, OpenReview 2019 (ICLR 2020 submission), Thm. 1; see
docs/references.md):

- Gaussian N(0, σ²I), λ = σ: L2 radius σΦ⁻¹(p). By the inclusion of balls it also certifies L1 radius
  σΦ⁻¹(p) (‖δ‖₂ ≤ ‖δ‖₁) and L∞ radius σΦ⁻¹(p)/√d (‖δ‖₂ ≤ √d‖δ‖∞).
- Laplace with scale λ = σ/√2 per coordinate: L1 radius −λ·ln(2(1 − p)).
- Uniform on [−λ, λ]^d, λ = √3·σ: L1 radius 2λ(p − ½); L∞ radius 2λ(1 − (3/2 − p)^(1/d)).

Every radius is 0 for p ≤ ½ (CERTIFY abstains there). Other (noise, norm) pairs have no certificate here and
are refused naming the pairs that have one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import log_ndtr
from scipy.stats import norm as normal

from rs_lightning.validation import ConfigError

NOISES = ("gaussian", "laplace", "uniform")
NORMS = ("l2", "l1", "linf")
L2, L1, LINF = NORMS  # for code that names one norm
NORMS_OF = {"gaussian": ("l2", "l1", "linf"), "laplace": ("l1",), "uniform": ("l1", "linf")}
"""The norms each noise certifies (the first is its own; Gaussian L1/L∞ by the inclusion of balls)."""
SCALE_OVER_SIGMA = {"gaussian": 1.0, "laplace": 1 / math.sqrt(2), "uniform": math.sqrt(3)}
"""λ / σ: the scale that gives each noise the per-coordinate standard deviation σ."""
LABELS = {"l2": "L2", "l1": "L1", "linf": "L∞"}
STEPS = {"l2": 0.25, "l1": 0.25, "linf": 1 / 255}
"""Default radius step of reports: 0.25 (L2/L1, as Cohen et al.) and one 8-bit grey level (L∞)."""


_PHI_OF_ONE = float(normal.cdf(1.0))


def pairs_text() -> str:
    return ", ".join(f"{noise}+{norm}" for noise, norms in NORMS_OF.items() for norm in norms)


@dataclass(frozen=True)
class Certificate:
    """The certificate of ``noise`` stated in ``norm`` (None = the noise's own: L2 for Gaussian, L1 for the
    others; validated: a pair without a certificate is refused)."""

    noise: str = "gaussian"
    norm: str | None = None

    def __post_init__(self) -> None:
        if self.noise not in NOISES:
            raise ConfigError("noise", self.noise, "one of " + ", ".join(NOISES))
        if self.norm is None:
            object.__setattr__(self, "norm", NORMS_OF[self.noise][0])
        if self.norm not in NORMS_OF[self.noise]:
            raise ConfigError(
                "norm", self.norm, f"a norm {self.noise} noise certifies",
                f"the pairs with a certificate are {pairs_text()}",
            )  # fmt: skip

    @property
    def label(self) -> str:
        return LABELS[self.norm]

    @property
    def needs_dim(self) -> bool:
        """Whether the radius depends on the input dimension d (the L∞ certificates)."""
        return self.norm == "linf"

    @property
    def default_step(self) -> float:
        return STEPS[self.norm]

    def scale(self, sigma: float) -> float:
        """λ, the noise's scale parameter at per-coordinate standard deviation ``sigma``."""
        return SCALE_OVER_SIGMA[self.noise] * float(sigma)

    def gaussian_scale(self, sigma: float, dim: int | None = None) -> float:
        """s in the Gaussian radius s·Φ⁻¹(p): σ in L2 and L1, σ/√d in L∞ (budget conversions scale by it)."""
        if self.noise != "gaussian":
            raise ValueError(f"{self.noise} radii are not s·Φ⁻¹(p_A): only Gaussian ones are")
        return self.scale(sigma) / math.sqrt(_dim(dim)) if self.norm == "linf" else self.scale(sigma)

    def conversion_factor(self, norm: str, dim: int | None = None) -> float:
        """What this certificate's radii are multiplied by to state them in ``norm`` — Gaussian only, where
        every norm's radius is the L2 radius over the inclusion of balls (L2 → L∞: 1/√d, L∞ → L2: √d)."""
        target = Certificate(self.noise, norm)
        return target.gaussian_scale(1.0, dim) / self.gaussian_scale(1.0, dim)

    def radius(self, pa_lower, sigma: float, dim: int | None = None) -> np.ndarray:
        """The radius in ``norm`` certified by ``pa_lower`` (0 where it is <= 1/2); L∞ needs ``dim``."""
        p = np.clip(np.asarray(pa_lower, dtype=np.float64), 0.5, 1.0)
        lam = self.scale(sigma)
        if self.noise == "gaussian":
            r = self.gaussian_scale(sigma, dim) * normal.ppf(p)
        elif self.noise == "laplace":
            with np.errstate(divide="ignore"):
                r = -lam * np.log(2 * (1 - p))
        elif self.norm == "l1":
            r = 2 * lam * (p - 0.5)
        else:
            r = 2 * lam * (1 - (1.5 - p) ** (1 / _dim(dim)))
        return np.where(np.asarray(pa_lower) <= 0.5, 0.0, r)

    def threshold(self, radius, sigma: float, dim: int | None = None) -> np.ndarray:
        """The p_A a lower bound must reach to certify ``radius`` (the inverse of :meth:`radius`; above 1 for
        a radius no bound can certify)."""
        r = np.asarray(radius, dtype=np.float64)
        lam = self.scale(sigma)
        if self.noise == "gaussian":
            return normal.cdf(r / self.gaussian_scale(sigma, dim))
        if self.noise == "laplace":
            return 1 - 0.5 * np.exp(-r / lam)
        if self.norm == "l1":
            return 0.5 + r / (2 * lam)
        with np.errstate(invalid="ignore"):
            return np.where(r < 2 * lam, 1.5 - (1 - r / (2 * lam)) ** _dim(dim), np.inf)

    def radius_at_tail(self, tail, sigma: float, dim: int | None = None) -> np.ndarray:
        """:meth:`radius` at p = 1 − ``tail``, computed from the tail so that p within 1e-16 of 1 keeps its
        precision (e.g. α^(1/N) for budgets N of 10^12 and more); 0 where ``tail`` >= 1/2."""
        q = np.clip(np.asarray(tail, dtype=np.float64), 0.0, 0.5)
        lam = self.scale(sigma)
        if self.noise == "gaussian":
            r = self.gaussian_scale(sigma, dim) * normal.isf(q)
        elif self.noise == "laplace":
            with np.errstate(divide="ignore"):
                r = -lam * np.log(2 * q)
        elif self.norm == "l1":
            r = 2 * lam * (0.5 - q)
        else:
            r = 2 * lam * (1 - (0.5 + q) ** (1 / _dim(dim)))
        return np.where(np.asarray(tail) >= 0.5, 0.0, r)

    def log_threshold(self, radius, sigma: float, dim: int | None = None) -> np.ndarray:
        """ln :meth:`threshold`, accurate where the threshold is within 1e-16 of 1 (Gaussian: ln Φ(r/s))."""
        r = np.asarray(radius, dtype=np.float64)
        if self.noise == "gaussian":
            return log_ndtr(r / self.gaussian_scale(sigma, dim))
        if self.noise == "laplace":
            return np.log1p(-0.5 * np.exp(-r / self.scale(sigma)))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(self.threshold(r, sigma, dim))

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

    def sample(
        self, shape, generator: torch.Generator, device, dtype=torch.float32, out=None
    ) -> torch.Tensor:
        """Standard noise (scale λ = 1) of ``shape`` from ``generator``: N(0, 1), Laplace(0, 1) or U[−1, 1]
        per coordinate; the caller multiplies by :meth:`scale`."""
        if self.noise == "gaussian":
            return torch.randn(shape, generator=generator, device=device, dtype=dtype, out=out)
        # drawn and transformed in float32 (in bf16 a uniform draw is 0 once in 256: ln 0 = -inf), then cast
        u = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
        if self.noise == "uniform":
            drawn = u.mul_(2).sub_(1)
        else:  # Laplace by inversion: -sign(v)·ln(1 − 2|v|) for v = u − ½ uniform on (−½, ½)
            v = u.sub_(0.5)
            drawn = v.sign() * -torch.log1p(-2 * v.abs().clamp(max=0.5 - 1e-7))
        return drawn.to(dtype) if out is None else out.copy_(drawn)


def default_norm(noise: str) -> str:
    """The norm ``noise`` certifies natively: L2 for Gaussian, L1 for Laplace and uniform."""
    return NORMS_OF[noise][0] if noise in NORMS_OF else "l2"


def of(noise: str | None = None, norm: str | None = None) -> Certificate:
    """The certificate of a run's recorded ``noise`` and ``norm`` (None, as in runs written before the key
    existed: Gaussian, and the noise's own norm)."""
    return Certificate(noise or "gaussian", norm)


def radius_from_pa(pa_lower, sigma: float, norm: str = "l2", dim: int | None = None) -> np.ndarray:
    """The Gaussian certificate's radius in ``norm`` (Cohen et al. 2019, Thm. 1 with p_B = 1 − p_A): σΦ⁻¹(p)
    for L2 and L1, σΦ⁻¹(p)/√d for L∞; 0 where p <= 1/2."""
    return Certificate("gaussian", norm).radius(pa_lower, sigma, dim)


def grid_to(top: float, step: float, fit: bool = True) -> np.ndarray:
    """0, step, 2·step, … up to ``top``, rounded to 6 digits (more for steps below 1e-3). ``fit``: a step
    larger than ``top`` becomes a tenth of it (two significant digits) — e.g. uniform L∞, whose radii are
    ~2λ·ln 2/d, far below the L∞ step 1/255 — so the grid is not just [0]."""
    if fit and 0 < top < step:
        step = float(f"{top / 10:.2g}")
    digits = max(6, 3 - math.floor(math.log10(step)))
    return np.round(np.arange(0.0, top + min(1e-9, step * 1e-6), step), digits)


def max_certifiable_radius(
    sigma: float, n: int, alpha: float, norm: str = "l2", dim: int | None = None
) -> float:
    """The Gaussian certificate's :meth:`Certificate.max_radius`."""
    return Certificate("gaussian", norm).max_radius(sigma, n, alpha, dim)


def radius_grid(
    sigma: float, n: int, alpha: float, step: float | None = None, norm: str = "l2", dim: int | None = None
) -> np.ndarray:
    """The Gaussian certificate's :meth:`Certificate.radius_grid`."""
    return Certificate("gaussian", norm).radius_grid(sigma, n, alpha, step, dim)


def gaussian_quantile(p: torch.Tensor) -> torch.Tensor:
    """Φ⁻¹(p) in torch, differentiable (MACER's soft radius, Zhai et al. 2020, Thm. 1): √2·erfinv(2p − 1),
    the values of ``torch.distributions.Normal(0, 1).icdf``."""
    return torch.erfinv(2 * p - 1) * math.sqrt(2)


def _dim(dim: int | None) -> int:
    if dim is None or int(dim) < 1:
        raise ValueError(f"an L∞ radius needs the input dimension d = C*H*W >= 1, got dim={dim!r}")
    return int(dim)
