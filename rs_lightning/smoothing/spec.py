"""The one certification spec: every setting that defines a certificate, validated once.

``certify.py``, the certification callback, :class:`~rs_lightning.smoothing.Smooth`, the resume check and the
report's protocol check all build, store and compare this object (``as_dict``/``protocol``), with one
spelling per key. Keys, as users type them: ``sigma n0 n alpha seed batch_size split noise_block mode
precision channels_last compile sampling norm noise``, and the chosen sampler's own as ``<sampling>.<key>``
(``iss.decline``, ``sequential.radii``, ...: :mod:`.samplers`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rs_lightning.validation import ConfigError

from .certificate import NOISES, NORMS, Certificate, default_norm
from .noise import NOISE_BLOCK
from .samplers import SAMPLERS, Sampler, sampler_class
from .samplers.base import choice, finite, flag, integer

MODES = ("certify", "predict")
PRECISIONS = ("32", "bf16", "16")
SPLITS = ("train", "test")
DEFAULT_N0 = 100

PROTOCOL_KEYS = (
    "mode", "n0", "n", "alpha", "seed", "split", "noise_block", "precision", "sampling", "sampler", "noise",
    "norm",
)  # fmt: skip
"""The settings two runs must share for their rows to be comparable (with the inputs and σ). ``batch_size``,
``channels_last`` and ``compile`` change only the floating-point rounding inside the network (as the batch
size does), not the statistics, so they are recorded but not compared."""


@dataclass(frozen=True)
class CertificationSpec:
    """Every setting of a CERTIFY or PREDICT run (Cohen, Rosenfeld & Kolter, ICML 2019, Alg. 1).

    ``sigma`` may be None until the checkpoint supplies it (:meth:`with_sigma`); the engine refuses a spec
    without one. ``sampling`` names the sampler (:data:`~rs_lightning.smoothing.samplers.SAMPLERS`; None: that
    of ``sampler`` if it is one, else ``cohen``) and ``sampler`` holds its settings (None: its defaults; a
    mapping of its fields; or the sampler itself, e.g. ``Sequential(radii=(0, 0.25, 0.5))``). ``n0`` defaults
    to 100 for a sampler whose selection draws choose the class and must stay unset for ``mode=predict`` and
    for the others (``sampling=iss``: its pilot selects the class).
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
    sampling: str | None = None
    sampler: Sampler | Mapping | None = None
    norm: str | None = None
    noise: str = "gaussian"

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        set_("mode", choice("mode", self.mode, MODES))
        set_("noise", choice("noise", self.noise, NOISES))
        set_("norm", choice("norm", default_norm(self.noise) if self.norm is None else self.norm, NORMS))
        Certificate(self.noise, self.norm)  # a pair without a certificate: one line naming those with one
        if self.sigma is not None:
            sigma = finite("sigma", self.sigma, "> 0")
            if sigma <= 0:
                raise ConfigError("sigma", self.sigma, "> 0")
            set_("sigma", sigma)
        set_("n", integer("n", self.n, 1))
        alpha = finite("alpha", self.alpha, "in the open interval (0, 1)")
        if not 0 < alpha < 1:
            raise ConfigError("alpha", self.alpha, "in the open interval (0, 1)")
        set_("alpha", alpha)
        set_("seed", integer("seed", self.seed, 0))
        set_("batch_size", integer("batch_size", self.batch_size, 1))
        set_("split", choice("split", self.split, SPLITS))
        set_("noise_block", integer("noise_block", self.noise_block, 1))
        set_("precision", choice("precision", self.precision, PRECISIONS))
        set_("channels_last", flag("channels_last", self.channels_last))
        set_("compile", flag("compile", self.compile))
        name = self.sampling
        if name is None:
            name = self.sampler.name if isinstance(self.sampler, Sampler) else "cohen"
        cls = sampler_class(name)
        set_("sampling", cls.name)
        if self.mode not in cls.modes:
            able = [k for k, c in SAMPLERS.items() if self.mode in c.modes]
            raise ConfigError("sampling", self.sampling, " or ".join(able) + f" with mode={self.mode}")
        if self.mode == "predict" and self.n0 is not None:
            raise ConfigError(
                "n0", self.n0, "unset with mode=predict", "PREDICT has no selection draws; drop n0="
            )
        if self.mode == "certify" and not cls.selects_with_n0 and self.n0 is not None:
            raise ConfigError("n0", self.n0, f"unset with sampling={cls.name}", cls.n0_unset_reason)
        if self.mode == "certify" and cls.selects_with_n0:
            set_("n0", integer("n0", DEFAULT_N0 if self.n0 is None else self.n0, 1))
        set_("sampler", cls.build(self.sampler, self))

    # ----------------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, values: Mapping, prefix: str = "") -> CertificationSpec:
        """Build from a mapping with the spec's keys (a Hydra node, ``settings.json``); unknown keys are
        ignored. The sampler's settings are its ``sampler`` value or, without one, the node named after the
        sampler (``iss``, ``sequential``: a config node, or ``settings.json`` of earlier versions). ``prefix``
        is put before every key in error messages (``callbacks.certification.``)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"sampler"}
        kwargs = {k: values[k] for k in names if k in values}
        settings = values.get("sampler")
        if settings is None and kwargs.get("sampling") is not None:
            settings = values.get(str(kwargs["sampling"]).lower())
        if isinstance(settings, Mapping):
            settings = dict(settings)
        try:
            return cls(**kwargs, sampler=settings)
        except ConfigError as err:
            if not prefix:
                raise
            raise ConfigError(prefix + err.key, err.value, err.allowed) from None

    def with_sigma(self, sigma: float) -> CertificationSpec:
        """The same spec at ``sigma`` (validated)."""
        return dataclasses.replace(self, sigma=sigma)

    def resolved(self, dim: int) -> CertificationSpec:
        """The spec with the sampler's settings that need σ and the input size (``dim`` coordinates) resolved
        and checked (:meth:`~.samplers.base.Sampler.resolve`), before any work; the run records this form."""
        return dataclasses.replace(self, sampler=self.sampler.resolve(self, dim))

    @property
    def certificate(self) -> Certificate:
        """The noise/norm certificate (:mod:`.certificate`): the noise drawn and the radius stated."""
        return Certificate(self.noise, self.norm)

    def require_sigma(self) -> float:
        if self.sigma is None:
            raise ConfigError("sigma", None, "> 0", "no sigma was given and none was taken from a checkpoint")
        return self.sigma

    def as_dict(self) -> dict:
        """Plain JSON-able form (the keys of ``settings.json``; ``sampler`` is a dict, ``{}`` for a sampler
        without settings)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["sampler"] = self.sampler.as_dict()
        return out

    def protocol(self) -> dict:
        """The values of :data:`PROTOCOL_KEYS` (as in :meth:`as_dict`)."""
        values = self.as_dict()
        return {key: values[key] for key in PROTOCOL_KEYS}

    @property
    def bound_alpha(self) -> float:
        """The level the run is planned at (its grid's top radius): ``alpha``, or for ``sampling=sequential``
        alpha split evenly over its looks. Each row's own level is :meth:`row_levels`."""
        if self.mode != "certify":
            return self.alpha
        return self.sampler.plan_level(self)

    def row_levels(self, n, n_a0, dim: int | None = None) -> np.ndarray:
        """The level of each row's bound from its ``n`` and ``nA0`` (PREDICT: alpha, its test's)."""
        if self.mode != "certify":
            return np.full(np.shape(n), self.alpha)
        return self.sampler.levels(self, n, n_a0, dim)

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
        if self.sampling != "cohen":
            parts.append(self.sampler.describe(self))
        return "  ".join(parts)
