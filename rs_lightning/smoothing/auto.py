"""``precision=auto`` / ``channels_last=auto``: time each candidate on the run's own model and device and
keep the fastest.

Reduced precision is not always faster, and by how much depends on the machine's load as well as on the
model: on a shared 2-core CPU the bf16 + channels_last gain over fp32 shrinks beside another job (ResNet-110:
3.07× idle, 2.31× beside one) and on LeNet the bf16 engine falls behind its raw forward pass there
(docs/performance.md, "Beside a competing job"). So the choice is made where the run happens: every candidate
certifies the same draws of one input through the engine
(:func:`~rs_lightning.smoothing.engine.sample_counts`), interleaved over rounds so that load from other
processes perturbs all alike, and the one with the highest median samples/s is the base classifier of the
whole run (the certified network is the one evaluated at that precision).
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import torch

from rs_lightning.validation import ConfigError

from .engine import prepare, sample_counts
from .noise import Phase
from .precision import check_precision_supported
from .spec import PRECISIONS, CertificationSpec

AUTO = "auto"


def supported_precisions(device: torch.device) -> list[str]:
    """The precisions this device can run (:func:`check_precision_supported`)."""
    found = []
    for precision in PRECISIONS:
        try:
            check_precision_supported(precision, device)
        except ConfigError:
            continue
        found.append(precision)
    return found


def label(precision: str, channels_last: bool) -> str:
    return ("fp32" if precision == "32" else f"fp{precision}" if precision == "16" else precision) + (
        "+cl" if channels_last else ""
    )


def fastest(
    model, x: torch.Tensor, spec: CertificationSpec, precisions, layouts, *, num_classes: int, rounds: int = 3
) -> tuple[str, bool, dict[str, float]]:
    """``(precision, channels_last, {candidate: median samples/s})``: the fastest candidate of
    ``precisions × layouts`` drawing ``2 · batch_size`` samples of input ``x`` (on its device) per round."""
    candidates = [(p, cl) for p in precisions for cl in layouts]
    prepared = {
        c: prepare(model, dataclasses.replace(spec, precision=c[0], channels_last=c[1])) for c in candidates
    }
    samples = 2 * spec.batch_size

    def run(candidate) -> float:
        start = time.perf_counter()
        sample_counts(
            prepared[candidate],
            x[None],
            [0],
            phase=Phase.SELECTION,
            num_samples=samples,
            sigma=spec.require_sigma(),
            num_classes=num_classes,
            batch_size=spec.batch_size,
        )
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        return time.perf_counter() - start

    for candidate in candidates:  # warm-up (allocator, kernels, compilation)
        run(candidate)
    seconds: dict[tuple, list[float]] = {c: [] for c in candidates}
    for r in range(rounds):
        for candidate in candidates[:: 1 if r % 2 == 0 else -1]:
            seconds[candidate].append(run(candidate))
    rates = {c: samples / statistics.median(t) for c, t in seconds.items()}
    best = max(candidates, key=lambda c: rates[c])
    return best[0], best[1], {label(*c): round(rate, 1) for c, rate in rates.items()}
