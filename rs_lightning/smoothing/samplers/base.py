"""The sampler contract: how a CERTIFY run spends its draws on each input.

A sampler is a frozen dataclass whose fields are its settings (what users type as ``<name>.<field>=``). It
owns their validation, its draw loop, the level of each row's bound, the ``n`` a row of it may have (the rule
a resumed run's rows must satisfy), its largest cost per input and its one-line description. The spec holds
the
common settings (σ, n0, n, α, seed, noise, norm, ...) and one sampler, built by name from
:data:`~rs_lightning.smoothing.samplers.SAMPLERS`; nothing else branches on the sampler.

The certificate is always Cohen et al.'s (ICML 2019, Alg. 1): the class chosen before the estimation draws
(from their own noise stream), and the one-sided Clopper–Pearson bound of its count at the row's level.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from rs_lightning.validation import ConfigError

from ..noise import Phase

if TYPE_CHECKING:
    from ..spec import CertificationSpec

Count = Callable[..., torch.Tensor]
"""``count(phase, num_samples, rows=None, first_block=0)``: per-class counts ``(len(rows), C)`` of the inputs
at positions ``rows`` (None: all) over ``num_samples`` draws (one number or one per row) of their ``phase``
stream, starting at its block ``first_block`` (one or one per row). The engine builds it around the model."""


@dataclass
class Draws:
    """What a sampler's draw loop returns for G inputs.

    ``counts0``: ``(G, C)`` counts of the draws that chose the class (selection or pilot); ``selected``: the
    chosen class; ``counts``: ``(G, C)`` estimation counts, those of the bound; ``n``: estimation draws in the
    bound (0 = abstain without estimating); ``n0``: the draws that chose the class; ``samples``: every draw
    the input cost; ``level``: the level of each input's bound (:meth:`Sampler.levels` of its row)."""

    counts0: torch.Tensor
    selected: torch.Tensor
    counts: torch.Tensor
    n: np.ndarray
    n0: np.ndarray
    samples: np.ndarray
    level: np.ndarray


def pick(counts: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """Each row's count of its selected class."""
    return counts.gather(1, selected[:, None]).squeeze(1)


@dataclass(frozen=True)
class Sampler:
    """Base of every sampler; subclasses set :attr:`name` and override what differs (Cohen's fixed n is the
    default of each method)."""

    name: ClassVar[str] = ""
    selects_with_n0: ClassVar[bool] = True
    """The class is chosen by ``n0`` selection draws (default 100); False: ``n0`` must stay unset."""
    n0_unset_reason: ClassVar[str] = ""
    modes: ClassVar[tuple[str, ...]] = ("certify",)
    fixed_n: ClassVar[bool] = True
    """Every row has ``n`` estimation draws (False: the summary shows the mean)."""
    added_later: ClassVar[dict] = {}
    """Values of settings added after a sampler's first version, which stored runs without them had."""

    # ---------------------------------------------------------------------------------------- settings
    @classmethod
    def build(cls, values, spec: CertificationSpec) -> Sampler:
        """The sampler from ``values`` (None: defaults; a mapping of its fields; an instance), validated
        against the spec's common settings (:meth:`validated`); unknown keys are refused naming the known."""
        if values is None:
            values = cls()
        if isinstance(values, Mapping):
            known = [f.name for f in dataclasses.fields(cls)]
            unknown = sorted(set(values) - set(known))
            if unknown:
                raise ConfigError(
                    cls.name, unknown, "keys of " + (", ".join(known) or "nothing (no settings)")
                )
            values = cls(**values)
        if not isinstance(values, cls):
            raise ConfigError(cls.name, values, f"settings of sampling={cls.name} ({cls.__name__})")
        return values.validated(spec)

    @classmethod
    def defaults(cls) -> dict:
        """Each setting's default, by name."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    def validated(self, spec: CertificationSpec) -> Sampler:
        """Check each setting against the common ones; return the settings with defaults resolved."""
        return self

    def resolve(self, spec: CertificationSpec, dim: int) -> Sampler:
        """Settings that need σ and the input size (``dim`` coordinates), resolved and checked before any
        work; the run records the result."""
        return self

    def as_dict(self) -> dict:
        """The stored form (``settings.json``'s ``sampler``; ``{}`` for a sampler without settings)."""
        return dataclasses.asdict(self)

    # ---------------------------------------------------------------------------------------- draws
    def draw(self, spec: CertificationSpec, count: Count, groups: int, dim: int) -> Draws:
        """Cohen's sampling: ``n0`` selection draws pick the class, ``n`` estimation draws count it."""
        counts0 = count(Phase.SELECTION, spec.n0)
        counts = count(Phase.ESTIMATION, spec.n)
        n0, n = np.full(groups, spec.n0, dtype=np.int64), np.full(groups, spec.n, dtype=np.int64)
        return Draws(counts0, counts0.argmax(dim=1), counts, n, n0, n0 + n, np.full(groups, spec.alpha))

    def levels(self, spec: CertificationSpec, n, n_a0, dim: int | None = None) -> np.ndarray:
        """The level of each row's bound from what the row records (its ``n`` and selection count ``nA0``;
        ``dim`` input coordinates), so that every row stays checkable: ``pA_lower`` = CP(nA, n, level)."""
        return np.full(np.shape(n), spec.alpha)

    def plan_level(self, spec: CertificationSpec) -> float:
        """The level the grid is planned at (the largest radius certifiable, the report's grid)."""
        return spec.alpha

    def looks(self, spec: CertificationSpec) -> int:
        """How many looks a row's bound is spread over (the p_A bands divide their level by it)."""
        return 1

    def rows_fit(self, spec: CertificationSpec, n, n0, n_a0=None, dim: int | None = None) -> np.ndarray:
        """Which rows' ``n``/``n0`` (and selection count ``nA0``) this sampler could have written: the rule a
        resumed run's rows must satisfy."""
        return (np.asarray(n) == spec.n) & (np.asarray(n0) == spec.n0)

    def expected(self, spec: CertificationSpec) -> str:
        """The ``n``/``n0`` its rows have, for the message refusing others."""
        return f"n={spec.n}, n0={spec.n0}"

    def max_draws(self, spec: CertificationSpec) -> int:
        """The most draws one input can cost."""
        return (spec.n0 or 0) + spec.n

    def inputs_per_call(self, spec: CertificationSpec) -> int:
        """How many inputs to process together so that forward batches stay full (>= 1)."""
        return max(1, math.ceil(spec.batch_size / self.max_draws(spec)))

    def oracle_floor(self, spec: CertificationSpec, n_a, n, dim: int | None) -> np.ndarray | None:
        """Per row, the fewest estimation draws an oracle knowing p_A would need for what this sampler
        decides (None: a fixed-n sampler decides nothing by sampling more or less)."""
        return None

    def describe(self, spec: CertificationSpec) -> str:
        """One line for logs and the summary, e.g. ``sampling=iss(ad 0.05, k0=1000)``."""
        return f"sampling={self.name}"

    def label(self) -> str:
        """A short name for plots and tables (``sequential to 1.5``)."""
        return self.name


# ------------------------------------------------------------------------------------ validation helpers
def integer(key: str, value, minimum: int, maximum: int | None = None) -> int:
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(key, value, allowed)
    if value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(key, value, allowed)
    return int(value)


def finite(key: str, value, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ConfigError(key, value, f"a finite number {allowed}")
    return float(value)


def choice(key: str, value, choices: tuple[str, ...]) -> str:
    text = str(value).lower() if value is not None else None
    if text not in choices:
        raise ConfigError(key, value, "one of " + ", ".join(choices))
    return text


def flag(key: str, value) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, value, "true or false")
    return value
