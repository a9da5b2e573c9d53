"""Reproducible noise for certification: which draws input ``index`` gets, whatever the noise.

The noise of input ``index`` in ``phase`` is a fixed sequence of blocks of ``NOISE_BLOCK`` draws; block ``j``
comes from a generator seeded by ``(seed, index, phase, j)``. A certificate therefore never depends on the
batch size, the order of inputs, the process or shard that certifies it, or the point a run resumed from.
(It does depend on the device type: CPU and CUDA generators produce different streams.)
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
import torch

from .noises import Gaussian, Noise

GAUSSIAN = Gaussian()

NOISE_BLOCK = 256
"""Draws per independently seeded block; part of the reproducibility protocol, do not change lightly."""


class Phase(IntEnum):
    """Independent noise streams per input (Cohen et al., ICML 2019, §3.2: CERTIFY draws its
    selection and estimation samples separately)."""

    SELECTION = 0
    ESTIMATION = 1
    PREDICTION = 2
    PILOT = 3
    """Input-specific sampling's pilot: it picks the class and the sample size, never enters the bound."""


def block_seed(seed: int, index: int, phase: int, block: int) -> int:
    """64-bit seed of one noise block, mixed by numpy's SeedSequence (no correlation between neighbours)."""
    if min(seed, index, phase, block) < 0:
        raise ValueError(f"seed, index, phase and block must be >= 0, got {(seed, index, phase, block)}")
    state = np.random.SeedSequence([seed, index, phase, block]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 32 | int(state[1])


def block_sizes(num_samples: int, block: int = NOISE_BLOCK) -> list[int]:
    """Sizes of the blocks that make up ``num_samples`` draws (all full but possibly the last)."""
    full, rest = divmod(num_samples, block)
    return [block] * full + ([rest] if rest else [])


def standard_noise_block(
    seed: int,
    index: int,
    phase: int,
    block: int,
    rows: int,
    shape: tuple[int, ...],
    *,
    noise: Noise = GAUSSIAN,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``rows`` draws of ``shape`` of the standard noise of ``noise`` (scale 1: N(0, 1) by default,
    Laplace(0, 1) or U[−1, 1] per coordinate; :meth:`~rs_lightning.smoothing.noises.Noise.sample`)
    for block ``block`` of ``(index, phase)``.

    ``generator`` (on ``device``) is reseeded and reused to avoid re-creating one per block.
    """
    gen = block_generator(seed, index, phase, block, device, generator)
    return noise.sample((rows, *shape), gen, device, dtype, out=out)


def noisy_block(
    x: torch.Tensor,
    seed: int,
    index: int,
    phase: int,
    block: int,
    rows: int,
    sigma: float,
    *,
    noise: Noise = GAUSSIAN,
    generator: torch.Generator | None = None,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Block ``block`` of ``(index, phase)`` as the base classifier's inputs: ``rows`` noisy copies of ``x``
    at ``sigma`` (:meth:`~rs_lightning.smoothing.noises.Noise.perturb`, into ``out`` if given), and which
    copies count (None: all)."""
    gen = block_generator(seed, index, phase, block, x.device, generator)
    return noise.perturb(x, rows, gen, sigma, out=out)


def block_generator(
    seed: int, index: int, phase: int, block: int, device, generator: torch.Generator | None = None
) -> torch.Generator:
    """The generator of one noise block: ``generator`` (on ``device``) reseeded, or a new one."""
    gen = generator if generator is not None else torch.Generator(device=device)
    gen.manual_seed(block_seed(seed, index, phase, block))
    return gen
