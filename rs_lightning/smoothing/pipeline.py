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
accounting's. A model that computes with σ (a pipeline; a diffusion denoiser, whose timestep σ picks) is
certified at a run's σ as :func:`at_sigma` gives it — a copy at that σ, the model itself left unchanged.
"""

from __future__ import annotations

import copy
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from rs_lightning.validation import ConfigError


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


def check_pipeline_certifies(pipeline: str | None, norms: tuple[str, ...], norm: str, noise: str) -> None:
    """ConfigError when a pipeline (its class name; None: not a pipeline) whose accounting certifies ``norms``
    is asked for another ``norm`` (ARS: L∞ only) or another noise than Gaussian (every pipeline draws it)."""
    if pipeline is not None and noise != "gaussian":
        raise ConfigError(
            "noise",
            noise,
            f"gaussian for a {pipeline} pipeline",
            "its accounting is that of Gaussian noise: pass noise=gaussian",
        )
    if pipeline is not None and norm not in norms:
        raise ConfigError(
            "norm",
            norm,
            " or ".join(norms) + f" for a {pipeline} pipeline",
            "its noise is calibrated to the L-infinity threat model (Lyu et al., NeurIPS 2024): pass "
            "norm=linf",
        )


def follows_sigma(module) -> bool:
    """Whether ``module`` computes with the noise level it is certified at, read from its ``sigma``: a
    pipeline (it scales its noise by it) or a module whose class says so with ``follows_sigma = True`` (a
    diffusion denoiser, whose one-shot timestep is chosen by it)."""
    return isinstance(module, NoisePipeline) or getattr(type(module), "follows_sigma", False) is True


def at_sigma(model, sigma: float):
    """``model`` as it is certified at noise level ``sigma``, leaving ``model`` as it is: where a module of it
    follows σ (:func:`follows_sigma`) at another value, a shallow copy of the path to it with ``sigma`` set
    (the weights, buffers and every other module shared); ``model`` itself where none does. A pipeline's
    accounting holds at any σ, and a diffusion denoiser denoises at the σ of its inputs, so a checkpoint can
    be certified at another σ than its training one without changing the checkpoint's model."""
    if not isinstance(model, nn.Module) or all(
        not follows_sigma(m) or m.sigma == float(sigma) for m in model.modules()
    ):
        return model
    clone = copy.copy(model)
    children = model._modules.items()
    clone.__dict__["_modules"] = {name: None if m is None else at_sigma(m, sigma) for name, m in children}
    if follows_sigma(model):
        setattr(clone, "sigma", float(sigma))  # noqa: B010 (the copy's own attribute, not the model's)
    return clone
