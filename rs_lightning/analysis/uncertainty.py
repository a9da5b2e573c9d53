"""Uncertainty of the paper's metrics: bands for one run, paired verdicts for two runs on the same inputs.

Sun et al. (ICML 2025, *Average Certified Radius is a Poor Metric for Randomized Smoothing*) compare methods
by the distribution of p_A (the probability, under noise, of the true label) and by certified accuracy at
several radii. A run estimates them from M test inputs and n draws per input, so two sources of error meet:

- **which inputs were drawn**: the empirical curve of M inputs around the population curve (for a single
  curve, the Dvoretzky–Kiefer–Wolfowitz inequality with Massart's constant, *Ann. Probab.* 1990:
  P(sup_x |F_M − F| > ε) ≤ 2·exp(−2Mε²));
- **the Monte-Carlo error of each p̂_A**: per input, a two-sided Clopper–Pearson interval [L_i, U_i] for p_A at
  level γ = 0.2/M (for sequential rows at γ/K, valid at their stop by the union bound over the K looks; 0.2
  expected misses per run: fewer allowed misses cost less than the slightly wider intervals). The
  intervals are independent across inputs, so the number that miss is at most k = the (1 − β/2) quantile of
  Binomial(M, γ) with probability ≥ 1 − β/2; wherever at most k miss, the share of inputs with p_A ≥ x lies
  between the share with L_i ≥ x minus k/M and the share with U_i ≥ x plus k/M, for every x at once.

The band of one run's p_A curve y(x) = P(p_A ≥ x) (the report's "ECDF", Sun et al.'s Appendix B) is the union
of the two, each at β/2: simultaneous over x ∈ [0.5, 1] with probability ≥ 1 − β, exactly (no asymptotics).
Per input the true-label p_A is bracketed as: certified correct → [L, U] of n_A/n; certified another class
c → [0, 1 − L] (p_true ≤ 1 − p_c); abstained (the selected class is not recorded) → [0, max(U, 1 − L)].

Certified accuracy A(r) = P(an input is certified correctly at radius ≥ r) is a property of the whole
procedure (network, sampler, n, α), so each input's outcome is one Bernoulli draw of it: per radius an exact
Clopper–Pearson interval, simultaneous over radii the DKW band of the certified radius's distribution; ACR
gets a percentile bootstrap over inputs.

Two runs on the same inputs (paired): the difference of their p_A curves d(x) = y_A(x) − y_B(x) gets the same
Monte-Carlo term (both runs, β/4 each) plus, for which inputs were drawn, the (1 − β/2) quantile of
sup_x |d* − d| over paired bootstrap resamples of the inputs (Efron & Tibshirani, *An Introduction to the
Bootstrap*, 1993, ch. 13; the bootstrap of the empirical process is asymptotically valid, Giné & Zinn, Ann.
Probab. 1990) — the pairing is what makes two close methods
separable. A verdict names the side that is resolved above somewhere: "A ≥ B" (A resolved above B at some x,
B nowhere above A), "B ≥ A", "they cross" (each above somewhere) or "unresolved". Certified accuracy over a
radius grid is compared the same way (paired bootstrap, simultaneous), and ACR and certified-accuracy
differences get paired percentile bootstrap CIs. Each pair draws from its own generator, seeded by the two
runs' names (sorted), so a CI does not depend on which other runs were compared or in what order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import binom

from rs_lightning.smoothing.stats import clopper_pearson_interval
from rs_lightning.validation import ConfigError

from .metrics import ECDF_GRID, true_label_pa

DEFAULT_BETA = 0.05
RESAMPLES = 2000
EXPECTED_MISSES = 0.2
"""γ·M: the per-input interval level γ is this over the number of inputs M (a fixed rule, chosen before
seeing data; any fixed γ keeps the band valid)."""


def check_beta(value) -> float:
    """β, the error probability of a band or verdict: in (0, 1)."""
    try:
        beta = float(value)
    except (TypeError, ValueError):
        beta = float("nan")
    if not 0 < beta < 1:
        raise ConfigError("beta", value, "in the open interval (0, 1)")
    return beta


@dataclass(frozen=True)
class Band:
    """A confidence band: ``lower <= curve <= upper`` at every ``x`` with probability >= 1 − ``beta``
    (``simultaneous``) or at each ``x`` separately; ``point`` is the run's own estimate."""

    x: np.ndarray
    point: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    beta: float
    simultaneous: bool
    parts: dict = field(default_factory=dict)

    @property
    def max_half_width(self) -> float:
        return float(np.max(self.upper - self.lower) / 2) if self.x.size else 0.0


@dataclass(frozen=True)
class Counts:
    """The columns of one run that the bands need, sorted by ``idx``; ``looks`` > 1 for sequential rows
    (the number of looks their bound is spread over)."""

    idx: np.ndarray
    n_a: np.ndarray
    n: np.ndarray
    correct: np.ndarray
    predict: np.ndarray
    radius: np.ndarray
    looks: int = 1

    @classmethod
    def from_rows(cls, rows: dict, looks: int = 1) -> Counts:
        order = np.argsort(rows["idx"], kind="stable")
        take = lambda key: np.asarray(rows[key])[order]  # noqa: E731
        return cls(
            idx=take("idx"),
            n_a=take("nA"),
            n=take("n"),
            correct=take("correct").astype(bool),
            predict=take("predict"),
            radius=take("radius").astype(float),
            looks=int(looks),
        )

    @property
    def size(self) -> int:
        return int(self.idx.size)

    @property
    def pa(self) -> np.ndarray:
        """p̂_A of the true label (0 where wrong or abstained), as the report's curve uses it."""
        return true_label_pa(self.correct, n_a=self.n_a, n=self.n)

    @property
    def certified_radius(self) -> np.ndarray:
        """The radius of inputs certified correctly, −inf for the others (A(r) = share with this >= r)."""
        return np.where(self.correct, self.radius, -np.inf)


def input_intervals(counts: Counts, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Per input, ``[lo, hi]`` holding the true label's p_A with probability >= 1 − gamma (see the module)."""
    low, high = clopper_pearson_interval(counts.n_a, np.maximum(counts.n, 1), gamma / counts.looks)
    low, high = np.where(counts.n > 0, low, 0.0), np.where(counts.n > 0, high, 1.0)
    certified = counts.predict >= 0
    lo = np.where(counts.correct, low, 0.0)
    hi = np.where(counts.correct, high, np.where(certified, 1.0 - low, np.maximum(high, 1.0 - low)))
    return lo, hi


def allowed_misses(m: int, gamma: float, beta: float) -> int:
    """k: more than k of m independent intervals, each missing with probability <= gamma, miss with
    probability <= beta (the (1 − beta) quantile of Binomial(m, gamma), which dominates their count)."""
    return int(binom.ppf(1 - beta, m, gamma))


def dkw_epsilon(m: int, beta: float) -> float:
    """ε with P(sup_x |F_m − F| > ε) <= beta for an empirical distribution of m iid draws (DKW–Massart)."""
    return float(np.sqrt(np.log(2 / beta) / (2 * m)))


def _survival(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Share of ``values`` >= each grid point."""
    return (values[None, :] >= np.asarray(grid, dtype=float)[:, None] - 1e-12).mean(axis=1)


def pa_curve_band(counts: Counts, beta: float = DEFAULT_BETA, grid=ECDF_GRID) -> Band:
    """Simultaneous (1 − beta) band of the population curve y(x) = P(p_A >= x) over ``grid`` (module
    docstring: Clopper–Pearson per input at γ = 0.2/M with k allowed misses, plus DKW, β/2 each)."""
    beta, m, grid = check_beta(beta), counts.size, np.asarray(grid, dtype=float)
    gamma = EXPECTED_MISSES / m
    lo, hi = input_intervals(counts, gamma)
    k = allowed_misses(m, gamma, beta / 2)
    eps = dkw_epsilon(m, beta / 2)
    lower = np.clip(_survival(lo, grid) - k / m - eps, 0.0, 1.0)
    upper = np.clip(_survival(hi, grid) + k / m + eps, 0.0, 1.0)
    parts = {"inputs": m, "gamma": gamma, "allowed_misses": k, "dkw": eps, "looks": counts.looks}
    return Band(grid, _survival(counts.pa, grid), lower, upper, beta, True, parts)


def certified_accuracy_bands(counts: Counts, radii, beta: float = DEFAULT_BETA) -> tuple[Band, Band]:
    """``(pointwise, simultaneous)`` (1 − beta) bands of certified accuracy at ``radii``: exact
    Clopper–Pearson per radius, and the DKW band of the certified radius's distribution."""
    beta, m, radii = check_beta(beta), counts.size, np.asarray(radii, dtype=float)
    point = _survival(counts.certified_radius, radii)
    hits = np.round(point * m)
    low, high = clopper_pearson_interval(hits, m, beta)
    pointwise = Band(radii, point, low, high, beta, False, {"inputs": m})
    eps = dkw_epsilon(m, beta)
    simultaneous = Band(
        radii, point, np.clip(point - eps, 0, 1), np.clip(point + eps, 0, 1), beta, True, {"dkw": eps}
    )
    return pointwise, simultaneous


def pair_rng(*names: str) -> np.random.Generator:
    """A generator seeded by the (sorted) names of the runs it serves: the same CI whatever else is compared
    and in whatever order."""
    digest = hashlib.sha256("\x00".join(sorted(names)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def bootstrap_mean_ci(values: np.ndarray, beta: float, rng: np.random.Generator, resamples=RESAMPLES):
    """Percentile bootstrap (1 − beta) CI of the mean of ``values`` (resampling inputs)."""
    means = _resample_means(np.asarray(values, dtype=float)[:, None], rng, resamples)[:, 0]
    low, high = np.quantile(means, [beta / 2, 1 - beta / 2])
    return float(low), float(high)


def acr_ci(counts: Counts, beta: float = DEFAULT_BETA, name: str = "") -> tuple[float, float]:
    """(1 − beta) percentile bootstrap CI of the ACR over inputs."""
    per_input = np.where(counts.correct, counts.radius, 0.0)
    return bootstrap_mean_ci(per_input, check_beta(beta), pair_rng("acr", name))


def verdict(lower: np.ndarray, upper: np.ndarray, x: np.ndarray) -> dict:
    """From a band of d = A − B: which side is resolved above, and where."""
    above, below = lower > 0, upper < 0
    where_a, where_b = [float(v) for v in x[above]], [float(v) for v in x[below]]
    if above.any() and below.any():
        kind = "cross"
    elif above.any():
        kind = "A>=B"
    elif below.any():
        kind = "B>=A"
    else:
        kind = "unresolved"
    return {"verdict": kind, "a_above_at": where_a, "b_above_at": where_b}


def _check_paired(a: Counts, b: Counts) -> None:
    if a.size != b.size or not np.array_equal(a.idx, b.idx):
        shared = np.intersect1d(a.idx, b.idx).size
        raise ConfigError(
            "runs",
            f"{a.size} and {b.size} inputs ({shared} shared)",
            "certified on the same inputs",
            "a paired verdict compares the same test inputs; certify both on one subset",
        )


def _resample_means(per_input: np.ndarray, rng, resamples: int, chunk: int = 250) -> np.ndarray:
    """Column means of ``resamples`` bootstrap resamples of the rows (inputs): multinomial counts times the
    rows, as one matrix product per chunk."""
    m = per_input.shape[0]
    values = per_input.astype(np.float64)
    out = []
    for start in range(0, resamples, chunk):
        weights = rng.multinomial(m, np.full(m, 1.0 / m), size=min(chunk, resamples - start))
        out.append(weights @ values / m)
    return np.concatenate(out)


def _sup_bootstrap(per_input: np.ndarray, beta: float, rng, resamples: int) -> float:
    """(1 − beta) quantile of sup over columns of |mean of a resample − mean| (rows: inputs)."""
    means = _resample_means(per_input, rng, resamples)
    return float(np.quantile(np.max(np.abs(means - per_input.mean(axis=0)), axis=1), 1 - beta))


def paired_pa_curves(
    a: Counts,
    b: Counts,
    beta: float = DEFAULT_BETA,
    grid=ECDF_GRID,
    *,
    names=("A", "B"),
    resamples: int = RESAMPLES,
) -> dict:
    """The paired verdict on the p_A curves of two runs on the same inputs, with the simultaneous
    (1 − beta) band of d(x) = y_A(x) − y_B(x) (module docstring)."""
    beta, grid = check_beta(beta), np.asarray(grid, dtype=float)
    _check_paired(a, b)
    m = a.size
    gamma = EXPECTED_MISSES / m
    (lo_a, hi_a), (lo_b, hi_b) = input_intervals(a, gamma), input_intervals(b, gamma)
    k = allowed_misses(m, gamma, beta / 4) * 2
    d_lo = _survival(lo_a, grid) - _survival(hi_b, grid)
    d_hi = _survival(hi_a, grid) - _survival(lo_b, grid)
    ind = (a.pa[:, None] >= grid[None, :] - 1e-12).astype(np.int8) - (
        b.pa[:, None] >= grid[None, :] - 1e-12
    ).astype(np.int8)
    eps = _sup_bootstrap(ind, beta / 2, pair_rng("pa", *names), resamples)
    lower, upper = d_lo - k / m - eps, d_hi + k / m + eps
    band = Band(grid, ind.mean(axis=0), lower, upper, beta, True, {"allowed_misses": k, "bootstrap": eps})
    return {"band": band, **verdict(lower, upper, grid)}


def paired_certified_accuracy(
    a: Counts, b: Counts, radii, beta: float = DEFAULT_BETA, *, names=("A", "B"), resamples: int = RESAMPLES
) -> dict:
    """The paired verdict on certified accuracy over ``radii`` (simultaneous paired bootstrap band of the
    difference) and per-radius paired percentile CIs of the difference."""
    beta, radii = check_beta(beta), np.asarray(radii, dtype=float)
    _check_paired(a, b)
    hits_a = (a.certified_radius[:, None] >= radii[None, :] - 1e-12).astype(float)
    hits_b = (b.certified_radius[:, None] >= radii[None, :] - 1e-12).astype(float)
    diff = hits_a - hits_b
    means = _resample_means(diff, pair_rng("ca", *names), resamples)
    point = diff.mean(axis=0)
    eps = float(np.quantile(np.max(np.abs(means - point), axis=1), 1 - beta))
    band = Band(radii, point, point - eps, point + eps, beta, True, {"bootstrap": eps})
    low, high = np.quantile(means, [beta / 2, 1 - beta / 2], axis=0)
    pointwise = Band(radii, point, low, high, beta, False)
    return {"band": band, "pointwise": pointwise, **verdict(band.lower, band.upper, radii)}


def paired_acr_ci(
    a: Counts, b: Counts, beta: float = DEFAULT_BETA, *, names=("A", "B")
) -> tuple[float, float]:
    """Paired percentile bootstrap (1 − beta) CI of ACR(A) − ACR(B)."""
    _check_paired(a, b)
    diff = np.where(a.correct, a.radius, 0.0) - np.where(b.correct, b.radius, 0.0)
    return bootstrap_mean_ci(diff, check_beta(beta), pair_rng("acr", *names))


__all__ = [
    "DEFAULT_BETA",
    "Band",
    "Counts",
    "acr_ci",
    "certified_accuracy_bands",
    "check_beta",
    "pa_curve_band",
    "paired_acr_ci",
    "paired_certified_accuracy",
    "paired_pa_curves",
    "pair_rng",
    "verdict",
]
