"""Cohen et al.'s ``Smooth`` API (locuslab/smoothing ``core.py``) on top of the batched engine."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from .engine import ABSTAIN, certify_batch, predict_batch, prepare
from .precision import check_precision_supported
from .samplers import Sampler
from .spec import CertificationSpec

PER_CALL = ("n0", "n", "alpha", "batch_size", "mode", "sampling")
"""The spec's keys that :meth:`Smooth.certify` and :meth:`Smooth.predict` take, as in Cohen et al.'s
``core.py``."""
KEYS = tuple(
    key for key in CertificationSpec.keys(config=True) if key not in (*PER_CALL, "sigma", "seed", "split")
)
"""The spec's keys ``Smooth(...)`` takes by keyword (``precision channels_last compile norm noise``): those of
the smoothed classifier, besides ``sigma`` and ``seed``; defaults and meaning: the spec's."""


class Smooth:
    """The smoothed classifier g(x) = argmax_c P[f(x + eps) = c], eps ~ N(0, sigma^2 I) (or another noise of
    per-coordinate standard deviation sigma: ``noise="laplace"|"uniform"``).

    Same semantics as Cohen et al. 2019: ``x`` is one input without a batch dimension, in [0,1] pixel
    space (any normalization is the base classifier's first layer). Noise is reproducible: call ``k``
    (counted from 0 per ``Smooth`` object) uses noise seeded by ``(seed, k)`` unless ``index`` is given, so
    successive calls draw fresh noise.

    Keywords besides ``seed`` (:data:`KEYS`, each as in :class:`~.spec.CertificationSpec`, same defaults):
    ``precision`` (``"32"``, ``"bf16"``, ``"16"`` on CUDA), ``channels_last`` and ``compile`` choose how the
    base classifier f is evaluated (see :mod:`rs_lightning.smoothing.precision`: the certificate is for f
    at that precision). ``certify(..., sampler=InputSpecific(...))`` uses input-specific sampling.
    ``noise`` and ``norm`` select the certificate (:mod:`~rs_lightning.smoothing.certificate`; ``norm`` None =
    the noise's own: L2 for Gaussian, L1 for the others); ``norm="linf"`` states Gaussian radii for the L∞
    ball (σΦ⁻¹(pA_lower)/√d), which a randomized pipeline
    (:class:`~rs_lightning.smoothing.pipeline.NoisePipeline`, e.g. ARS) as ``base_classifier`` needs.
    """

    ABSTAIN = ABSTAIN

    def __init__(
        self,
        base_classifier: nn.Module,
        num_classes: int,
        sigma: float,
        seed: int = 0,
        **settings,
    ):
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes must be an integer >= 2, got {num_classes}")
        if unknown := sorted(set(settings) - set(KEYS)):
            raise TypeError(f"Smooth got unexpected keyword arguments {unknown}; it takes {', '.join(KEYS)}")
        base = CertificationSpec(sigma=sigma, seed=seed, **settings)
        self.base_classifier = base_classifier
        self.num_classes = num_classes
        self.sigma = base.sigma
        self.seed = seed
        self._base_spec = base
        self._classifier = prepare(base_classifier, base)
        self._calls = itertools.count()

    def _prepare(self, x: torch.Tensor, index: int | None) -> tuple[torch.Tensor, list[int]]:
        check_precision_supported(self._base_spec.precision, x.device)
        self.base_classifier.eval()
        self._classifier.refresh()  # a channels_last copy follows the model's current weights and device
        return x.unsqueeze(0), [next(self._calls) if index is None else index]

    def _spec(self, **settings) -> CertificationSpec:
        values = self._base_spec.as_dict()
        values = {k: v for k, v in values.items() if k not in ("sampling", "sampler", "n0", "mode")}
        return CertificationSpec(**(values | settings))

    def certify(
        self,
        x: torch.Tensor,
        n0: int | None,
        n: int,
        alpha: float,
        batch_size: int,
        index: int | None = None,
        *,
        sampling: str | None = None,
        sampler: Sampler | dict | None = None,
    ) -> tuple[int, float]:
        """CERTIFY: ``(class, radius)``, or ``(ABSTAIN, 0.0)``; correct with probability >= 1 - alpha.

        ``sampler`` is a sampler (:mod:`.samplers`) or, with ``sampling=`` its name, a dict of its settings;
        default Cohen's fixed n. With ``InputSpecific(...)`` (``sampling="iss"``) pass ``n0=None`` (the pilot
        ``k0`` selects the class); ``n`` is then the largest budget. With ``Sequential(radii=...)`` (default
        the report's grid) the draws stop once the radius bucket is decided; ``n`` is the cap.
        """
        spec = self._spec(n0=n0, n=n, alpha=alpha, batch_size=batch_size, sampling=sampling, sampler=sampler)
        xs, indices = self._prepare(x, index)
        result = certify_batch(self._classifier, xs, indices, spec, num_classes=self.num_classes)
        return int(result.predict[0]), float(result.radius[0])

    def predict(
        self, x: torch.Tensor, n: int, alpha: float, batch_size: int, index: int | None = None
    ) -> int:
        """PREDICT: g(x), or ABSTAIN; wrong (not abstaining) with probability <= alpha."""
        spec = self._spec(mode="predict", n=n, alpha=alpha, batch_size=batch_size)
        xs, indices = self._prepare(x, index)
        return int(
            predict_batch(self._classifier, xs, indices, spec, num_classes=self.num_classes).predict[0]
        )
