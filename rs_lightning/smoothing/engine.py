"""Batched PREDICT/CERTIFY engine (Cohen, Rosenfeld & Kolter, ICML 2019, Alg. 1) and input-specific sampling.

Noise samples of several inputs are packed into full forward batches and counted on the device; the noise
of input ``i`` comes from ``(seed, i, phase)`` (see :mod:`.noise`), so results are independent of batching.
Every setting comes from one :class:`~rs_lightning.smoothing.spec.CertificationSpec`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .noise import GAUSSIAN, NOISE_BLOCK, Phase, block_sizes, noisy_block, standard_noise_block
from .noises import Noise
from .pipeline import check_pipeline_certifies, pipeline_of
from .precision import BaseClassifier, NonFiniteLogitsError, as_base_classifier, check_precision_supported
from .samplers.base import Count, pick
from .spec import CertificationSpec
from .stats import (
    clopper_pearson_lower,
    top_two_pvalue,
)

ABSTAIN = -1


@dataclass
class CertifyResult:
    """Per-input CERTIFY outcomes for ``len(index)`` inputs (numpy arrays, aligned).

    ``selected`` is the class chosen before estimation, ``predict`` the same or ABSTAIN; ``n_a`` counts the
    *selected* class among the ``n`` estimation draws (``n`` is per input: input-specific sampling chooses
    it, 0 = abstained without estimating); ``n0``/``n_a0`` are the selection (or ISS pilot) draws and the
    selected class's count among them; ``counts`` holds all classes' estimation counts; ``samples`` every
    draw the input cost.
    """

    index: np.ndarray
    selected: np.ndarray
    predict: np.ndarray
    radius: np.ndarray
    n_a: np.ndarray
    pa_lower: np.ndarray
    n_a0: np.ndarray
    counts: np.ndarray
    n: np.ndarray
    n0: np.ndarray
    samples: np.ndarray

    @property
    def pa_hat(self) -> np.ndarray:
        """Point estimate ``nA / n`` of the selected class's probability under noise (0 where n = 0)."""
        return np.divide(self.n_a, self.n, out=np.zeros(self.n_a.shape), where=self.n > 0)

    @property
    def flagged(self) -> np.ndarray:
        """Estimation draws that voted for no class: a lattice draw outside the exact table
        (:mod:`.noises.gaussian_lattice`); always 0 under float noise."""
        return self.n - self.counts.sum(axis=1)


@dataclass
class PredictResult:
    """Per-input PREDICT outcomes: ``predict`` (class or ABSTAIN), the top two counts ``n_top``/``n_second``
    among ``n`` draws, the two-sided binomial p-value and all classes' ``counts``."""

    index: np.ndarray
    predict: np.ndarray
    n_top: np.ndarray
    n_second: np.ndarray
    pvalue: np.ndarray
    counts: np.ndarray
    n: int

    @property
    def flagged(self) -> np.ndarray:
        """Draws that voted for no class (see :attr:`CertifyResult.flagged`)."""
        return self.n - self.counts.sum(axis=1)


def _check_inputs(xs: torch.Tensor, indices: Sequence[int]) -> list[int]:
    indices = [int(i) for i in indices]
    if xs.shape[0] != len(indices):
        raise ValueError(f"got {xs.shape[0]} inputs but {len(indices)} indices; pass one index per input")
    return indices


@torch.inference_mode()
def sample_counts(
    model: Callable[[torch.Tensor], torch.Tensor],
    xs: torch.Tensor,
    indices: Sequence[int],
    *,
    phase: Phase,
    num_samples: int | Sequence[int],
    sigma: float,
    num_classes: int,
    batch_size: int,
    seed: int = 0,
    noise_block: int = NOISE_BLOCK,
    first_block: int | Sequence[int] = 0,
    noise: Noise | None = None,
) -> torch.Tensor:
    """Count ``argmax model(x_i + sigma * eps)`` per class over ``num_samples`` draws for every input.

    Args:
        model: base classifier mapping ``(B, *shape)`` float32 inputs in [0,1] pixel space to logits (an
            ``nn.Module`` or a :class:`~rs_lightning.smoothing.precision.BaseClassifier`); used as is
            (callers put it in eval mode). A :class:`~rs_lightning.smoothing.pipeline.NoisePipeline` (at
            ``sigma``) is called as ``model(x_i, eps)`` with ``eps`` its ``noise_draws`` standard-normal
            tensors per sample, from the same per-input streams.
        xs: ``(G, *shape)`` clean inputs, on the model's device.
        indices: dataset index of each input: its noise is seeded by ``(seed, index, phase)``.
        num_samples: draws per input, one number for all or one per input.
        first_block: the block of each input's stream the draws start at (one for all or one per input):
            draws ``first_block * noise_block`` onwards, e.g. to continue a sequential estimate.
        noise: the noise drawn (:mod:`.noises`), at per-coordinate std ``sigma``
            (its scale λ); None = Gaussian.
    Returns:
        ``(G, num_classes)`` int64 counts on ``xs.device``.
    Raises:
        NonFiniteLogitsError: a noisy sample got NaN/inf logits (its argmax would be a silent class 0).
    """
    indices = _check_inputs(xs, indices)
    groups, shape, device = xs.shape[0], tuple(xs.shape[1:]), xs.device
    per_input = [int(num_samples)] * groups if np.ndim(num_samples) == 0 else [int(k) for k in num_samples]
    if len(per_input) != groups:
        raise ValueError(f"got {len(per_input)} sample sizes for {groups} inputs")
    starts = [int(first_block)] * groups if np.ndim(first_block) == 0 else [int(b) for b in first_block]
    pipeline = pipeline_of(model)
    if pipeline is not None and not math.isclose(float(pipeline.sigma), float(sigma), rel_tol=1e-12):
        raise ValueError(f"the pipeline runs at sigma={pipeline.sigma} but sigma={sigma} was asked for")
    sample_shape = shape if pipeline is None else (pipeline.noise_draws, *shape)
    # one slot more than inputs: copies that do not count (Noise.perturb) vote there, and it is dropped
    counts = torch.zeros((groups + 1) * num_classes, dtype=torch.long, device=device)
    total = sum(per_input)
    if total == 0:
        return counts.view(groups + 1, num_classes)[:groups]
    capacity = min(batch_size, total)
    batch = torch.empty((capacity, *sample_shape), device=device, dtype=xs.dtype)
    owner = torch.empty(capacity, dtype=torch.long, device=device)
    nonfinite = torch.zeros(groups + 1, dtype=torch.long, device=device)
    generator = torch.Generator(device=device)
    noise = noise if noise is not None else GAUSSIAN
    if pipeline is not None and noise != GAUSSIAN:
        raise ValueError(f"a {type(pipeline).__name__} pipeline draws Gaussian noise, not {noise.name}")
    filled = 0

    def flush() -> None:
        nonlocal filled
        if pipeline is None:
            logits = model(batch[:filled])
        else:  # the clean inputs beside their noise
            logits = model(xs.index_select(0, owner[:filled]), batch[:filled])
        nonfinite.index_add_(0, owner[:filled], (~torch.isfinite(logits).all(dim=1)).long())
        predictions = logits.argmax(dim=1)
        counts.add_(torch.bincount(owner[:filled] * num_classes + predictions, minlength=counts.numel()))
        filled = 0

    for g, index in enumerate(indices):
        for block, rows in enumerate(block_sizes(per_input[g], noise_block), start=starts[g]):
            fits = capacity - filled >= rows
            out = batch[filled : filled + rows] if fits else None
            counted = None
            if pipeline is None:
                draws, counted = noisy_block(
                    xs[g],
                    seed,
                    index,
                    int(phase),
                    block,
                    rows,
                    sigma,
                    noise=noise,
                    generator=generator,
                    out=out,
                )
            else:  # the pipeline scales its standard draws itself
                draws = standard_noise_block(
                    seed,
                    index,
                    int(phase),
                    block,
                    rows,
                    sample_shape,
                    noise=noise,
                    device=device,
                    dtype=xs.dtype,
                    generator=generator,
                    out=out,
                )
            done = 0
            while done < rows:
                take = min(rows - done, capacity - filled)
                if not fits:
                    batch[filled : filled + take].copy_(draws[done : done + take])
                owner[filled : filled + take] = g
                if counted is not None:  # a copy that does not count votes in the dropped slot
                    owner[filled : filled + take].masked_fill_(~counted[done : done + take], groups)
                filled += take
                done += take
                if filled == capacity:
                    flush()
    if filled:
        flush()
    nonfinite = nonfinite[:groups]  # a copy that does not count is not checked either
    if bool(nonfinite.any()):
        g = int(torch.nonzero(nonfinite)[0])
        raise NonFiniteLogitsError(
            f"the base classifier returned non-finite logits (NaN or inf) on {int(nonfinite[g])} of "
            f"{per_input[g]} noisy samples of input idx {indices[g]}; its weights may be NaN (a diverged "
            "run) or the precision may overflow (try precision=32); its certificate would be a constant class"
        )
    return counts.view(groups + 1, num_classes)[:groups]


def check_norm_supported(model, norm: str, noise: str = "gaussian") -> None:
    """ConfigError when ``model`` is a pipeline whose accounting does not certify ``norm`` (ARS: L∞ only)
    or draws another noise than ``noise`` (every pipeline draws Gaussian noise)."""
    pipeline = pipeline_of(model)
    if pipeline is not None:
        check_pipeline_certifies(type(pipeline).__name__, tuple(pipeline.norms), norm, noise)


def prepare(model, spec: CertificationSpec) -> BaseClassifier:
    """The base classifier of ``spec`` (precision, layout, compile) around ``model``, in eval mode.

    Prepare once per run and pass the result to the engine: preparing copies the network for
    ``channels_last`` and compiles it for ``compile``. A prepared classifier must match ``spec``.
    """
    if isinstance(model, BaseClassifier):
        mine = (model.precision, model.channels_last, model.compile)
        if mine != (spec.precision, spec.channels_last, spec.compile):
            raise ValueError(
                f"the prepared classifier runs precision={model.precision}, channels_last="
                f"{model.channels_last}, compile={model.compile} but the spec asks for precision="
                f"{spec.precision}, channels_last={spec.channels_last}, compile={spec.compile}"
            )
        return model.eval()
    return as_base_classifier(
        model, precision=spec.precision, channels_last=spec.channels_last, compile=spec.compile
    ).eval()


def _counts(
    model, xs, indices, spec: CertificationSpec, num_classes: int, phase: Phase, num_samples, first_block=0
):
    return sample_counts(
        model,
        xs,
        indices,
        phase=phase,
        num_samples=num_samples,
        sigma=spec.require_sigma(),
        num_classes=num_classes,
        batch_size=spec.batch_size,
        seed=spec.seed,
        noise_block=spec.noise_block,
        first_block=first_block,
        noise=spec.certificate.distribution,
    )


def counter(
    model, xs: torch.Tensor, indices: Sequence[int], spec: CertificationSpec, num_classes: int
) -> Count:
    """The :data:`~.samplers.base.Count` of a sampler's draw loop for these inputs."""

    def count(phase: Phase, num_samples, rows=None, first_block=0) -> torch.Tensor:
        if rows is None:
            return _counts(model, xs, indices, spec, num_classes, phase, num_samples, first_block)
        rows = np.asarray(rows)
        picked = xs.index_select(0, torch.as_tensor(rows, device=xs.device))
        return _counts(
            model, picked, [indices[j] for j in rows], spec, num_classes, phase, num_samples, first_block
        )

    return count


def certify_batch(
    model, xs: torch.Tensor, indices: Sequence[int], spec: CertificationSpec, *, num_classes: int
) -> CertifyResult:
    """CERTIFY every input of ``xs`` (Cohen et al. 2019, Alg. 1), with ``spec.sampling``:

    the sampler (:mod:`.samplers`) chooses ``cA`` before estimation (from draws of their own stream) and
    the estimation draws ``n`` that count it: ``cohen`` n0 selection draws then n fixed; ``iss`` a pilot then
    an input-specific n; ``sequential`` looks until the input's bucket on the radius grid is decided.

    ``pA_lower`` = one-sided Clopper–Pearson bound at the row's level (``alpha``; sequential: α spread over
    its looks, :meth:`~.spec.CertificationSpec.row_levels`); abstain (ABSTAIN,
    radius 0) if it is below 1/2, else the certificate's radius at it (``spec.certificate``; Gaussian L2:
    ``sigma * Phi^-1(pA_lower)``; ``spec.norm="linf"``: divided by
    √d, d the number of input coordinates). With probability >= 1 - alpha per input, the result abstains or
    equals g(x), and g is constant on the ball of that radius in ``spec.norm``. A
    :class:`~rs_lightning.smoothing.pipeline.NoisePipeline` certifies only the norms its accounting covers.
    """
    if spec.mode != "certify":
        raise ValueError(f"certify_batch needs a spec with mode='certify', got mode={spec.mode!r}")
    sigma = spec.require_sigma()
    check_norm_supported(model, spec.norm, spec.noise)
    check_precision_supported(spec.precision, xs.device)
    model = prepare(model, spec)
    dim = xs[0].numel()
    draws = spec.sampler.draw(spec, counter(model, xs, indices, spec, num_classes), xs.shape[0], dim)
    n, n0, samples = draws.n, draws.n0, draws.samples
    n_a0, n_a = pick(draws.counts0, draws.selected), pick(draws.counts, draws.selected)
    selected, n_a0, n_a, counts = (t.cpu().numpy() for t in (draws.selected, n_a0, n_a, draws.counts))
    pa_lower = clopper_pearson_lower(n_a, n, draws.level)
    abstain = (pa_lower < 0.5) | (n == 0)
    return CertifyResult(
        index=np.asarray(indices, dtype=np.int64),
        selected=selected,
        predict=np.where(abstain, ABSTAIN, selected),
        radius=np.where(abstain, 0.0, spec.certificate.radius(pa_lower, sigma, xs[0].numel())),
        n_a=n_a,
        pa_lower=pa_lower,
        n_a0=n_a0,
        counts=counts,
        n=n,
        n0=n0,
        samples=samples,
    )


def predict_batch(
    model, xs: torch.Tensor, indices: Sequence[int], spec: CertificationSpec, *, num_classes: int
) -> PredictResult:
    """PREDICT every input (Cohen et al. 2019, Alg. 1): the top class of ``n`` draws (their own noise
    stream), or ABSTAIN when the two-sided binomial test of the top two counts has p-value > alpha. Returns
    a wrong class (not abstaining) with probability <= alpha per input (Hung & Fithian, Ann. Statist.
    2019)."""
    if spec.mode != "predict":
        raise ValueError(f"predict_batch needs a spec with mode='predict', got mode={spec.mode!r}")
    check_precision_supported(spec.precision, xs.device)
    model = prepare(model, spec)
    counts = _counts(model, xs, indices, spec, num_classes, Phase.PREDICTION, spec.n).cpu()
    top2 = counts.topk(min(2, num_classes), dim=1)
    n_top = top2.values[:, 0].numpy()
    n_second = top2.values[:, 1].numpy() if num_classes > 1 else np.zeros_like(n_top)
    pvalue = np.array([top_two_pvalue(a, b) for a, b in zip(n_top, n_second, strict=True)])
    predict = np.where(pvalue > spec.alpha, ABSTAIN, top2.indices[:, 0].numpy())
    return PredictResult(
        index=np.asarray(indices, dtype=np.int64),
        predict=predict.astype(np.int64),
        n_top=n_top,
        n_second=n_second,
        pvalue=pvalue,
        counts=counts.numpy(),
        n=spec.n,
    )
