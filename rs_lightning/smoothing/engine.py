"""Batched PREDICT/CERTIFY engine (Cohen, Rosenfeld & Kolter, ICML 2019, Alg. 1).

Noise samples of several inputs are packed into full forward batches and counted on the device; the noise
of input ``i`` comes from ``(seed, i, phase)`` (see :mod:`.noise`), so results are independent of batching.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rs_lightning.validation import require_at_least, require_open_unit, require_positive

from .noise import Phase, block_sizes, standard_normal_block
from .stats import clopper_pearson_lower, radius_from_pa, top_two_pvalue

ABSTAIN = -1


@dataclass
class CertifyResult:
    """Per-input CERTIFY outcomes for ``len(index)`` inputs (numpy arrays, aligned).

    ``predict`` is the selected class or ABSTAIN; ``n_a`` counts the *selected* class among the ``n``
    estimation draws; ``counts`` holds all classes' estimation counts (used for pA w.r.t. a true label).
    """

    index: np.ndarray
    predict: np.ndarray
    radius: np.ndarray
    n_a: np.ndarray
    pa_lower: np.ndarray
    n_a0: np.ndarray
    counts: np.ndarray
    n: int
    n0: int

    @property
    def pa_hat(self) -> np.ndarray:
        """Point estimate ``nA / n`` of the selected class's probability under noise."""
        return self.n_a / self.n


def _check_inputs(xs: torch.Tensor, indices: Sequence[int]) -> list[int]:
    indices = [int(i) for i in indices]
    if xs.shape[0] != len(indices):
        raise ValueError(f"got {xs.shape[0]} inputs but {len(indices)} indices; pass one index per input")
    return indices


@torch.inference_mode()
def sample_counts(
    model: nn.Module,
    xs: torch.Tensor,
    indices: Sequence[int],
    *,
    phase: Phase,
    num_samples: int,
    sigma: float,
    num_classes: int,
    batch_size: int,
    seed: int = 0,
) -> torch.Tensor:
    """Count ``argmax model(x_i + sigma * eps)`` per class over ``num_samples`` draws for every input.

    Args:
        model: base classifier mapping ``(B, *shape)`` inputs in [0,1] pixel space to logits; used as is
            (callers put it in eval mode).
        xs: ``(G, *shape)`` clean inputs, on the model's device.
        indices: dataset index of each input: its noise is seeded by ``(seed, index, phase)``.
    Returns:
        ``(G, num_classes)`` int64 counts on ``xs.device``.
    """
    indices = _check_inputs(xs, indices)
    groups, shape, device = xs.shape[0], tuple(xs.shape[1:]), xs.device
    counts = torch.zeros(groups * num_classes, dtype=torch.long, device=device)
    if num_samples == 0 or groups == 0:
        return counts.view(groups, num_classes)
    capacity = min(batch_size, groups * num_samples)
    batch = torch.empty((capacity, *shape), device=device, dtype=xs.dtype)
    owner = torch.empty(capacity, dtype=torch.long, device=device)
    generator = torch.Generator(device=device)
    filled = 0

    def flush() -> None:
        nonlocal filled
        predictions = model(batch[:filled]).argmax(dim=1)
        counts.add_(torch.bincount(owner[:filled] * num_classes + predictions, minlength=counts.numel()))
        filled = 0

    for g, index in enumerate(indices):
        for block, rows in enumerate(block_sizes(num_samples)):
            fits = capacity - filled >= rows
            noise = standard_normal_block(
                seed,
                index,
                int(phase),
                block,
                rows,
                shape,
                device=device,
                dtype=xs.dtype,
                generator=generator,
                out=batch[filled : filled + rows] if fits else None,
            )
            noise.mul_(sigma).add_(xs[g])
            done = 0
            while done < rows:
                take = min(rows - done, capacity - filled)
                if not fits:
                    batch[filled : filled + take].copy_(noise[done : done + take])
                owner[filled : filled + take] = g
                filled += take
                done += take
                if filled == capacity:
                    flush()
    if filled:
        flush()
    return counts.view(groups, num_classes)


def certify_batch(
    model: nn.Module,
    xs: torch.Tensor,
    indices: Sequence[int],
    *,
    sigma: float,
    num_classes: int,
    n0: int,
    n: int,
    alpha: float,
    batch_size: int,
    seed: int = 0,
) -> CertifyResult:
    """CERTIFY every input of ``xs`` (Cohen et al. 2019, Alg. 1).

    Selection: ``cA = argmax`` of counts over ``n0`` draws. Estimation: ``nA`` = count of ``cA`` over ``n``
    fresh draws; ``pA_lower`` = one-sided Clopper–Pearson bound at level ``alpha``. Abstain (ABSTAIN,
    radius 0) if ``pA_lower < 1/2``, else radius ``sigma * Phi^-1(pA_lower)``. With probability >= 1 - alpha
    per input, the result abstains or equals g(x), and g is constant on the L2 ball of that radius.
    """
    check_certify_args(sigma=sigma, n0=n0, n=n, alpha=alpha, batch_size=batch_size)
    kwargs = dict(sigma=sigma, num_classes=num_classes, batch_size=batch_size, seed=seed)
    counts0 = sample_counts(model, xs, indices, phase=Phase.SELECTION, num_samples=n0, **kwargs)
    counts = sample_counts(model, xs, indices, phase=Phase.ESTIMATION, num_samples=n, **kwargs)
    selected = counts0.argmax(dim=1)
    n_a0 = counts0.gather(1, selected[:, None]).squeeze(1)
    n_a = counts.gather(1, selected[:, None]).squeeze(1)
    selected, n_a0, n_a, counts = (t.cpu().numpy() for t in (selected, n_a0, n_a, counts))
    pa_lower = clopper_pearson_lower(n_a, n, alpha)
    abstain = pa_lower < 0.5
    return CertifyResult(
        index=np.asarray(indices, dtype=np.int64),
        predict=np.where(abstain, ABSTAIN, selected),
        radius=radius_from_pa(pa_lower, sigma),
        n_a=n_a,
        pa_lower=pa_lower,
        n_a0=n_a0,
        counts=counts,
        n=n,
        n0=n0,
    )


def predict_batch(
    model: nn.Module,
    xs: torch.Tensor,
    indices: Sequence[int],
    *,
    sigma: float,
    num_classes: int,
    n: int,
    alpha: float,
    batch_size: int,
    seed: int = 0,
) -> np.ndarray:
    """PREDICT every input (Cohen et al. 2019, Alg. 1): the top class of ``n`` draws, or ABSTAIN when the
    two-sided binomial test of the top two counts has p-value > alpha. Returns an int64 array."""
    check_certify_args(sigma=sigma, n0=1, n=n, alpha=alpha, batch_size=batch_size)
    counts = sample_counts(
        model,
        xs,
        indices,
        phase=Phase.PREDICTION,
        num_samples=n,
        sigma=sigma,
        num_classes=num_classes,
        batch_size=batch_size,
        seed=seed,
    ).cpu()
    top2 = counts.topk(2 if num_classes > 1 else 1, dim=1)
    out = np.empty(len(counts), dtype=np.int64)
    for i, (values, classes) in enumerate(zip(top2.values.tolist(), top2.indices.tolist(), strict=True)):
        second = values[1] if len(values) > 1 else 0
        out[i] = ABSTAIN if top_two_pvalue(values[0], second) > alpha else classes[0]
    return out


def check_certify_args(*, sigma: float, n0: int, n: int, alpha: float, batch_size: int) -> None:
    """Raise :class:`~rs_lightning.validation.ConfigError` for arguments outside their meaning."""
    require_positive("sigma", sigma)
    require_at_least("n0", n0, 1)
    require_at_least("n", n, 1)
    require_open_unit("alpha", alpha)
    require_at_least("batch_size", batch_size, 1)
