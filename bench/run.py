"""Certification throughput: the batched engine vs. a bare noisy-forward loop at the same batch size.

``python -m bench.run [--quick] [--out PATH]`` writes ``bench/results/certify_throughput.json``.

*raw*: ``model(x.expand(B, ...) + sigma * randn(B, ...)).argmax(1)`` in a loop, under ``inference_mode``.
*engine*: :func:`rs_lightning.smoothing.engine.sample_counts` (per-block seeded noise, packing, bincount).
Both draw the same number of samples of one input at the same batch size; repetitions alternate between
the two so that load from other processes perturbs both alike. Reported: median samples/s, and the ratio
engine/raw (target >= 0.9: the reproducible-noise machinery should cost at most 10 % of throughput).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import json
import os
import platform
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from rs_lightning.models import CIFARResNet, LeNet
from rs_lightning.smoothing.engine import sample_counts
from rs_lightning.smoothing.noise import NOISE_BLOCK, Phase, block_seed

TARGET = 0.9
SIGMA = 0.25
NUM_CLASSES = 10
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "certify_throughput.json"

CASES: dict[str, dict] = {
    "lenet_mnist": {
        "build": lambda: LeNet(input_shape=(1, 28, 28), num_classes=NUM_CLASSES),
        "shape": (1, 28, 28),
        "samples": 20_000,
        "quick_samples": 4_000,
        "repeats": 5,
    },
    "resnet20_cifar": {
        "build": lambda: CIFARResNet(input_shape=(3, 32, 32), num_classes=NUM_CLASSES, depth=20),
        "shape": (3, 32, 32),
        "samples": 5_000,
        "quick_samples": 1_000,
        "repeats": 5,
    },
}


def machine_info() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": "cpu",
    }


@torch.inference_mode()
def raw_loop(model: nn.Module, x: torch.Tensor, num_samples: int, batch_size: int) -> int:
    """The baseline: fresh noise from the global generator, forward, argmax; no seeding, no counting."""
    done = 0
    while done < num_samples:
        rows = min(batch_size, num_samples - done)
        model(x.expand(rows, *x.shape) + SIGMA * torch.randn(rows, *x.shape)).argmax(1)
        done += rows
    return done


def engine_loop(model: nn.Module, x: torch.Tensor, num_samples: int, batch_size: int) -> int:
    counts = sample_counts(
        model,
        x[None],
        [0],
        phase=Phase.ESTIMATION,
        num_samples=num_samples,
        sigma=SIGMA,
        num_classes=NUM_CLASSES,
        batch_size=batch_size,
        seed=0,
    )
    total = int(counts.sum())
    if total != num_samples:
        raise RuntimeError(f"engine counted {total} draws, expected {num_samples}")
    return total


def timed(fn: Callable[[], int]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(case: str, batch_size: int, num_samples: int, repeats: int) -> dict:
    spec = CASES[case]
    torch.manual_seed(0)
    model = spec["build"]().eval()
    x = torch.rand(spec["shape"])
    impls = {
        "raw": lambda: raw_loop(model, x, num_samples, batch_size),
        "engine": lambda: engine_loop(model, x, num_samples, batch_size),
    }
    warm = max(batch_size, num_samples // 4)
    raw_loop(model, x, warm, batch_size)
    engine_loop(model, x, warm, batch_size)
    times: dict[str, list[float]] = {name: [] for name in impls}
    for rep in range(repeats):
        order = list(impls) if rep % 2 == 0 else list(reversed(impls))
        for name in order:
            times[name].append(timed(impls[name]))
    row: dict = {"case": case, "input_shape": list(spec["shape"]), "batch_size": batch_size}
    row["num_samples"] = num_samples
    for name, values in times.items():
        row[name] = {
            "median_samples_per_s": num_samples / statistics.median(values),
            "best_samples_per_s": num_samples / min(values),
            "times_s": [round(t, 4) for t in values],
        }
    row["ratio"] = row["engine"]["median_samples_per_s"] / row["raw"]["median_samples_per_s"]
    # Robust to load from other processes: each repetition times raw and engine back to back.
    row["ratio_paired_median"] = statistics.median(
        r / e for r, e in zip(times["raw"], times["engine"], strict=True)
    )
    row["ratio_best"] = row["engine"]["best_samples_per_s"] / row["raw"]["best_samples_per_s"]
    row["target"] = TARGET
    row["meets_target"] = bool(row["ratio"] >= TARGET)
    return row


def profile_engine(case: str, batch_size: int, num_samples: int, top: int = 8) -> dict:
    """Where the engine spends its time: cProfile of one run (top functions by own time) + seeding cost."""
    spec = CASES[case]
    model = spec["build"]().eval()
    x = torch.rand(spec["shape"])
    engine_loop(model, x, batch_size, batch_size)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(engine_loop, model, x, num_samples, batch_size)
    total = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, func), (_, calls, own, cumulative, _) in stats.stats.items():
        rows.append(
            {
                "function": f"{Path(file).name}:{line}({func})",
                "calls": calls,
                "own_s": round(own, 4),
                "cumulative_s": round(cumulative, 4),
            }
        )
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    blocks = -(-num_samples // NOISE_BLOCK)
    start = time.perf_counter()
    for block in range(blocks):
        block_seed(0, 0, int(Phase.ESTIMATION), block)
    seeding = time.perf_counter() - start
    return {
        "case": case,
        "batch_size": batch_size,
        "num_samples": num_samples,
        "total_s_under_profiler": round(total, 4),
        "block_seed_s": round(seeding, 4),
        "block_seed_share": round(seeding / total, 4),
        "top_own_time": rows[:top],
    }


def print_table(results: list[dict]) -> None:
    header = f"{'case':<16}{'B':>6}{'samples':>9}{'raw/s':>11}{'engine/s':>11}"
    header += f"{'ratio':>7}{'paired':>8}{'best':>7}  ok"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['case']:<16}{r['batch_size']:>6}{r['num_samples']:>9}"
            f"{r['raw']['median_samples_per_s']:>11.0f}{r['engine']['median_samples_per_s']:>11.0f}"
            f"{r['ratio']:>7.3f}{r['ratio_paired_median']:>8.3f}{r['ratio_best']:>7.3f}"
            f"  {'yes' if r['meets_target'] else 'NO'}"
        )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about 20 s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON file (default {DEFAULT_OUT})")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=None, help="default 1000 400")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs (>=3; default per case)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--profile", action="store_true", help="profile the engine (always if below target)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    batch_sizes = args.batch_sizes or ([400] if args.quick else [1000, 400])
    size_key = "quick_samples" if args.quick else "samples"

    results = []
    for case in args.cases:
        for batch_size in batch_sizes:
            repeats = max(3, args.repeats or CASES[case]["repeats"])
            row = measure(case, batch_size, CASES[case][size_key], repeats)
            results.append(row)
            print(
                f"{case} B={batch_size}: raw {row['raw']['median_samples_per_s']:.0f}/s, "
                f"engine {row['engine']['median_samples_per_s']:.0f}/s, ratio {row['ratio']:.3f}",
                flush=True,
            )
    report = {
        "benchmark": "certify_throughput",
        "description": "noisy forward passes per second: rs_lightning engine sample_counts vs raw loop",
        "machine": machine_info(),
        "settings": {
            "sigma": SIGMA,
            "num_classes": NUM_CLASSES,
            "noise_block": NOISE_BLOCK,
            "repeats": {case: max(3, args.repeats or CASES[case]["repeats"]) for case in args.cases},
            "quick": args.quick,
            "statistic": "ratio = median engine samples/s / median raw samples/s (decides meets_target); "
            "ratio_paired_median = median over repetitions of raw time / engine time; ratio_best = best/best",
        },
        "target": TARGET,
        "min_ratio": min(r["ratio"] for r in results),
        "meets_target": all(r["meets_target"] for r in results),
        "results": results,
    }
    if args.profile or not report["meets_target"]:
        report["profile"] = [
            profile_engine(r["case"], r["batch_size"], r["num_samples"])
            for r in results
            if args.profile or not r["meets_target"]
        ]
    print()
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(args.out)
    print(f"\nwrote {args.out}")
    return report


if __name__ == "__main__":
    main()
