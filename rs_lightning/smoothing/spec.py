"""The one certification spec: every setting that defines a certificate, validated once.

``certify.py``, the certification callback, :class:`~rs_lightning.smoothing.Smooth`, the resume check and the
report's protocol check all build, store and compare this object (``as_dict``/``protocol``), with one
spelling per key. Its fields are the schema: each key's default, help text and role (compared between runs,
matched by a resume, or recorded only) are written once, in the field; :meth:`CertificationSpec.keys`,
:meth:`~CertificationSpec.defaults` and :data:`PROTOCOL_KEYS` are read from there, and ``conf/certify.yaml``,
``conf/callbacks/default.yaml``, the callback's keywords, ``RunRecord`` and ``Smooth`` follow it (a test
compares the config files with it). The chosen sampler's own settings are typed as ``<sampling>.<key>``
(``iss.decline``, ``sequential.radii``, ...: :mod:`.samplers`). A run's final spec, with what the model
decides (σ, noise, norm, the sampler's settings that need σ and d), is
:func:`~rs_lightning.smoothing.resolve.resolve`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

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

PROTOCOL, IDENTITY, RECORDED = "protocol", "identity", "recorded"
"""A key's role: ``protocol``: two runs must share it for their rows to be comparable (and a resume must
match it); ``identity``: a resume must match it, but runs that differ in it still compare (σ: reports group
runs by it); ``recorded``: stored, never compared (``batch_size``, ``channels_last`` and ``compile`` change
only the floating-point rounding inside the network, as a batch size does, not the statistics)."""


def _key(default, help: str, role: str = PROTOCOL, *, config: bool = True, from_model: bool = False):
    """A field of the schema: its default, its help text, its role; ``config``: a key of the config files
    (False: set by the engine or given in another form); ``from_model``: unset (None) in a request, the model
    decides it (:func:`~rs_lightning.smoothing.resolve.resolve`)."""
    metadata = {"help": help, "role": role, "config": config, "from_model": from_model}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class CertificationSpec:
    """Every setting of a CERTIFY or PREDICT run (Cohen, Rosenfeld & Kolter, ICML 2019, Alg. 1); each field's
    meaning is its ``help`` (:meth:`help`).

    ``noise`` and ``norm`` select the :class:`~rs_lightning.smoothing.certificate.Certificate` (Gaussian L∞:
    σΦ⁻¹(pA_lower)/√d with d the number of input coordinates, what an ARS pipeline certifies); ``sampler``
    holds the settings of the sampler ``sampling`` names. Construction validates every value and raises
    :class:`~rs_lightning.validation.ConfigError` naming the key, the value and the allowed range.
    """

    sigma: float | None = _key(
        None,
        "the noise level: its per-coordinate standard deviation in [0,1]-pixel units; None until the model "
        "gives it (its training sigma); the engine refuses a spec without one",
        IDENTITY,
        from_model=True,
    )
    n0: int | None = _key(
        None,
        "selection draws (Cohen et al. 2019, Alg. 1); None = 100 for a sampler whose selection draws choose "
        "the class; must stay unset with mode=predict and with the others (sampling=iss: its pilot selects)",
    )
    n: int = _key(100_000, "estimation draws (PREDICT: its draws; sampling=iss|sequential: the cap)")
    alpha: float = _key(0.001, "failure probability of each certificate (PREDICT: of each prediction)")
    seed: int = _key(0, "the noise of input i is seeded by (seed, i, phase)")
    batch_size: int = _key(1000, "noisy samples per forward pass", RECORDED)
    split: str = _key("test", "the split certified: test | train")
    noise_block: int = _key(
        NOISE_BLOCK,
        "draws per seeded noise block: fixed by the engine, recorded so that rows of another are recognized",
        config=False,
    )
    mode: str = _key("certify", "certify (CERTIFY) | predict (Cohen's PREDICT)")
    precision: str = _key(
        "32", "32 | bf16 | 16 (CUDA only): the network under torch.autocast at that dtype (the certified f)"
    )
    channels_last: bool = _key(False, "run the network on channels-last inputs (a converted copy)", RECORDED)
    compile: bool = _key(False, "torch.compile the network (eager mode with a warning if it fails)", RECORDED)
    sampling: str | None = _key(
        None,
        "the sampler (SAMPLERS: cohen | iss | sequential | a registered one); None = that of `sampler` if "
        "it is one, else cohen",
    )
    sampler: Sampler | Mapping | None = _key(
        None,
        "the sampler's settings: None (its defaults), a mapping of its fields, or the sampler itself (e.g. "
        "Sequential(radii=(0, 0.25, 0.5))); in a config the node named after the sampler (iss:, sequential:)",
        config=False,
    )
    norm: str | None = _key(
        None,
        "l2 | l1 | linf: the ball the radius is for; None = the noise's own (l2 for Gaussian, l1 for the "
        "others), or linf for a randomized pipeline (ARS certifies nothing else)",
        from_model=True,
    )
    noise: str = _key(
        "gaussian",
        "gaussian | gaussian_lattice | laplace | uniform: the smoothing noise at per-coordinate std sigma; "
        "unset in a request = gaussian_lattice for a Gaussian-trained model on 8-bit inputs, else the "
        "model's training noise (Gaussian for a model that records none)",
        from_model=True,
    )

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

    # ---------------------------------------------------------------------------------------- the schema
    @classmethod
    def keys(cls, *, role: str | None = None, config: bool | None = None) -> tuple[str, ...]:
        """The spec's keys in field order: all of them, those of one ``role`` (:data:`PROTOCOL`,
        :data:`IDENTITY`, :data:`RECORDED`), and/or those that are (``config=True``) or are not keys of the
        config files."""
        return tuple(
            f.name
            for f in dataclasses.fields(cls)
            if (role is None or f.metadata["role"] == role)
            and (config is None or f.metadata["config"] == config)
        )

    @classmethod
    def defaults(cls) -> dict:
        """Each key's default, by name (None: resolved, see its :meth:`help`)."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    @classmethod
    def help(cls, key: str) -> str:
        """What ``key`` means, its allowed values and what its default stands for."""
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}[key]

    # ----------------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, values: Mapping, prefix: str = "") -> CertificationSpec:
        """Build from a mapping with the spec's keys (a Hydra node, ``settings.json``, a request); unknown
        keys are ignored, and so is a None for a key the model decides (:data:`FROM_MODEL`: its default
        stands in until :func:`~rs_lightning.smoothing.resolve.resolve`). The sampler's settings are its
        ``sampler`` value or, without one, the node named after the sampler (``iss``, ``sequential``: a
        config node, or ``settings.json`` of earlier versions). ``prefix`` is put before every key in error
        messages (``callbacks.certification.``)."""
        names = set(cls.keys()) - {"sampler"}
        kwargs = {k: values[k] for k in names if k in values}
        kwargs = {k: v for k, v in kwargs.items() if not (v is None and k in FROM_MODEL)}
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


PROTOCOL_KEYS = CertificationSpec.keys(role=PROTOCOL)
"""The settings two runs must share for their rows to be comparable (with the inputs and σ), read from the
schema: every key but σ (:data:`IDENTITY`) and those :data:`RECORDED` only."""

FROM_MODEL = tuple(f.name for f in dataclasses.fields(CertificationSpec) if f.metadata["from_model"])
"""The keys a request may leave unset for the model to decide (σ, noise, norm)."""
