"""Shared machinery of ``bench.run`` (CPU, ``make bench``) and ``bench.gpu`` (``make bench-gpu``).

A *setting* is a (precision, channels_last) pair of :class:`~rs_lightning.smoothing.spec.CertificationSpec`.
At every setting two implementations draw the same number of noisy samples of one input at one batch size:

*raw*: what a user would write for that setting::

    batch = x + sigma * torch.randn(B, *shape, device=device)           # float32, NCHW
    batch = batch.contiguous(memory_format=torch.channels_last)          # if channels_last
    with torch.autocast(device.type, dtype):                             # if bf16 / fp16
        logits = model_cl_or_model(batch)                                # channels_last copy of the model
    logits.argmax(1)

under ``inference_mode`` (``model_cl`` = ``copy.deepcopy(model).to(memory_format=torch.channels_last)``).

*engine*: ``sample_counts(prepare(model, spec), x[None], [0], phase=ESTIMATION, ...)`` with
``spec = CertificationSpec(sigma=sigma, precision=..., channels_last=..., batch_size=B)``; ``prepare`` runs
once, outside the timed region. The engine adds per-block seeded noise, packing, the non-finite-logits check
and a ``bincount``; the base classifier adds the layout conversion and autocast exactly as the raw loop does.
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rs_lightning.smoothing.engine import prepare, sample_counts
from rs_lightning.smoothing.noise import Phase
from rs_lightning.smoothing.noises import noise_of
from rs_lightning.smoothing.precision import AUTOCAST_DTYPES, check_precision_supported
from rs_lightning.smoothing.spec import CertificationSpec

SIGMA = 0.25

SETTINGS: dict[str, dict] = {
    "fp32": {"precision": "32", "channels_last": False},
    "fp32_cl": {"precision": "32", "channels_last": True},
    "bf16": {"precision": "bf16", "channels_last": False},
    "bf16_cl": {"precision": "bf16", "channels_last": True},
    "fp16": {"precision": "16", "channels_last": False},
    "fp16_cl": {"precision": "16", "channels_last": True},
}
"""Setting name -> the CertificationSpec keys it sets (``_cl`` = ``channels_last=true``)."""

CPU_SETTINGS = ("fp32", "bf16", "bf16_cl")
CUDA_SETTINGS = ("fp32", "bf16", "bf16_cl", "fp16", "fp16_cl")


def spec_for(setting: str, batch_size: int, sigma: float = SIGMA) -> CertificationSpec:
    return CertificationSpec(sigma=sigma, batch_size=batch_size, **SETTINGS[setting])


def unsupported_reason(setting: str, device: torch.device) -> str | None:
    """Why the engine refuses ``setting`` on ``device`` (the same check as ``certify_batch``), else None."""
    try:
        check_precision_supported(SETTINGS[setting]["precision"], device)
    except Exception as err:  # noqa: BLE001 (ConfigError; report its text)
        return f"{type(err).__name__}: {err}"
    return None


def calibrate_batchnorm(
    model: nn.Module, shape: tuple[int, ...], device: torch.device, rows: int = 32
) -> nn.Module:
    """Random weights with trained-scale activations: BatchNorm running statistics set from one batch of
    noisy random inputs (cumulative average), then eval mode. Without it a randomly initialised ResNet-110
    in eval mode has logits of order 1e8, which overflow float16 (a NonFiniteLogitsError, not a timing)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model.eval()
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        x = torch.rand(rows, *shape, device=device)
        model(x + SIGMA * torch.randn_like(x))
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    return model.eval()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Workload:
    """One model and one clean input on a device; builds the raw and engine callables of each setting."""

    model: nn.Module
    x: torch.Tensor
    num_classes: int
    sigma: float = SIGMA

    def __post_init__(self) -> None:
        self.device = self.x.device
        self._channels_last_copy: nn.Module | None = None
        self._classifiers: dict = {}

    def release(self) -> None:
        """Drop the converted copies and prepared classifiers (GPU memory between cells)."""
        self._channels_last_copy = None
        self._classifiers.clear()

    def raw_model(self, setting: str) -> nn.Module:
        if not SETTINGS[setting]["channels_last"]:
            return self.model
        if self._channels_last_copy is None:  # one converted copy shared by the channels_last settings
            self._channels_last_copy = copy.deepcopy(self.model).to(memory_format=torch.channels_last).eval()
        return self._channels_last_copy

    def raw(self, setting: str, num_samples: int, batch_size: int) -> Callable[[], int]:
        model = self.raw_model(setting)
        channels_last = SETTINGS[setting]["channels_last"]
        dtype = AUTOCAST_DTYPES.get(SETTINGS[setting]["precision"])
        x, sigma, device = self.x, self.sigma, self.device

        @torch.inference_mode()
        def run() -> int:
            done = 0
            while done < num_samples:
                rows = min(batch_size, num_samples - done)
                batch = x + sigma * torch.randn(rows, *x.shape, device=device)
                if channels_last:
                    batch = batch.contiguous(memory_format=torch.channels_last)
                if dtype is None:
                    model(batch).argmax(1)
                else:
                    with torch.autocast(device_type=device.type, dtype=dtype):
                        model(batch).argmax(1)
                done += rows
            return done

        return run

    def engine(
        self, setting: str, num_samples: int, batch_size: int, noise: str = "gaussian"
    ) -> Callable[[], int]:
        spec = spec_for(setting, batch_size, self.sigma)
        if setting not in self._classifiers:  # once per setting, outside the timed region (warm-up shares it)
            self._classifiers[setting] = prepare(self.model, spec)
        classifier = self._classifiers[setting]
        x, num_classes = self.x, self.num_classes

        def run() -> int:
            counts = sample_counts(
                classifier,
                x[None],
                [0],
                phase=Phase.ESTIMATION,
                num_samples=num_samples,
                sigma=spec.sigma,
                num_classes=num_classes,
                batch_size=batch_size,
                seed=spec.seed,
                noise_block=spec.noise_block,
                noise=noise_of(noise),
            )
            total = int(counts.sum())  # also synchronizes a CUDA device
            if total != num_samples:
                raise RuntimeError(f"engine counted {total} draws, expected {num_samples}")
            return total

        return run


def timed(fn: Callable[[], int], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def run_interleaved(
    impls: dict[str, Callable[[], int]],
    repeats: int,
    device: torch.device,
    warmups: dict[str, Callable[[], int]],
) -> dict[str, list[float]]:
    """Warm every implementation up, then ``repeats`` rounds in which each runs once; the order rotates
    (and reverses every other round) so that load from other processes perturbs all of them alike."""
    for fn in warmups.values():
        fn()
    synchronize(device)
    names = list(impls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(repeats):
        shift = rep % len(names)
        order = names[shift:] + names[:shift]
        if rep % 2:
            order.reverse()
        for name in order:
            times[name].append(timed(impls[name], device))
    return times


def summarize(times: list[float], num_samples: int) -> dict:
    return {
        "median_samples_per_s": num_samples / statistics.median(times),
        "best_samples_per_s": num_samples / min(times),
        "times_s": [round(t, 4) for t in times],
    }


def paired_median(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of numerator time / denominator time (back-to-back runs of one round)."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


def cpu_model() -> str:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def cpu_flags() -> list[str]:
    """The CPU's reduced-precision matrix units (bf16 speed on a CPU depends on them)."""
    wanted = {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_tile"}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return sorted(wanted & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return []


def machine_info(device: torch.device) -> dict:
    info = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        "load_avg_at_start": [round(v, 2) for v in os.getloadavg()],  # 1, 5, 15 min; ~cpu_count = busy
    }
    if device.type == "cpu":
        info["cpu_flags"] = cpu_flags()
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(
            {
                "device_name": torch.cuda.get_device_name(index),
                "device_capability": list(torch.cuda.get_device_capability(index)),
                "device_memory_gib": round(props.total_memory / 2**30, 1),
                "device_count": torch.cuda.device_count(),
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
                "driver_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }
        )
    info["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    info["cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
    info["matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    return info
