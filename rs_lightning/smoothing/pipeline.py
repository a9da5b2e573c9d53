"""Randomized base classifiers: a pipeline whose only randomness is standard-normal noise handed to it.

CERTIFY (Cohen et al. 2019) certifies g(x) = argmax_c P_ε[F(x, ε) = c] for any function F of the clean input
and i.i.d. noise: Clopper–Pearson needs independent votes, nothing more. Gaussian smoothing is
F(x, ε) = f(x + σε); an Adaptive-RS pipeline (Lyu et al., NeurIPS 2024) makes two noisy queries and a
data-dependent mask, and its accounting fixes the radius for every mask. A pipeline is any module with
``noise_draws`` (standard-normal tensors of the input's shape per sample), ``sigma`` and ``norms`` (the balls
its accounting certifies) that maps ``(x, noise)`` to logits; the engine draws that noise from the per-input
seeded streams (so results stay independent of batching, shards and resumes) and calls ``pipeline(x, noise)``.
A pipeline must hold no other randomness (no dropout or augmentation in eval mode: a batch-wide random flip,
as in the ARS reference code, makes the votes dependent) and must refuse inputs of another shape than its
accounting's.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class NoisePipeline(Protocol):
    """A randomized base classifier ``F(x, noise) -> logits``: ``x`` ``(B, *shape)`` clean inputs in [0,1],
    ``noise`` ``(B, noise_draws, *shape)`` standard normal (e.g. ``models.ars.AdaptiveSmoothing``)."""

    noise_draws: int
    norms: tuple[str, ...]
    sigma: float

    def __call__(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor: ...


def pipeline_of(model) -> NoisePipeline | None:
    """The pipeline behind ``model`` (itself, or the module a prepared classifier wraps), or None for a
    plain base classifier."""
    module = getattr(model, "module", model)
    return module if isinstance(module, NoisePipeline) else None
