"""Sequential CERTIFY aimed at a radius grid: an input stops drawing once its bucket on the grid is decided.

**The bound.** The estimation draws of an input are looked at after n_1 < n_2 < ... < n_K = n draws (a
geometric schedule: ``first_look``, then ×``growth``, in whole noise blocks, capped at ``n``). At look j the
one-sided Clopper–Pearson lower bound is taken at level α_j with Σ_j α_j ≤ α. By the union bound over the
looks, P(p_A < LB_j for some j) ≤ α, so the bound at *any* stopping time — however it depends on the counts —
is a valid (1 − α) lower confidence bound for p_A: a confidence sequence over the schedule. This is the
"error budget split over stages" of Horváth et al. (ICLR 2022, *Boosting Randomized Smoothing with
Variance Reduced Classifiers*, §4 adaptive sampling), with exact Clopper–Pearson at every stage; we chose it
over betting confidence sequences (Waudby-Smith & Ramdas, JRSS-B 2024) and the confidence sequences of
Voráček (arXiv 2406.17830, 2024) because it keeps every row an ordinary Clopper–Pearson certificate at a
level checkable from the row, its price is only log K in the level (K ≈ 13 looks from n/100 to n at growth
1.5), and it needs no tuning. Evaluating a fixed-n bound at level α at every look instead (peeking) fails
several times more often than α (tests/smoothing/test_sequential.py).

**How α is spent** (``alpha_spending``): ``even`` puts α/K on each look. ``selection`` decides the split from
the n0 selection draws, which come from their own noise stream and so are independent of the estimation
draws: for an input whose n0 draws all agree, half of α goes on the look where an all-agreeing estimate
first passes the top threshold at level α/2 (added to its schedule, in whole noise blocks), and the other
half is split evenly over its other looks; every other input keeps α/K. Conditionally on the selection
draws the schedule and the levels are fixed and sum to α, so the union bound holds as before. This is the
idea of Cullen et al. (2026, *Halt Fast!*, arXiv 2606.27694) — spend the error budget where the input is
expected to stop — done with this sampler's own selection stream.

**The stopping rule** (what the grid is for). With thresholds t_k the p_A each grid radius r_k needs
(:meth:`~rs_lightning.smoothing.certificate.Certificate.threshold`; Φ(r_k/σ) for Gaussian L2), an input
stops at the first look where its lower bound has passed the top threshold, or its bucket is decided: LB
has passed t_k (or no threshold) and the upper bound UB_j is below t_{k+1} — in particular UB below t_0 = ½
shows it abstains. The upper bound only decides *when to stop* and never enters a certificate: a wrong stop
reports a smaller bucket than more draws would have, never an unsound one. It is taken at its own level
``beta``/K per look (default β = 0.05 over the looks). ``futility`` (default on) compares it not with
t_{k+1} but with the share that t_{k+1} needs at the cap, r_{k+1} = the p̂ whose lower bound after all ``n``
draws at α/K is t_{k+1} (:func:`~rs_lightning.smoothing.stats.clopper_pearson_reach`): an input whose p_A is
below r_{k+1} would more likely than not stop at ``n`` without t_{k+1} anyway, so once UB < r_{k+1} it stops
now (futility stopping of group-sequential designs; Jennison & Turnbull, *Group Sequential Methods*, 2000,
ch. 10). Without it, inputs with p_A just above t_{k+1} draw all ``n`` and then mostly miss it.
``abstain_after`` (optional): an input whose lower bound is still below ½ at a look of at least that many
draws stops there and abstains. Otherwise an input continues, up to ``n``. The certificate at the stop is
Cohen's: abstain if LB < ½, else the certificate's radius at LB (σΦ⁻¹(LB) for Gaussian L2),
the class from the n0 selection draws (their own stream).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from rs_lightning.validation import ConfigError

from ..noise import Phase
from ..stats import clopper_pearson_lower, clopper_pearson_reach, clopper_pearson_upper, oracle_draws
from .base import Count, Draws, Sampler, choice, finite, flag, integer, pick

if TYPE_CHECKING:
    from ..spec import CertificationSpec

SPENDINGS = ("even", "selection")
DEFAULT_BETA = 0.05


@dataclass(frozen=True)
class Sequential(Sampler):
    """Sequential sampling aimed at a radius grid (see the module).

    Args:
        radii: the grid r_0 < r_1 < ... in the spec's norm; an input stops once its bucket on it is decided.
            None: the report's grid for σ (0, 0.25, ... for L2; 0, 1/255, ... for L∞) up to the largest radius
            certifiable at ``n`` (resolved when σ and the input size are known, and stored resolved).
        first_look: estimation draws at the first look; None → n/100 rounded up to whole noise blocks.
        growth: each look has ``growth`` times the draws of the previous one (rounded up to whole noise
            blocks), up to the cap ``n``, which is the last look.
        beta: the level, over all looks, of the upper bound that decides when to stop (β/K per look); None →
            the lower bound's level at each look (how runs before this setting stopped).
        alpha_spending: ``selection`` (from the n0 draws; see the module) or ``even`` (α/K per look).
        abstain_after: None, or the draws after which an input whose lower bound is still below ½ abstains.
        futility: stop once the next threshold is out of reach within ``n`` (see the module); False → once
            it is ruled out (how runs before this setting stopped).
    """

    radii: tuple[float, ...] | None = None
    first_look: int | None = None
    growth: float = 1.5
    beta: float | None = DEFAULT_BETA
    alpha_spending: str = "selection"
    abstain_after: int | None = None
    futility: bool = True

    name = "sequential"
    fixed_n = False
    added_later = {"beta": None, "alpha_spending": "even", "abstain_after": None, "futility": False}
    """What runs recorded before these settings existed did implicitly."""

    # ---------------------------------------------------------------------------------------- settings
    def validated(self, spec: CertificationSpec) -> Sequential:
        radii = None if self.radii is None else radius_grid("sequential.radii", self.radii)
        block, n = spec.noise_block, spec.n
        first = min(n, -(-max(1, n // 100) // block) * block) if self.first_look is None else self.first_look
        first = integer("sequential.first_look", first, 1, n)
        growth = finite("sequential.growth", self.growth, "> 1")
        if growth <= 1:
            raise ConfigError("sequential.growth", self.growth, "a finite number > 1")
        beta = self.beta
        if beta is not None:
            beta = finite("sequential.beta", beta, "in the open interval (0, 1)")
            if not 0 < beta < 1:
                raise ConfigError("sequential.beta", self.beta, "in the open interval (0, 1), or null")
        spending = choice("sequential.alpha_spending", self.alpha_spending, SPENDINGS)
        after = self.abstain_after
        if after is not None:
            after = integer("sequential.abstain_after", after, 1, n)
        return replace(
            self,
            radii=radii,
            first_look=first,
            growth=growth,
            beta=beta,
            alpha_spending=spending,
            abstain_after=after,
            futility=flag("sequential.futility", self.futility),
        )

    def resolve(self, spec: CertificationSpec, dim: int) -> Sequential:
        """The grid resolved and checked: None → the report's grid (0, 0.25, ... for L2; steps of 1/255 for
        L∞) up to the largest radius certifiable at ``n``; a given grid must not exceed that radius (no input
        could reach it)."""
        top = self.largest_radius(spec, dim)
        if self.radii is None:
            grid = spec.certificate.radius_grid(
                spec.require_sigma(), spec.n, self.plan_level(spec), None, dim
            )
            return replace(self, radii=tuple(float(r) for r in grid))
        if self.radii[-1] > top + 1e-12:
            raise ConfigError(
                "sequential.radii",
                list(self.radii),
                f"radii up to the largest {spec.certificate.label} radius certifiable at n={spec.n} with its "
                f"looks (alpha/{len(self.schedule(spec))} per look): {top:.4g}",
                "drop the larger radii or raise n",
            )
        return self

    def as_dict(self) -> dict:
        out = super().as_dict()
        out["radii"] = None if self.radii is None else list(self.radii)
        return out

    # ---------------------------------------------------------------------------------------- looks
    def schedule(self, spec: CertificationSpec) -> np.ndarray:
        """The cumulative estimation draws at each look: ``first_look``, then ×``growth``, each rounded up to
        whole noise blocks (so every look continues the same per-input noise stream), the last exactly
        ``n``."""
        block, n = spec.noise_block, spec.n
        looks, size = [], float(self.first_look)
        while True:
            look = min(n, math.ceil(size / block) * block)
            if looks and look <= looks[-1]:
                look = min(n, looks[-1] + block)
            if n - look < look * (self.growth - 1) / 2:  # less than half a step short of the cap: look at n
                look = n
            looks.append(look)
            if look >= n:
                return np.asarray(looks, dtype=np.int64)
            size = look * self.growth

    def agreeing_look(self, spec: CertificationSpec, dim: int | None) -> int:
        """``alpha_spending=selection``: the look where an estimate whose draws all agree first passes the top
        threshold at level α/2, CP(m, m, α/2) = (α/2)^(1/m) ≥ t_top, in whole noise blocks, capped at n."""
        top = float(spec.certificate.threshold(self.radii[-1], spec.require_sigma(), dim))
        if top >= 1:
            return spec.n
        draws = math.log(2 / spec.alpha) / -math.log(top) if top > 0 else 1.0
        block = spec.noise_block
        return int(min(spec.n, max(block, math.ceil(draws / block - 1e-9) * block)))

    def agreeing_schedule(self, spec: CertificationSpec, dim: int | None) -> np.ndarray:
        """The looks of an input whose n0 draws all agree (``alpha_spending=selection``): the schedule and
        :meth:`agreeing_look`."""
        return np.union1d(self.schedule(spec), [self.agreeing_look(spec, dim)])

    def looks(self, spec: CertificationSpec) -> int:
        extra = self.alpha_spending == "selection"
        return len(self.schedule(spec)) + int(extra)

    def plan_level(self, spec: CertificationSpec) -> float:
        """α/K: the level of every look under even spending (the grid is planned at it)."""
        return spec.alpha / len(self.schedule(spec))

    def input_schedules(self, spec: CertificationSpec, n_a0: np.ndarray, dim: int | None) -> tuple:
        """``(looks, agreeing)``: every look any input may take (sorted), and which inputs (their n0 draws all
        agree, under ``alpha_spending=selection``) also look at :meth:`agreeing_look`."""
        base = self.schedule(spec)
        agreeing = np.zeros(np.shape(n_a0), dtype=bool)
        if self.alpha_spending == "selection":
            agreeing = np.asarray(n_a0) == spec.n0
            if agreeing.any():
                base = self.agreeing_schedule(spec, dim)
        return base, agreeing

    def levels(self, spec: CertificationSpec, n, n_a0, dim: int | None = None) -> np.ndarray:
        """Each row's level from its ``n`` and selection count ``nA0``: α/K, or for an input whose n0 draws
        all agree under ``alpha_spending=selection`` α/2 at :meth:`agreeing_look` and α/(2·(K' − 1)) at its
        K' − 1 other looks."""
        n = np.asarray(n)
        looks = self.schedule(spec)
        out = np.full(n.shape, spec.alpha / len(looks))
        if self.alpha_spending != "selection" or n_a0 is None:  # no nA0 column: rows of even spending
            return out
        n_a0 = np.asarray(n_a0)
        special = self.agreeing_look(spec, dim)
        others = len(self.agreeing_schedule(spec, dim)) - 1
        agreeing = n_a0 == spec.n0
        rest = spec.alpha / (2 * others) if others else spec.alpha
        out[agreeing] = np.where(n[agreeing] == special, spec.alpha / 2 if others else spec.alpha, rest)
        return out

    def stop_level(self, spec: CertificationSpec, lower_level: np.ndarray) -> np.ndarray:
        """The upper bound's level at a look: β/K, or (``beta=None``) the lower bound's."""
        if self.beta is None:
            return lower_level
        return np.full(np.shape(lower_level), self.beta / len(self.schedule(spec)))

    # ---------------------------------------------------------------------------------------- draws
    def thresholds(self, spec: CertificationSpec, dim: int | None) -> np.ndarray:
        return np.asarray(spec.certificate.threshold(self.radii, spec.require_sigma(), dim), dtype=float)

    def stop_thresholds(self, spec: CertificationSpec, targets: np.ndarray) -> np.ndarray:
        """What the upper bound must fall below to rule each threshold out: the threshold itself, or under
        ``futility`` the share it needs at the cap (r_k, see the module)."""
        if not self.futility:
            return targets
        level = self.plan_level(spec)
        return np.asarray([clopper_pearson_reach(float(t), spec.n, level) for t in targets])

    def decided(self, spec, n_a, n, lower_level, targets, stops=None) -> np.ndarray:
        """Whether each input may stop: its lower bound has passed the top threshold, its upper bound is
        below the stop threshold (:meth:`stop_thresholds`, ``stops``) of the next threshold its lower bound
        has not passed, or it is still below ½ after ``abstain_after`` draws."""
        stops = self.stop_thresholds(spec, targets) if stops is None else stops
        lower = clopper_pearson_lower(n_a, n, lower_level)
        upper = clopper_pearson_upper(n_a, n, self.stop_level(spec, lower_level))
        reached = np.searchsorted(targets, lower, side="right")  # thresholds with t_k <= LB
        top = reached >= len(targets)
        following = stops[np.minimum(reached, len(targets) - 1)]
        done = top | (upper < following)
        if self.abstain_after is not None:
            done |= (n >= self.abstain_after) & (lower < 0.5)
        return done

    def estimate(
        self,
        spec: CertificationSpec,
        draw: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
        n_a0: np.ndarray,
        dim: int | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Run the looks for the inputs with selection counts ``n_a0``: ``draw(open, starts, stop)`` returns
        the selected class's count among the estimation draws ``starts[j] .. stop - 1`` of the inputs at
        positions ``open``. Returns the count ``n_a`` and the draws ``n`` of every input at its stop."""
        count = len(n_a0)
        targets = self.thresholds(spec, dim)
        stops = self.stop_thresholds(spec, targets)
        looks, agreeing = self.input_schedules(spec, n_a0, dim)
        own = set(self.schedule(spec).tolist())
        n_a = np.zeros(count, dtype=np.int64)
        n = np.zeros(count, dtype=np.int64)
        open_ = np.arange(count)
        for look in looks:
            here = open_ if look in own else open_[agreeing[open_]]  # the inputs that look here
            if not here.size:
                continue
            n_a[here] += np.asarray(draw(here, n[here], int(look)), dtype=np.int64)
            n[here] = look
            level = self.levels(spec, n[here], n_a0[here], dim)
            stop = here[self.decided(spec, n_a[here], n[here], level, targets, stops)]
            open_ = np.setdiff1d(open_, stop, assume_unique=True)
            if not open_.size:
                break
        return n_a, n

    def draw(self, spec: CertificationSpec, count: Count, groups: int, dim: int) -> Draws:
        """``n0`` selection draws pick the class; the estimation draws of the inputs still open are taken
        look by look (all open inputs in one packed call per look), continuing each input's estimation
        stream, until each input's bucket on the grid is decided."""
        sampler = self.resolve(spec, dim)
        counts0 = count(Phase.SELECTION, spec.n0)
        selected = counts0.argmax(dim=1)
        n_a0 = pick(counts0, selected).cpu().numpy()
        counts = torch.zeros_like(counts0)
        block = spec.noise_block

        def draw(open_: np.ndarray, starts: np.ndarray, stop: int) -> np.ndarray:
            rows = torch.as_tensor(open_, device=counts.device)
            more = count(Phase.ESTIMATION, stop - starts, rows=open_, first_block=starts // block)
            counts.index_add_(0, rows, more)
            return pick(more, selected.index_select(0, rows)).cpu().numpy()

        _, n = sampler.estimate(spec, draw, n_a0, dim)
        n0 = np.full(groups, spec.n0, dtype=np.int64)
        return Draws(counts0, selected, counts, n, n0, n0 + n, sampler.levels(spec, n, n_a0, dim))

    def oracle_floor(self, spec: CertificationSpec, n_a, n, dim: int | None) -> np.ndarray:
        """Per row, the estimation draws an oracle knowing p = p̂ = nA/n would need to make a decision this
        stopping rule accepts: bucket k (t_k <= p̂, and p̂ below s_{k+1}, the stop threshold of the next
        threshold — t_{k+1}, or r_{k+1} under ``futility``) at Wald's bound
        (:func:`~rs_lightning.smoothing.stats.oracle_draws`) max[ln(1/α)/KL(p̂‖t_k), ln(1/β)/KL(p̂‖s_{k+1})],
        at the run's α and β (α when ``beta`` is None); in the top bucket the first term alone, below t_0
        (= ½ for a grid from 0) the second; the cheapest accepted decision, capped at ``n``. Without
        ``futility`` exactly one bucket is accepted: p̂'s own. Rows without draws (n = 0) count 0. At a
        row's own p̂ (a stopping time's estimate) this is biased low; ``Run.oracle_floor``
        (rs_lightning.analysis.compare) takes it at a fixed-n run's p̂ instead."""
        sampler = self.resolve(spec, dim)
        n_a, n = np.asarray(n_a, dtype=float), np.asarray(n, dtype=float)
        targets = sampler.thresholds(spec, dim)
        lows = np.concatenate([[np.nan], targets])  # bucket j = -1, 0, ..., K-1: its threshold t_j
        highs = np.concatenate([sampler.stop_thresholds(spec, targets), [np.nan]])  # s_{j+1}
        p = np.divide(n_a, n, out=np.zeros(n.shape), where=n > 0)
        floor = np.full(p.shape, float(spec.n))
        for low, high in zip(lows, highs, strict=True):
            accepted = (np.isnan(low) | (p >= low)) & (np.isnan(high) | (p < high))
            cost = oracle_draws(p, low, high, spec.alpha, self.beta or spec.alpha, spec.n)
            floor = np.where(accepted, np.minimum(floor, cost), floor)
        return np.where(n > 0, floor, 0.0)

    # ---------------------------------------------------------------------------------------- rows
    def rows_fit(self, spec: CertificationSpec, n, n0, n_a0=None, dim: int | None = None) -> np.ndarray:
        n = np.asarray(n)
        looks = self.schedule(spec)
        fit = np.isin(n, looks)
        if self.alpha_spending == "selection" and n_a0 is not None and self.radii is not None:
            fit |= (np.asarray(n_a0) == spec.n0) & (n == self.agreeing_look(spec, dim))
        return fit & (np.asarray(n0) == spec.n0)

    def expected(self, spec: CertificationSpec) -> str:
        return f"n at a look ({', '.join(str(int(v)) for v in self.schedule(spec))}), n0={spec.n0}"

    def inputs_per_call(self, spec: CertificationSpec) -> int:
        """Sized by the first look, times 4: inputs stop at different looks, and a group whose open inputs
        still fill several batches per look loses little to each look's last, partial batch."""
        return max(1, math.ceil(4 * spec.batch_size / (spec.n0 + self.first_look)))

    def largest_radius(self, spec: CertificationSpec, dim: int | None) -> float:
        """The largest radius this sampler can certify: all n draws agreeing, bound at α/K."""
        return spec.certificate.max_radius(spec.require_sigma(), spec.n, self.plan_level(spec), dim)

    def describe(self, spec: CertificationSpec) -> str:
        grid = "report grid" if self.radii is None else f"{len(self.radii)} radii up to {self.radii[-1]:g}"
        extra = "" if self.beta is None else f", beta {self.beta:g}"
        if self.alpha_spending != "even":
            extra += f", alpha by {self.alpha_spending}"
        if self.abstain_after is not None:
            extra += f", abstain after {self.abstain_after}"
        if self.futility:
            extra += ", futility"
        return f"sampling=sequential({grid}, first look {self.first_look}, x{self.growth:g}{extra})"

    def label(self) -> str:
        return "sequential" if self.radii is None else f"sequential to {self.radii[-1]:g}"


def radius_grid(key: str, values) -> tuple[float, ...]:
    """A non-empty, strictly increasing tuple of finite radii >= 0."""
    if isinstance(values, str | bytes | Mapping) or not hasattr(values, "__iter__"):
        raise ConfigError(key, values, "a list of radii, e.g. [0, 0.25, 0.5]")
    radii = tuple(finite(key, v, ">= 0") for v in values)
    if not radii or min(radii) < 0 or any(b <= a for a, b in zip(radii, radii[1:], strict=False)):
        raise ConfigError(key, list(values), "a non-empty list of radii >= 0 in increasing order")
    return radii
