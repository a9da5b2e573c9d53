"""Certify or predict many dataset items: groups of inputs are packed into the engine's forward batches."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Dataset

from .engine import CertifyResult, PredictResult, certify_batch, predict_batch, prepare
from .spec import CertificationSpec


def inputs_per_call(spec: CertificationSpec) -> int:
    """How many inputs to process together so that forward batches stay full (>= 1): the sampler's
    :meth:`~.samplers.base.Sampler.inputs_per_call` (PREDICT: n draws per input)."""
    if spec.mode == "predict":
        return max(1, math.ceil(spec.batch_size / spec.n))
    return spec.sampler.inputs_per_call(spec)


def run_dataset(
    model,
    dataset: Dataset,
    indices: Sequence[int],
    spec: CertificationSpec,
    *,
    num_classes: int,
    device: torch.device | str = "cpu",
) -> Iterator[tuple[CertifyResult | PredictResult, list[int], float]]:
    """Yield ``(result, labels, seconds_per_input)`` for consecutive groups of ``indices``: CERTIFY or
    PREDICT as ``spec.mode`` says. The network is prepared (precision, layout, compile) once.

    Noise depends only on ``(seed, index, phase)``, so any split of ``indices`` (ranks, shards, resumes)
    gives the same per-input results.
    """
    run = certify_batch if spec.mode == "certify" else predict_batch
    classifier = prepare(model, spec)
    group = inputs_per_call(spec)
    for start in range(0, len(indices), group):
        chunk = [int(i) for i in indices[start : start + group]]
        items = [dataset[i] for i in chunk]
        xs = torch.stack([x for x, _ in items]).to(device)
        began = time.perf_counter()
        result = run(classifier, xs, chunk, spec, num_classes=num_classes)
        if xs.device.type == "cuda":
            torch.cuda.synchronize(xs.device)
        yield result, [int(y) for _, y in items], (time.perf_counter() - began) / len(chunk)


def certify_dataset(model, dataset, indices, spec: CertificationSpec, *, num_classes: int, device="cpu"):
    """:func:`run_dataset` for a CERTIFY spec."""
    if spec.mode != "certify":
        raise ValueError(f"certify_dataset needs mode='certify', got {spec.mode!r}")
    return run_dataset(model, dataset, indices, spec, num_classes=num_classes, device=device)
