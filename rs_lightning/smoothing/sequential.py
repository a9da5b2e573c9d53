"""Sequential CERTIFY aimed at a radius grid: an input stops drawing once its bucket on the grid is decided.

**The bound.** The estimation draws of an input are looked at after n_1 < n_2 < ... < n_K = n draws (a
geometric schedule: ``first_look``, then ×``growth``, in whole noise blocks, capped at ``n``). At each look
the one-sided Clopper–Pearson lower bound is taken at level α/K. By the union bound over the K looks,
P(p_A < LB_j for some j) ≤ α, so the bound at *any* stopping time — however it depends on the counts — is a
valid (1 − α) lower confidence bound for p_A: a confidence sequence over the schedule. This is the
"error budget split over stages" of Horváth et al. (ICLR 2022, *Boosting Randomized Smoothing with
Variance Reduced Classifiers*, §4 adaptive sampling), with exact Clopper–Pearson at every stage; we chose it
over betting confidence sequences (Waudby-Smith & Ramdas, JRSS-B 2024) and the confidence sequences of
Voráček (arXiv 2406.17830, 2024) because it keeps every row an ordinary Clopper–Pearson certificate at a
stated level (``pA_lower`` = CP(nA, n, α/K), checkable from the row), its price is only log K in the level
(K ≈ 13 looks from n/100 to n at growth 1.5), and it needs no tuning. Evaluating a fixed-n bound at level α
at every look instead (peeking) fails several times more often than α (tests/smoothing/test_sequential.py).

**The stopping rule** (what the grid is for). With thresholds t_k the p_A each grid radius r_k needs
(:meth:`~rs_lightning.smoothing.certificate.Certificate.threshold`; Φ(r_k/σ) for Gaussian L2), an input
stops at the first look where its lower bound has passed the top threshold, or
its bucket is decided: LB has passed t_k (or no threshold) and the upper bound UB_j (Clopper–Pearson upper
at α/K; it only decides when to stop, never enters a certificate) is below t_{k+1} — in particular UB below
t_0 = ½ shows it abstains. Otherwise it continues, up to ``n``. The certificate at the stop is Cohen's:
abstain if LB < ½, else the certificate's radius at LB (σΦ⁻¹(LB) for Gaussian L2), the class from the n0
selection draws (their own stream).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rs_lightning.validation import ConfigError

from .spec import CertificationSpec, SequentialSettings
from .stats import clopper_pearson_lower, clopper_pearson_upper


def look_schedule(spec: CertificationSpec) -> np.ndarray:
    """The cumulative estimation draws at each look: ``first_look``, then ×``growth``, each rounded up to
    whole noise blocks (so every look continues the same per-input noise stream), the last exactly ``n``."""
    seq, block, n = spec.sequential, spec.noise_block, spec.n
    looks, size = [], float(seq.first_look)
    while True:
        look = min(n, math.ceil(size / block) * block)
        if looks and look <= looks[-1]:
            look = min(n, looks[-1] + block)
        if n - look < look * (seq.growth - 1) / 2:  # less than half a step short of the cap: look at n
            look = n
        looks.append(look)
        if look >= n:
            return np.asarray(looks, dtype=np.int64)
        size = look * seq.growth


def decided(n_a: np.ndarray, n: np.ndarray, level: float, targets: np.ndarray) -> np.ndarray:
    """Whether each input may stop: its lower bound has passed the top threshold, or its upper bound is
    below the next threshold its lower bound has not passed (see the module docstring)."""
    lower = clopper_pearson_lower(n_a, n, level)
    upper = clopper_pearson_upper(n_a, n, level)
    reached = np.searchsorted(targets, lower, side="right")  # thresholds with t_k <= LB
    top = reached >= len(targets)
    following = targets[np.minimum(reached, len(targets) - 1)]
    return top | (upper < following)


def estimate(
    draw: Callable[[np.ndarray, int, int], np.ndarray],
    count: int,
    looks: np.ndarray,
    level: float,
    targets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the looks for ``count`` inputs: ``draw(open, start, stop)`` returns the selected class's count
    among the estimation draws ``start .. stop - 1`` of the inputs at positions ``open``. Returns the
    count ``n_a`` and the draws ``n`` of every input at its stop."""
    n_a = np.zeros(count, dtype=np.int64)
    n = np.zeros(count, dtype=np.int64)
    open_ = np.arange(count)
    previous = 0
    for look in looks:
        n_a[open_] += np.asarray(draw(open_, previous, int(look)), dtype=np.int64)
        n[open_] = look
        previous = int(look)
        open_ = open_[~decided(n_a[open_], n[open_], level, targets)]
        if not open_.size:
            break
    return n_a, n


def largest_radius(spec: CertificationSpec, dim: int) -> float:
    """The largest radius the sequential sampler can certify: all n draws agreeing, bound at α/K."""
    return spec.certificate.max_radius(spec.require_sigma(), spec.n, spec.bound_alpha, dim)


def resolve_grid(spec: CertificationSpec, dim: int) -> CertificationSpec:
    """``spec`` with its grid resolved and checked: None → the report's grid (0, 0.25, ... for L2; steps of
    1/255 for L∞) up to the largest radius certifiable at ``n``; a given grid must not exceed that radius
    (no input could reach it). Other samplers pass through."""
    if spec.sampling != "sequential":
        return spec
    top = largest_radius(spec, dim)
    seq = spec.sequential
    if seq.radii is None:
        grid = spec.certificate.radius_grid(spec.require_sigma(), spec.n, spec.bound_alpha, None, dim)
        radii = tuple(float(r) for r in grid)
    else:
        radii = seq.radii
        if radii[-1] > top + 1e-12:
            raise ConfigError(
                "sequential.radii", list(radii),
                f"radii up to the largest {spec.certificate.label} radius certifiable at n={spec.n} with its "
                "looks "
                f"(alpha/{len(look_schedule(spec))} per look): {top:.4g}",
                "drop the larger radii or raise n",
            )  # fmt: skip
    return CertificationSpec.from_dict(
        spec.as_dict() | {"sequential": SequentialSettings(radii, seq.first_look, seq.growth).__dict__}
    )
