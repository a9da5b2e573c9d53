"""The one certification spec: every setting that defines a certificate, validated once.

``certify.py``, the certification callback, :class:`~rs_lightning.smoothing.Smooth`, the resume check and the
report's protocol check all build, store and compare this object (``as_dict``/``protocol``), with one
spelling per key. Keys, as users type them: ``sigma n0 n alpha seed batch_size split noise_block mode
precision channels_last compile sampling norm iss.decline iss.max_decline iss.k0 iss.granularity
iss.reuse_pilot sequential.radii sequential.first_look sequential.growth noise``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

from rs_lightning.validation import ConfigError

from .certificate import NOISES, NORMS, Certificate, default_norm
from .noise import NOISE_BLOCK

MODES = ("certify", "predict")
PRECISIONS = ("32", "bf16", "16")
SAMPLINGS = ("cohen", "iss", "sequential")
DECLINES = ("ad", "rd")
SPLITS = ("train", "test")
DEFAULT_N0 = 100

PROTOCOL_KEYS = (
    "mode", "n0", "n", "alpha", "seed", "split", "noise_block", "precision", "sampling", "iss", "sequential",
    "noise", "norm",
)  # fmt: skip
"""The settings two runs must share for their rows to be comparable (with the inputs and σ). ``batch_size``,
``channels_last`` and ``compile`` change only the floating-point rounding inside the network (as the batch
size does), not the statistics, so they are recorded but not compared."""


def _integer(key: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(key, value, f"an integer >= {minimum}")
    return int(value)


def _finite(key: str, value, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ConfigError(key, value, f"a finite number {allowed}")
    return float(value)


def _choice(key: str, value, choices: tuple[str, ...]) -> str:
    text = str(value).lower() if value is not None else None
    if text not in choices:
        raise ConfigError(key, value, "one of " + ", ".join(choices))
    return text


def _flag(key: str, value) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, value, "true or false")
    return value


@dataclass(frozen=True)
class IssSettings:
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


@dataclass(frozen=True)
class SequentialSettings:
    """Sequential sampling aimed at a radius grid (:mod:`rs_lightning.smoothing.sequential`).

    Args:
        radii: the grid r_0 < r_1 < ... in the spec's norm; an input stops once its bucket on it is decided.
            None: the report's grid for σ (0, 0.25, ... for L2; 0, 1/255, ... for L∞) up to the largest radius
            certifiable at ``n`` (resolved when σ and the input size are known, and stored resolved).
        first_look: estimation draws at the first look; None → n/100 rounded up to whole noise blocks.
        growth: each look has ``growth`` times the draws of the previous one (rounded up to whole noise
            blocks), up to the cap ``n``, which is the last look.
    """

    radii: tuple[float, ...] | None = None
    first_look: int | None = None
    growth: float = 1.5


@dataclass(frozen=True)
class CertificationSpec:
    """Every setting of a CERTIFY or PREDICT run (Cohen, Rosenfeld & Kolter, ICML 2019, Alg. 1).

    ``sigma`` may be None until the checkpoint supplies it (:meth:`with_sigma`); the engine refuses a spec
    without one. ``n0`` defaults to 100 for Cohen's CERTIFY and must stay unset for ``mode=predict`` and
    ``sampling=iss`` (which have no separate selection draws: the ISS pilot selects the class).
    ``noise`` is the smoothing distribution at per-coordinate standard deviation σ (``gaussian``,
    ``laplace``, ``uniform``) and ``norm`` the ball the radius is stated for (``l2``, ``l1``, ``linf``;
    None = the noise's own: L2 for Gaussian, L1 for the others); the pair selects the
    :class:`~rs_lightning.smoothing.certificate.Certificate` (Gaussian L∞: σΦ⁻¹(pA_lower)/√d with d the
    number of input coordinates, what an ARS pipeline certifies).
    Construction validates every value and raises :class:`~rs_lightning.validation.ConfigError` naming
    the key, the value and the allowed range.
    """

    sigma: float | None = None
    n0: int | None = None
    n: int = 100_000
    alpha: float = 0.001
    seed: int = 0
    batch_size: int = 1000
    split: str = "test"
    noise_block: int = NOISE_BLOCK
    mode: str = "certify"
    precision: str = "32"
    channels_last: bool = False
    compile: bool = False
    sampling: str = "cohen"
    iss: IssSettings | None = field(default=None)
    sequential: SequentialSettings | None = field(default=None)
    norm: str | None = None
    noise: str = "gaussian"

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        set_("mode", _choice("mode", self.mode, MODES))
        set_("sampling", _choice("sampling", self.sampling, SAMPLINGS))
        set_("noise", _choice("noise", self.noise, NOISES))
        set_("norm", _choice("norm", default_norm(self.noise) if self.norm is None else self.norm, NORMS))
        Certificate(self.noise, self.norm)  # a pair without a certificate: one line naming those with one
        if self.sigma is not None:
            sigma = _finite("sigma", self.sigma, "> 0")
            if sigma <= 0:
                raise ConfigError("sigma", self.sigma, "> 0")
            set_("sigma", sigma)
        set_("n", _integer("n", self.n, 1))
        alpha = _finite("alpha", self.alpha, "in the open interval (0, 1)")
        if not 0 < alpha < 1:
            raise ConfigError("alpha", self.alpha, "in the open interval (0, 1)")
        set_("alpha", alpha)
        set_("seed", _integer("seed", self.seed, 0))
        set_("batch_size", _integer("batch_size", self.batch_size, 1))
        set_("split", _choice("split", self.split, SPLITS))
        set_("noise_block", _integer("noise_block", self.noise_block, 1))
        set_("precision", _choice("precision", self.precision, PRECISIONS))
        set_("channels_last", _flag("channels_last", self.channels_last))
        set_("compile", _flag("compile", self.compile))
        self._check_selection()
        self._check_iss()
        self._check_sequential()

    def _check_selection(self) -> None:
        if self.mode == "predict" and self.n0 is not None:
            raise ConfigError(
                "n0", self.n0, "unset with mode=predict", "PREDICT has no selection draws; drop n0="
            )
        if self.mode == "predict" and self.sampling != "cohen":
            raise ConfigError("sampling", self.sampling, "cohen with mode=predict")
        if self.sampling == "iss" and self.n0 is not None:
            raise ConfigError(
                "n0", self.n0, "unset with sampling=iss", "The pilot (iss.k0 draws) selects the class"
            )
        if self.mode == "certify" and self.sampling == "cohen":
            n0 = DEFAULT_N0 if self.n0 is None else self.n0
            object.__setattr__(self, "n0", _integer("n0", n0, 1))
        if self.mode == "certify" and self.sampling == "sequential":
            n0 = DEFAULT_N0 if self.n0 is None else self.n0
            object.__setattr__(self, "n0", _integer("n0", n0, 1))
        if self.sampling != "iss" and self.iss is not None:
            raise ConfigError("iss", self.iss, "unset unless sampling=iss")
        if self.sampling != "sequential" and self.sequential is not None:
            raise ConfigError("sequential", self.sequential, "unset unless sampling=sequential")

    def _check_iss(self) -> None:
        if self.sampling != "iss":
            return
        iss = self.iss if self.iss is not None else IssSettings()
        if isinstance(iss, Mapping):
            unknown = set(iss) - {f.name for f in dataclasses.fields(IssSettings)}
            if unknown:
                raise ConfigError(
                    "iss", sorted(unknown), "keys of decline, max_decline, k0, granularity, reuse_pilot"
                )
            iss = IssSettings(**iss)
        decline = _choice("iss.decline", iss.decline, DECLINES)
        upper = "in the open interval (0, 1)" if decline == "rd" else "> 0"
        max_decline = _finite("iss.max_decline", iss.max_decline, upper)
        if max_decline <= 0 or (decline == "rd" and max_decline >= 1):
            raise ConfigError("iss.max_decline", iss.max_decline, f"{upper} for iss.decline={decline}")
        k0 = max(1, self.n // 100) if iss.k0 is None else iss.k0
        if isinstance(k0, bool) or not isinstance(k0, numbers.Integral) or not 1 <= k0 < self.n:
            raise ConfigError("iss.k0", iss.k0, f"an integer in [1, n) = [1, {self.n})")
        granularity = max(1, self.n // 500) if iss.granularity is None else iss.granularity
        if isinstance(granularity, bool) or not isinstance(granularity, numbers.Integral):
            raise ConfigError("iss.granularity", iss.granularity, f"an integer in [1, n] = [1, {self.n}]")
        if not 1 <= granularity <= self.n:
            raise ConfigError("iss.granularity", iss.granularity, f"an integer in [1, n] = [1, {self.n}]")
        resolved = IssSettings(
            decline=decline,
            max_decline=max_decline,
            k0=int(k0),
            granularity=int(granularity),
            reuse_pilot=_flag("iss.reuse_pilot", iss.reuse_pilot),
        )
        object.__setattr__(self, "iss", resolved)

    def _check_sequential(self) -> None:
        if self.sampling != "sequential":
            return
        seq = self.sequential if self.sequential is not None else SequentialSettings()
        if isinstance(seq, Mapping):
            unknown = set(seq) - {f.name for f in dataclasses.fields(SequentialSettings)}
            if unknown:
                raise ConfigError("sequential", sorted(unknown), "keys of radii, first_look, growth")
            seq = SequentialSettings(**seq)
        radii = None if seq.radii is None else _radius_grid("sequential.radii", seq.radii)
        block = self.noise_block
        first = (
            min(self.n, -(-max(1, self.n // 100) // block) * block)
            if seq.first_look is None
            else seq.first_look
        )
        if isinstance(first, bool) or not isinstance(first, numbers.Integral) or not 1 <= first <= self.n:
            raise ConfigError(
                "sequential.first_look", seq.first_look, f"an integer in [1, n] = [1, {self.n}]"
            )
        growth = _finite("sequential.growth", seq.growth, "> 1")
        if growth <= 1:
            raise ConfigError("sequential.growth", seq.growth, "a finite number > 1")
        object.__setattr__(self, "sequential", SequentialSettings(radii, int(first), growth))

    # ----------------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, values: Mapping, prefix: str = "") -> CertificationSpec:
        """Build from a mapping with the spec's keys (a Hydra node, ``settings.json``); unknown keys are
        ignored. ``prefix`` is put before every key in error messages (``callbacks.certification.``)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: values[k] for k in names if k in values}
        sampling = str(kwargs.get("sampling", "cohen")).lower()
        for key in ("iss", "sequential"):  # a config node lists both: only the sampler's own is read
            if kwargs.get(key) is not None:
                kwargs[key] = dict(kwargs[key])
            if sampling != key:
                kwargs.pop(key, None)
        try:
            return cls(**kwargs)
        except ConfigError as err:
            if not prefix:
                raise
            raise ConfigError(prefix + err.key, err.value, err.allowed) from None

    def with_sigma(self, sigma: float) -> CertificationSpec:
        """The same spec at ``sigma`` (validated)."""
        return dataclasses.replace(self, sigma=sigma)

    @property
    def certificate(self) -> Certificate:
        """The noise/norm certificate (:mod:`.certificate`): the noise drawn and the radius stated."""
        return Certificate(self.noise, self.norm)

    def require_sigma(self) -> float:
        if self.sigma is None:
            raise ConfigError("sigma", None, "> 0", "no sigma was given and none was taken from a checkpoint")
        return self.sigma

    def as_dict(self) -> dict:
        """Plain JSON-able form (the keys of ``settings.json``; ``iss`` is a nested dict or None)."""
        out = dataclasses.asdict(self)
        return out

    def protocol(self) -> dict:
        """The values of :data:`PROTOCOL_KEYS` (as in :meth:`as_dict`)."""
        values = self.as_dict()
        return {key: values[key] for key in PROTOCOL_KEYS}

    @property
    def bound_alpha(self) -> float:
        """The level of each row's Clopper–Pearson bound (PREDICT: of its test): ``alpha``, or for
        ``sampling=sequential`` (CERTIFY only) alpha split evenly over its looks
        (:func:`~rs_lightning.smoothing.sequential.look_schedule`)."""
        if self.sampling != "sequential":
            return self.alpha
        from .sequential import look_schedule

        return self.alpha / len(look_schedule(self))

    @property
    def selection_draws(self) -> int:
        """Draws spent before estimation per input: n0 (Cohen) or the ISS pilot k0 (0 for PREDICT)."""
        if self.sampling == "iss":
            return self.iss.k0
        return self.n0 or 0

    def describe(self) -> str:
        """One line for logs, e.g. ``sigma=0.25  n=100000  alpha=0.001  precision=bf16  sampling=iss(…)``."""
        parts = [f"sigma={self.sigma:g}" if self.sigma is not None else "sigma=?"]
        if self.n0 is not None:
            parts.append(f"n0={self.n0}")
        parts += [f"n={self.n}", f"alpha={self.alpha:g}"]
        if self.noise != "gaussian":
            parts.append(f"noise={self.noise}")
        if self.norm != default_norm(self.noise):
            parts.append(f"norm={self.norm}")
        if self.precision != "32":
            parts.append(f"precision={self.precision}")
        if self.sampling == "iss":
            iss = self.iss
            reuse = ", reuse_pilot" if iss.reuse_pilot else ""
            parts.append(f"sampling=iss({iss.decline} {iss.max_decline:g}, k0={iss.k0}{reuse})")
        if self.sampling == "sequential":
            seq = self.sequential
            grid = "report grid" if seq.radii is None else f"{len(seq.radii)} radii up to {seq.radii[-1]:g}"
            parts.append(f"sampling=sequential({grid}, first look {seq.first_look}, x{seq.growth:g})")
        return "  ".join(parts)


def _radius_grid(key: str, values) -> tuple[float, ...]:
    """A non-empty, strictly increasing tuple of finite radii >= 0."""
    if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
        raise ConfigError(key, values, "a list of radii, e.g. [0, 0.25, 0.5]")
    radii = tuple(_finite(key, v, ">= 0") for v in values)
    if not radii or min(radii) < 0 or any(b <= a for a, b in zip(radii, radii[1:], strict=False)):
        raise ConfigError(key, list(values), "a non-empty list of radii >= 0 in increasing order")
    return radii
