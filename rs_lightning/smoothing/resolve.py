"""A run's final spec: the user's request completed by what the certified model brings (:func:`resolve`).

``certify.py`` (:func:`~rs_lightning.cli.certify.plan_run`) and the certification callback both call
:func:`resolve`, once the model is known, with its :class:`ModelFacts`; neither changes the model: it is
certified at the spec's σ through :func:`~rs_lightning.smoothing.pipeline.at_sigma`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rs_lightning.validation import ConfigError

from .pipeline import check_pipeline_certifies, pipeline_of
from .spec import CertificationSpec


@dataclass(frozen=True)
class ModelFacts:
    """What the certified model (a checkpoint's metadata and the model built from it) says about its spec.

    Args:
        dim: input coordinates d = C·H·W (L∞ radii and the samplers' grids depend on it).
        train_sigma: the σ it was trained at; None for a model trained without noise (``method=clean``), a
            published checkpoint or a parameter-free model, which record none.
        train_noise: the noise it was trained with (Gaussian for checkpoints that record none).
        pipeline: the class name of a randomized pipeline (ARS), None for a plain base classifier.
        pipeline_norms: the balls the pipeline's accounting certifies.
    """

    dim: int
    train_sigma: float | None = None
    train_noise: str = "gaussian"
    pipeline: str | None = None
    pipeline_norms: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, model, dim: int, train_sigma: float | None = None, train_noise: str | None = None
    ) -> ModelFacts:
        """The facts of ``model`` (whether it is a pipeline, and its norms) with what its checkpoint
        records."""
        pipeline = pipeline_of(model)
        return cls(
            dim=int(dim),
            train_sigma=None if train_sigma is None else float(train_sigma),
            train_noise="gaussian" if train_noise is None else str(train_noise),
            pipeline=None if pipeline is None else type(pipeline).__name__,
            pipeline_norms=() if pipeline is None else tuple(pipeline.norms),
        )


def resolve_sigma(given: float | None, train_sigma: float | None, override_sigma: bool = False) -> float:
    """The σ to certify at: ``given``, else the training σ. A given σ other than the training one needs
    ``override_sigma`` (certify.py's ``override_sigma=true``: it is recorded); without a training σ one must
    be given."""
    if train_sigma is None:
        if given is None:
            raise ConfigError(
                "sigma",
                None,
                "the noise level to certify at",
                "the checkpoint's classifier was trained without noise (method=clean); pass e.g. sigma=0.25",
            )
        return float(given)
    if given is None or float(given) == float(train_sigma):
        return float(train_sigma)
    if not override_sigma:
        raise ConfigError(
            "sigma",
            given,
            f"the checkpoint's training sigma {train_sigma}",
            "To certify at another noise level, add override_sigma=true (it is recorded in settings.json)",
        )
    return float(given)


def default_noise(train_noise: str, on_grid: bool, pipeline: str | None = None) -> str:
    """The noise a run certifies with when none is given: lattice Gaussian noise for a model trained with
    Gaussian noise whose inputs are on the 8-bit grid (Voráček & Hein, ICLR 2023: its certificate holds in
    floating point, the float one does not; docs/correctness.md, "Lattice noise by default"), else the
    training noise. A pipeline (ARS) keeps float noise, which its accounting draws."""
    if train_noise == "gaussian" and on_grid and pipeline is None:
        return "gaussian_lattice"
    return train_noise


def resolve(
    request: Mapping,
    facts: ModelFacts,
    *,
    override_sigma: bool = False,
    on_grid: bool = False,
    prefix: str = "",
) -> CertificationSpec:
    """The spec a run certifies: ``request`` (the spec's keys as a config holds them, None = unset, the
    sampler's settings under its name; every value validated) completed from ``facts``, in this order:

    1. σ: the given one, else the training σ (:func:`resolve_sigma`; a given σ other than the training one
       needs ``override_sigma``, which the callback grants: its ``sigma=`` is that override);
    2. noise: the given one, else :func:`default_noise` (lattice Gaussian noise for a Gaussian-trained
       model when ``on_grid``, the inputs being on the 8-bit grid: 8-bit data or ``quantize=true``; else
       the training noise);
    3. norm: the given one, else L∞ for a pipeline with Gaussian noise (ARS certifies nothing else), else the
       noise's own; the pair must have a certificate and be one the pipeline's accounting covers;
    4. the sampler's settings that need σ and d, resolved and checked
       (:meth:`~.spec.CertificationSpec.resolved`: ISS's decline against the largest certifiable radius,
       the sequential sampler's radius grid), the form a run records.

    Not here: ``precision=auto`` and ``channels_last=auto``, which time forward passes of the model on the
    device (``resolve_auto`` in :mod:`rs_lightning.cli.certify`, a step of its own after this one), and
    whether the device runs the precision. ``prefix`` is put before the key of an error
    (``callbacks.certification.``).
    """
    try:
        CertificationSpec.from_dict(request)  # every given value checked before the model's are used
        values = dict(request)
        values["sigma"] = resolve_sigma(request.get("sigma"), facts.train_sigma, override_sigma)
        if values.get("noise") is None:
            values["noise"] = default_noise(facts.train_noise, on_grid, facts.pipeline)
        if values.get("norm") is None and facts.pipeline is not None and values["noise"] == "gaussian":
            values["norm"] = facts.pipeline_norms[0]
        spec = CertificationSpec.from_dict(values)
        check_pipeline_certifies(facts.pipeline, facts.pipeline_norms, spec.norm, spec.noise)
        return spec.resolved(facts.dim)
    except ConfigError as err:
        if not prefix:
            raise
        raise err.prefixed(prefix) from None
