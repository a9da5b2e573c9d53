"""Certify many dataset items: groups of inputs are packed into the engine's forward batches."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence

import torch
from torch import nn
from torch.utils.data import Dataset

from .engine import CertifyResult, certify_batch


def inputs_per_call(batch_size: int, n0: int, n: int) -> int:
    """How many inputs to certify together so that forward batches stay full (>= 1)."""
    return max(1, math.ceil(batch_size / (n0 + n)))


def certify_dataset(
    model: nn.Module,
    dataset: Dataset,
    indices: Sequence[int],
    *,
    sigma: float,
    num_classes: int,
    n0: int,
    n: int,
    alpha: float,
    batch_size: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> Iterator[tuple[CertifyResult, list[int], float]]:
    """Yield ``(result, labels, seconds_per_input)`` for consecutive groups of ``indices``.

    Noise depends only on ``(seed, index)``, so any split of ``indices`` (ranks, shards, resumes)
    gives the same per-input results.
    """
    group = inputs_per_call(batch_size, n0, n)
    model.eval()
    for start in range(0, len(indices), group):
        chunk = [int(i) for i in indices[start : start + group]]
        items = [dataset[i] for i in chunk]
        xs = torch.stack([x for x, _ in items]).to(device)
        began = time.perf_counter()
        result = certify_batch(
            model,
            xs,
            chunk,
            sigma=sigma,
            num_classes=num_classes,
            n0=n0,
            n=n,
            alpha=alpha,
            batch_size=batch_size,
            seed=seed,
        )
        if xs.device.type == "cuda":
            torch.cuda.synchronize(xs.device)
        yield result, [int(y) for _, y in items], (time.perf_counter() - began) / len(chunk)
