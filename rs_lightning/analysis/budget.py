"""Certified accuracy and ACR at another sampling budget N′, from the per-input counts of one run.

Sun et al. 2025, *Average Certified Radius is a Poor Metric for Randomized Smoothing*, Appendix B (its ECDFs:
eth-sri/acr-weakness ``data/ecdf/``): treat each input's p̂_A = n_A/N (true label; 0 if wrong or abstained) as
its true p_A and ask what CERTIFY would return with N′ estimation draws. Two rules:

- ``"plugin"``: the expected count, R_{N′}(p) = σ·Φ⁻¹(CP_lower(round(p·N′), N′, α)) if that bound is ≥ 1/2,
  else 0 (abstain). At N′ = N it reproduces the run's own radii, so its certified accuracy and ACR.
- ``"expected"``: E[R_{N′}(n_A)] with n_A ~ Binomial(N′, p̂), summed over the binomial pmf. For 0 < p̂ < 1
  the sum runs over the pmf's effective support [F⁻¹(tol), F̄⁻¹(tol)], which leaves out at most 2·tol of
  probability, so each input's expected radius is low by at most 2·tol·σ·Φ⁻¹(α^(1/N′)); ``tol=0`` sums
  over all N′+1 counts. The n0 selection step is ignored (p̂ = 0 inputs stay at 0).

Both rules are biased upward for N′ > N: inputs with p̂ = 1 are assumed to have p_A = 1. Also here: the
closed form of the constant classifier's ACR (Sun et al. 2025, Theorem 1) and a plot of ACR against N′.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from scipy.stats import binom

from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.stats import clopper_pearson_lower

from .metrics import certified_accuracy

GAUSSIAN_L2 = Certificate()
"""The conversion's radii are s·Φ⁻¹(p) of Gaussian noise; ``sigma`` below is that s (σ, or σ/√d in L∞)."""
RULES = ("plugin", "expected")
DEFAULT_TOL = 1e-12
"""Probability mass of n_A ~ Bin(N′, p̂) the ``expected`` rule may leave out in each tail."""
MAX_TERMS = 50_000_000
"""Largest number of (input, count) terms the ``expected`` rule sums before refusing (memory/time)."""
EXTRAPOLATION_WARNING = "biased upward: inputs with p̂ = 1 are assumed to have p_A = 1"


class BudgetExtrapolationWarning(UserWarning):
    """A conversion to N′ larger than the run's N (see :data:`EXTRAPOLATION_WARNING`)."""


def check_budget(budget) -> int:
    """``N′`` as an int >= 1, else ValueError naming N'."""
    if isinstance(budget, bool) or not float(budget).is_integer() or float(budget) < 1:
        raise ValueError(f"N'={budget!r} is invalid: the budget N' must be an integer >= 1")
    return int(budget)


def warn_if_extrapolated(budget: int, n: int | None) -> bool:
    """Warn (and return True) when ``budget`` exceeds the run's ``n``."""
    if n is None or budget <= n:
        return False
    warnings.warn(f"N'={budget} > N={n}: {EXTRAPOLATION_WARNING}", BudgetExtrapolationWarning, stacklevel=3)
    return True


def radius_at_count(counts, budget: int, sigma: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``(radius, certified)`` of CERTIFY with n_A = ``counts`` of N′ = ``budget`` (Cohen et al. 2019 Alg. 1).

    certified ⇔ CP_lower(n_A, N′, α) ≥ 1/2; radius = σ·Φ⁻¹(CP_lower) there, else 0.
    """
    lower = clopper_pearson_lower(counts, budget, alpha)
    return GAUSSIAN_L2.radius(lower, sigma), lower >= 0.5


def plugin_counts(pa, budget: int) -> np.ndarray:
    """round(p·N′) (halves up); exact at N′ = N for p = n_A/N."""
    return np.floor(np.asarray(pa, dtype=float) * budget + 0.5)


def plugin_radius(pa, budget, sigma: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The plug-in rule: ``(R_{N′}(p̂), certified)`` per input."""
    budget = check_budget(budget)
    return radius_at_count(plugin_counts(pa, budget), budget, sigma, alpha)


def _smallest_count(budget: int, accept) -> int | None:
    """Smallest k in [0, N′] with ``accept(k)`` (monotone in k), or None."""
    if not accept(budget):
        return None
    lo, hi = -1, budget  # accept(hi) holds, accept(lo) is taken to fail
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if accept(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _count_for_radius(budget: int, sigma: float, alpha: float, r: float) -> int | None:
    """Smallest n_A whose CERTIFY result is certified with radius >= r (None if none)."""

    def accept(k: int) -> bool:
        radius, certified = radius_at_count(k, budget, sigma, alpha)
        return bool(certified) and float(radius) >= r

    return _smallest_count(budget, accept)


def _union_of_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sorted integers in the union of the closed ranges [lo_i, hi_i]."""
    order = np.argsort(lo)
    parts, cur_lo, cur_hi = [], int(lo[order[0]]), int(hi[order[0]])
    for a, b in zip(lo[order[1:]], hi[order[1:]], strict=True):
        if a > cur_hi + 1:
            parts.append(np.arange(cur_lo, cur_hi + 1))
            cur_lo, cur_hi = int(a), int(b)
        else:
            cur_hi = max(cur_hi, int(b))
    parts.append(np.arange(cur_lo, cur_hi + 1))
    return np.concatenate(parts)


def expected_radius(pa, budget, sigma: float, alpha: float, tol: float = DEFAULT_TOL) -> np.ndarray:
    """The expectation rule: E[R_{N′}(n_A)], n_A ~ Binomial(N′, p̂), per input (see the module docstring)."""
    budget = check_budget(budget)
    pa = np.asarray(pa, dtype=float)
    values, inverse = np.unique(pa, return_inverse=True)
    out = np.zeros(values.shape)
    k_star = _count_for_radius(budget, sigma, alpha, 0.0)  # smallest certified count
    if k_star is None:
        return out[inverse]
    out[values >= 1.0] = radius_at_count(budget, budget, sigma, alpha)[0]
    inner = np.flatnonzero((values > 0.0) & (values < 1.0))
    p = values[inner]
    if tol > 0:
        lo = np.maximum(binom.ppf(tol, budget, p), k_star)
        hi = binom.isf(tol, budget, p)
    else:
        lo, hi = np.full(p.shape, float(k_star)), np.full(p.shape, float(budget))
    keep = hi >= lo
    inner, p, lo, hi = inner[keep], p[keep], lo[keep].astype(np.int64), hi[keep].astype(np.int64)
    if inner.size == 0:
        return out[inverse]
    widths = hi - lo + 1
    if int(widths.sum()) > MAX_TERMS:
        raise ValueError(
            f"N'={budget}: the expectation rule would sum {int(widths.sum()):,} terms (> {MAX_TERMS:,}); "
            "use the plug-in rule at this budget"
        )
    needed = _union_of_ranges(lo, hi)  # R(k) once for every count any input needs
    radius_needed = radius_at_count(needed, budget, sigma, alpha)[0]
    order = np.argsort(widths)  # chunks of similar widths, at most ~4e6 terms each
    start = 0
    while start < order.size:
        stop = start + 1
        while stop < order.size and (stop - start + 1) * int(widths[order[stop]]) <= 4_000_000:
            stop += 1
        rows = order[start:stop]
        ks = lo[rows, None] + np.arange(int(widths[rows].max()))[None, :]
        valid = ks <= hi[rows, None]
        ks = np.where(valid, ks, lo[rows, None])
        pmf = np.where(valid, binom.pmf(ks, budget, p[rows, None]), 0.0)
        out[inner[rows]] = (pmf * radius_needed[np.searchsorted(needed, ks)]).sum(axis=1)
        start = stop
    return out[inverse]


def expected_certified_accuracy(pa, budget, sigma: float, alpha: float, radii) -> np.ndarray:
    """E[share of inputs certified with radius >= r] = mean_i P(n_A >= k_r), n_A ~ Bin(N′, p̂_i); exact."""
    budget = check_budget(budget)
    pa = np.asarray(pa, dtype=float)
    out = []
    for r in np.atleast_1d(np.asarray(radii, dtype=float)):
        k_r = _count_for_radius(budget, sigma, alpha, float(r))
        out.append(0.0 if k_r is None or pa.size == 0 else float(binom.sf(k_r - 1, budget, pa).mean()))
    return np.asarray(out)


def acr_at_budget(
    pa, budget, sigma: float, alpha: float, rule: str = "plugin", n: int | None = None
) -> float:
    """ACR at N′ by ``rule`` (``"plugin"`` or ``"expected"``); warns when N′ > the run's ``n``."""
    budget = check_budget(budget)
    warn_if_extrapolated(budget, n)
    pa = np.asarray(pa, dtype=float)
    if pa.size == 0:
        return 0.0
    if rule == "plugin":
        return float(plugin_radius(pa, budget, sigma, alpha)[0].mean())
    if rule == "expected":
        return float(expected_radius(pa, budget, sigma, alpha).mean())
    raise ValueError(f"rule={rule!r} is invalid: rule must be one of {RULES}")


def certified_accuracy_at_budget(
    pa, budget, sigma: float, alpha: float, radii, rule: str = "plugin", n: int | None = None
) -> np.ndarray:
    """Certified accuracy at ``radii`` with N′ draws by ``rule``; warns when N′ > the run's ``n``."""
    budget = check_budget(budget)
    warn_if_extrapolated(budget, n)
    if rule == "plugin":
        radius, certified = plugin_radius(pa, budget, sigma, alpha)
        return certified_accuracy(radius, certified, radii)
    if rule == "expected":
        return expected_certified_accuracy(pa, budget, sigma, alpha, radii)
    raise ValueError(f"rule={rule!r} is invalid: rule must be one of {RULES}")


def budget_table(
    pa,
    *,
    n: int | None,
    sigma: float,
    alpha: float,
    budgets: Iterable[int],
    radii: Sequence[float] = (),
    rules: Sequence[str] = RULES,
) -> list[dict]:
    """One row per (N′, rule): ``budget, rule, acr, certified_accuracy {r: value}, extrapolated``.

    ``extrapolated`` is True (and a :class:`BudgetExtrapolationWarning` is issued) when N′ > ``n``. Where
    the expectation rule would be too large to sum (N′ ≳ 1e8), its row has ``acr = nan`` and a ``note``.
    """
    budgets = [check_budget(b) for b in budgets]
    pa = np.asarray(pa, dtype=float)
    rows = []
    for budget in budgets:
        extrapolated = warn_if_extrapolated(budget, n)
        for rule in rules:
            row = {"budget": budget, "rule": rule, "extrapolated": extrapolated, "note": ""}
            try:
                row["acr"] = acr_at_budget(pa, budget, sigma, alpha, rule)
                cert = certified_accuracy_at_budget(pa, budget, sigma, alpha, radii, rule)
            except ValueError as err:
                if rule != "expected":
                    raise
                row["acr"], cert, row["note"] = math.nan, np.full(len(radii), np.nan), str(err)
            row["certified_accuracy"] = {float(r): float(a) for r, a in zip(radii, cert, strict=True)}
            if extrapolated:
                row["note"] = (row["note"] + "; " if row["note"] else "") + EXTRAPOLATION_WARNING
            rows.append(row)
    return rows


def class_shares(labels) -> dict[int, float]:
    """π_c = share of inputs of each class c."""
    labels = np.asarray(labels, dtype=np.int64)
    values, counts = np.unique(labels, return_counts=True)
    return {int(c): float(k) / labels.size for c, k in zip(values, counts, strict=True)}


def constant_classifier_acr(share: float, sigma: float, alpha: float, budget) -> np.ndarray | float:
    """ACR(h) = π_c·σ·Φ⁻¹(α^(1/N)) of the constant classifier h ≡ c (Sun et al. 2025, Theorem 1).

    Computed as π_c·σ·Φ̄⁻¹(1 − α^(1/N)) with 1 − α^(1/N) = −expm1(ln α / N), accurate for any N.
    """
    budget = np.asarray(budget, dtype=float)
    if np.any(budget < 1):
        raise ValueError(f"N'={budget.min()!r} is invalid: the budget N' must be >= 1")
    value = GAUSSIAN_L2.radius_at_tail(-np.expm1(np.log(alpha) / budget), share * sigma)
    return float(value) if value.ndim == 0 else value


def constant_classifier_budget(acr: float, share: float, sigma: float, alpha: float) -> float:
    """The N at which the constant classifier reaches ``acr``: ln α / ln Φ(acr / (π_c·σ)) (inverse of the
    closed form; e.g. ≈ 4e17 for CIFAR-10's best σ = 1 ACR 0.844 of Sun et al. 2025, Table 2)."""
    return float(np.log(alpha) / GAUSSIAN_L2.log_threshold(acr, share * sigma))


def budget_figure(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    references: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    run_budgets: Mapping[str, int | None] | None = None,
):
    """ACR against N′ (log x): a line per run in ``curves``, solid up to the run's own N (``run_budgets``,
    marked with a square) and dotted beyond it (extrapolated, biased upward); ``references`` dashed gray
    (e.g. the constant classifier's closed form)."""
    from .plots import place_legend, plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, (budgets, acr) in curves.items():
        budgets, acr = np.asarray(budgets, dtype=float), np.asarray(acr, dtype=float)
        own = (run_budgets or {}).get(label)
        inside = budgets <= (own if own is not None else np.inf)
        (line,) = ax.plot(budgets[inside], acr[inside], label=label)
        if (~inside).any():
            edge = max(int(inside.sum()) - 1, 0)
            ax.plot(budgets[edge:], acr[edge:], ":", color=line.get_color())
        if own is not None and own in budgets:
            ax.plot([own], acr[budgets == own][:1], "s", color=line.get_color(), ms=7, mfc="none")
    for label, (budgets, acr) in (references or {}).items():
        ax.plot(budgets, acr, linestyle="--", color="gray", lw=1, label=label)
    ax.set(xscale="log", xlabel="budget N′ (estimation draws)", ylabel="ACR (L2, [0,1] pixel units)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    place_legend(
        ax,
        len(curves) + len(references or {}),
        fontsize=7,
        title="□ run's own N; dotted: N′ > N (biased upward)",
        title_fontsize=7,
    )
    fig.tight_layout()
    return fig
