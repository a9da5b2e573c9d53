"""Certification throughput at each precision setting: the batched engine vs. a bare noisy-forward loop.

``python -m bench.run [--quick] [--out PATH]`` writes ``bench/results/certify_throughput.json``.

For every case (model, input shape), batch size and setting in {fp32, bf16, bf16_cl} (on CUDA also fp16,
fp16_cl; ``_cl`` = channels_last), two implementations draw the same number of samples of one input at the
same batch size (see :mod:`bench.throughput` for exactly what each runs):

*raw*: ``x + sigma * randn`` in float32 (then channels_last on a channels_last copy of the model), forward
under ``torch.autocast`` for bf16/fp16, argmax -- what a user would write for that setting.
*engine*: :func:`rs_lightning.smoothing.engine.sample_counts` on ``prepare(model, CertificationSpec(...))``.

All (setting, implementation) pairs of a case run once per round, in rotating order, so load from other
processes perturbs all of them alike. Reported per setting: median samples/s and ``ratio`` = engine/raw
(target >= 0.95); per case: the speed-up of the engine at each reduced-precision setting over the fp32 engine
(target: bf16 >= 2x fp32 for the CIFAR ResNets).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.throughput import (
    CPU_SETTINGS,
    CUDA_SETTINGS,
    SETTINGS,
    SIGMA,
    Workload,
    calibrate_batchnorm,
    machine_info,
    paired_median,
    run_interleaved,
    summarize,
    unsupported_reason,
)
from rs_lightning.models import CIFARResNet, LeNet
from rs_lightning.smoothing.noise import NOISE_BLOCK, Phase, block_seed

TARGET = 0.95
SPEEDUP_TARGET = 2.0
BASELINE = "fp32"
NUM_CLASSES = 10
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "certify_throughput.json"
BATCH_SIZES = [400]
QUICK_BATCH_SIZES = [200]

CASES: dict[str, dict] = {
    "lenet_mnist": {
        "build": lambda: LeNet(input_shape=(1, 28, 28), num_classes=NUM_CLASSES),
        "shape": (1, 28, 28),
        "samples": 20_000,
        "quick_samples": 2_000,
        "repeats": 5,
        "speedup_target": None,
    },
    "resnet20_cifar": {
        "build": lambda: CIFARResNet(input_shape=(3, 32, 32), num_classes=NUM_CLASSES, depth=20),
        "shape": (3, 32, 32),
        "samples": 4_000,
        "quick_samples": 400,
        "repeats": 5,
        "speedup_target": SPEEDUP_TARGET,
    },
    "resnet110_cifar": {
        "build": lambda: CIFARResNet(input_shape=(3, 32, 32), num_classes=NUM_CLASSES, depth=110),
        "shape": (3, 32, 32),
        "samples": 1_200,
        "quick_samples": 200,
        "repeats": 5,
        "speedup_target": SPEEDUP_TARGET,
    },
}


def workload(case: str, device: torch.device) -> Workload:
    spec = CASES[case]
    torch.manual_seed(0)
    model = calibrate_batchnorm(spec["build"]().to(device), spec["shape"], device)
    return Workload(model, torch.rand(spec["shape"], device=device), NUM_CLASSES)


def measure(
    case: str, batch_size: int, num_samples: int, repeats: int, settings: list[str], device: torch.device
) -> tuple[list[dict], dict]:
    """All settings of one case at one batch size, interleaved. Returns (one row per setting, speed-ups)."""
    work = workload(case, device)
    warm = max(batch_size, num_samples // 4)
    impls, warmups = {}, {}
    for setting in settings:
        for impl in ("raw", "engine"):
            build = getattr(work, impl)
            impls[f"{setting}/{impl}"] = build(setting, num_samples, batch_size)
            warmups[f"{setting}/{impl}"] = build(setting, warm, batch_size)
    times = run_interleaved(impls, repeats, device, warmups)
    rows = []
    for setting in settings:
        raw, engine = times[f"{setting}/raw"], times[f"{setting}/engine"]
        row: dict = {
            "case": case,
            "input_shape": list(CASES[case]["shape"]),
            "batch_size": batch_size,
            "num_samples": num_samples,
            "setting": setting,
            **SETTINGS[setting],
            "raw": summarize(raw, num_samples),
            "engine": summarize(engine, num_samples),
        }
        row["ratio"] = row["engine"]["median_samples_per_s"] / row["raw"]["median_samples_per_s"]
        # Robust to load from other processes: each round times raw and engine back to back.
        row["ratio_paired_median"] = paired_median(raw, engine)
        row["ratio_best"] = row["engine"]["best_samples_per_s"] / row["raw"]["best_samples_per_s"]
        row["target"] = TARGET
        row["meets_target"] = bool(row["ratio"] >= TARGET)
        rows.append(row)
    return rows, speedups(case, batch_size, rows, times)


def speedups(case: str, batch_size: int, rows: list[dict], times: dict[str, list[float]]) -> dict:
    """Samples/s of every setting over the fp32 setting of the same implementation, case and batch."""
    by_setting = {r["setting"]: r for r in rows}
    out: dict = {"case": case, "batch_size": batch_size, "baseline": BASELINE}
    if BASELINE not in by_setting:
        return out | {"error": f"no {BASELINE} measurement"}
    for impl in ("engine", "raw"):
        base = by_setting[BASELINE][impl]["median_samples_per_s"]
        out[impl] = {
            setting: {
                "speedup": r[impl]["median_samples_per_s"] / base,
                "speedup_paired_median": paired_median(
                    times[f"{BASELINE}/{impl}"], times[f"{setting}/{impl}"]
                ),
            }
            for setting, r in by_setting.items()
            if setting != BASELINE
        }
    bf16 = {s: v["speedup"] for s, v in out["engine"].items() if SETTINGS[s]["precision"] == "bf16"}
    target = CASES[case]["speedup_target"]
    out["target"] = target
    if bf16:
        best = max(bf16, key=bf16.get)
        out["best_bf16"] = {"setting": best, "speedup": bf16[best]}
        out["meets_target"] = None if target is None else bool(bf16[best] >= target)
    else:
        out["best_bf16"], out["meets_target"] = None, None
    return out


def profile_engine(
    case: str, batch_size: int, num_samples: int, setting: str, device: torch.device, top: int = 8
) -> dict:
    """Where the engine spends its time: cProfile of one run (top functions by own time) + seeding cost."""
    work = workload(case, device)
    work.engine(setting, batch_size, batch_size)()
    run = work.engine(setting, num_samples, batch_size)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(run)
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
        "setting": setting,
        "num_samples": num_samples,
        "total_s_under_profiler": round(total, 4),
        "block_seed_s": round(seeding, 4),
        "block_seed_share": round(seeding / total, 4),
        "top_own_time": rows[:top],
    }


def print_tables(results: list[dict], gains: list[dict]) -> None:
    header = f"{'case':<16}{'B':>5}{'setting':>9}{'samples':>8}{'raw/s':>10}{'engine/s':>10}"
    header += f"{'ratio':>7}{'paired':>8}{'best':>7}  ok"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['case']:<16}{r['batch_size']:>5}{r['setting']:>9}{r['num_samples']:>8}"
            f"{r['raw']['median_samples_per_s']:>10.0f}{r['engine']['median_samples_per_s']:>10.0f}"
            f"{r['ratio']:>7.3f}{r['ratio_paired_median']:>8.3f}{r['ratio_best']:>7.3f}"
            f"  {'yes' if r['meets_target'] else 'NO'}"
        )
    print()
    print(f"engine speed-up over the {BASELINE} engine (median; paired median in brackets)")
    for g in gains:
        if "engine" not in g:
            continue
        cells = "  ".join(
            f"{s} {v['speedup']:.2f}x ({v['speedup_paired_median']:.2f}x)" for s, v in g["engine"].items()
        )
        verdict = {None: "", True: f"  >= {g['target']}x: yes", False: f"  >= {g['target']}x: NO"}
        print(f"{g['case']:<16}B={g['batch_size']:<5}{cells}{verdict[g.get('meets_target')]}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (about 1 minute on 2 cores)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON file (default {DEFAULT_OUT})")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument(
        "--settings",
        nargs="+",
        default=None,
        choices=list(SETTINGS),
        help=f"default {' '.join(CPU_SETTINGS)} (CUDA: {' '.join(CUDA_SETTINGS)})",
    )
    parser.add_argument(
        "--batch-sizes",
        nargs="+",
        type=int,
        default=None,
        help=f"default {' '.join(map(str, BATCH_SIZES))} (--quick: {QUICK_BATCH_SIZES[0]})",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (>=3; default per case)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument(
        "--device", default="cpu", help="cpu (default) or cuda[:i]; bench.gpu is the GPU check"
    )
    parser.add_argument("--profile", action="store_true", help="profile the engine (always if below target)")
    parser.add_argument(
        "--competing-job",
        action="store_true",
        help="measure beside a competing process (one thread of fp32 matrix products): a shared machine",
    )
    args = parser.parse_args(argv)
    with competing_job() if args.competing_job else contextlib.nullcontext():
        return _main(args, parser)


@contextlib.contextmanager
def competing_job():
    """A background process on one thread doing fp32 matrix products for as long as the block runs: another
    job on the machine (a training run, a second certification), whose presence changes which precision is
    fastest (bf16 kernels lose several times their speed beside one; fp32 barely moves)."""
    loop = "import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\n"
    loop += "while True:\n    a = (a @ a).tanh()"
    job = subprocess.Popen([sys.executable, "-c", loop])
    try:
        time.sleep(1.0)
        yield
    finally:
        job.kill()
        job.wait()


def _main(args, parser) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible to torch")
    settings = args.settings or list(CUDA_SETTINGS if device.type == "cuda" else CPU_SETTINGS)
    if BASELINE not in settings:
        settings.insert(0, BASELINE)
    skipped = [{"setting": s, "reason": unsupported_reason(s, device)} for s in settings]
    skipped = [s for s in skipped if s["reason"]]
    settings = [s for s in settings if s not in {k["setting"] for k in skipped}]
    batch_sizes = args.batch_sizes or (QUICK_BATCH_SIZES if args.quick else BATCH_SIZES)
    size_key = "quick_samples" if args.quick else "samples"
    default_repeats = lambda case: 3 if args.quick else CASES[case]["repeats"]  # noqa: E731
    repeats = {case: max(3, args.repeats or default_repeats(case)) for case in args.cases}

    started = time.perf_counter()
    machine = machine_info(device)  # before measuring: its load average is other processes' load
    machine["competing_job"] = bool(args.competing_job)
    results, gains = [], []
    for case in args.cases:
        for batch_size in batch_sizes:
            case_start = time.perf_counter()
            rows, gain = measure(case, batch_size, CASES[case][size_key], repeats[case], settings, device)
            results += rows
            gains.append(gain)
            for row in rows:
                raw, engine = row["raw"]["median_samples_per_s"], row["engine"]["median_samples_per_s"]
                print(
                    f"{case} B={batch_size} {row['setting']}: raw {raw:.0f}/s, engine {engine:.0f}/s, "
                    f"ratio {row['ratio']:.3f}",
                    flush=True,
                )
            print(f"  ({time.perf_counter() - case_start:.0f} s)", flush=True)
    targeted = [g["meets_target"] for g in gains if g.get("meets_target") is not None]
    report = {
        "benchmark": "certify_throughput",
        "schema": 2,
        "description": "noisy forward passes per second at each precision setting: rs_lightning engine "
        "sample_counts(prepare(model, spec)) vs the raw loop a user would write for that setting",
        "machine": machine,
        "settings": {
            "sigma": SIGMA,
            "num_classes": NUM_CLASSES,
            "noise_block": NOISE_BLOCK,
            "precision_settings": {s: SETTINGS[s] for s in settings},
            "skipped_settings": skipped,
            "batch_sizes": batch_sizes,
            "num_samples": {case: CASES[case][size_key] for case in args.cases},
            "repeats": repeats,
            "quick": args.quick,
            "models": "random weights, BatchNorm statistics calibrated on one batch of noisy random inputs",
            "statistic": "ratio = median engine samples/s / median raw samples/s (decides meets_target); "
            "ratio_paired_median = median over rounds of raw time / engine time; ratio_best = best/best; "
            "speedups: median samples/s of a setting / median samples/s of fp32, same implementation",
        },
        "target": TARGET,
        "min_ratio": min(r["ratio"] for r in results),
        "meets_target": all(r["meets_target"] for r in results),
        "speedup_target": SPEEDUP_TARGET,
        "meets_speedup_target": all(targeted) if targeted else None,
        "wall_s": round(time.perf_counter() - started, 1),
        "results": results,
        "speedups": gains,
    }
    if args.profile or not report["meets_target"]:
        report["profile"] = [
            profile_engine(r["case"], r["batch_size"], r["num_samples"], r["setting"], device)
            for r in results
            if args.profile or not r["meets_target"]
        ]
    print()
    print_tables(results, gains)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(args.out)
    print(f"\nwrote {args.out} ({report['wall_s']:.0f} s)")
    return report


if __name__ == "__main__":
    main()
