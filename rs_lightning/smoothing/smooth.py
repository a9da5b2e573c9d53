"""Cohen et al.'s ``Smooth`` API (locuslab/smoothing ``core.py``) on top of the batched engine."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from .engine import ABSTAIN, certify_batch, predict_batch


class Smooth:
    """The smoothed classifier g(x) = argmax_c P[f(x + eps) = c], eps ~ N(0, sigma^2 I).

    Same semantics as Cohen et al. 2019: ``x`` is one input without a batch dimension, in [0,1] pixel
    space (any normalization is the base classifier's first layer). Noise is reproducible: call ``k``
    (counted from 0 per ``Smooth`` object) uses noise seeded by ``(seed, k)`` unless ``index`` is given.
    """

    ABSTAIN = ABSTAIN

    def __init__(self, base_classifier: nn.Module, num_classes: int, sigma: float, seed: int = 0):
        if sigma <= 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.base_classifier = base_classifier
        self.num_classes = num_classes
        self.sigma = sigma
        self.seed = seed
        self._calls = itertools.count()

    def _prepare(self, x: torch.Tensor, index: int | None) -> tuple[torch.Tensor, list[int]]:
        self.base_classifier.eval()
        return x.unsqueeze(0), [next(self._calls) if index is None else index]

    def certify(
        self, x: torch.Tensor, n0: int, n: int, alpha: float, batch_size: int, index: int | None = None
    ) -> tuple[int, float]:
        """CERTIFY: ``(class, radius)``, or ``(ABSTAIN, 0.0)``; correct with probability >= 1 - alpha."""
        xs, indices = self._prepare(x, index)
        result = certify_batch(
            self.base_classifier,
            xs,
            indices,
            sigma=self.sigma,
            num_classes=self.num_classes,
            n0=n0,
            n=n,
            alpha=alpha,
            batch_size=batch_size,
            seed=self.seed,
        )
        return int(result.predict[0]), float(result.radius[0])

    def predict(
        self, x: torch.Tensor, n: int, alpha: float, batch_size: int, index: int | None = None
    ) -> int:
        """PREDICT: g(x), or ABSTAIN; wrong (not abstaining) with probability <= alpha."""
        xs, indices = self._prepare(x, index)
        return int(
            predict_batch(
                self.base_classifier,
                xs,
                indices,
                sigma=self.sigma,
                num_classes=self.num_classes,
                n=n,
                alpha=alpha,
                batch_size=batch_size,
                seed=self.seed,
            )[0]
        )
