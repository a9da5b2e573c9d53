"""Randomized base classifiers: a pipeline whose only randomness is standard-normal noise handed to it.

CERTIFY (Cohen et al. 2019) certifies g(x) = argmax_c P_ε[F(x, ε) = c] for any function F of the clean input
and i.i.d. noise: Clopper–Pearson needs independent votes, nothing more. Gaussian smoothing is
F(x, ε) = f(x + σε); an Adaptive-RS pipeline (Lyu et al., NeurIPS 2024; extensions.md §1.3) makes two noisy
queries and a data-dependent mask, and its accounting fixes the radius for every mask. A pipeline declares
``noise_draws`` (standard-normal tensors of the input's shape per sample), its ``sigma`` and the ``norms`` its
accounting certifies; the engine draws that noise from the per-input seeded streams (so results stay
independent of batching, shards and resumes) and calls ``pipeline(x, noise)``. A pipeline must hold no
other randomness (no dropout or augmentation in eval mode: extensions.md §1.10 item 3).
"""

from __future__ import annotations

import torch
from torch import nn


class NoisePipeline(nn.Module):
    """Base of randomized base classifiers ``F(x, noise) -> logits``.

    Subclasses set :attr:`noise_draws`, :attr:`sigma` and :attr:`norms` and implement :meth:`forward` with
    ``x`` ``(B, *shape)`` clean inputs in [0,1] and ``noise`` ``(B, noise_draws, *shape)`` standard normal.
    """

    noise_draws: int = 1
    norms: tuple[str, ...] = ("linf",)
    sigma: float

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


def pipeline_of(model) -> NoisePipeline | None:
    """The :class:`NoisePipeline` behind ``model`` (itself, or the module a prepared classifier wraps)."""
    module = getattr(model, "module", model)
    return module if isinstance(module, NoisePipeline) else None
