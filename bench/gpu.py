"""GPU device check: certification throughput at fp32, bf16, fp16 and channels_last, raw loop vs engine.

``python -m bench.gpu [--out PATH] [--time-limit 420] [--cudnn-benchmark]`` (``make bench-gpu``) writes
``bench/results/gpu.json`` in under 8 minutes on one GPU. It stops at once, with a message, when torch sees
no CUDA device. ``python -m bench.gpu --device cpu --smoke`` runs the same code path with tiny sizes (a few
seconds; ``tests/bench`` does so, so the script cannot rot without a GPU).

Cases: LeNet on 1x28x28, CIFAR ResNet-110 on 3x32x32 and torchvision ResNet-50 on 3x224x224 (random weights,
BatchNorm statistics calibrated on noise so that activations have a trained network's scale). Each
(case, setting) *cell* times the raw loop and the engine (see :mod:`bench.throughput`) in alternating rounds
after a warm-up, with ``torch.cuda.synchronize`` around every timed region. A cell that fails (out of
memory, a dtype the GPU lacks, non-finite logits) records its error and the run goes on; when the time limit
is near, the remaining cells are skipped with a note. The JSON is rewritten after every cell, so a run killed
from outside still leaves what it measured.

Per case it also reports the implied wall time of certifying a test set with Cohen et al.'s protocol
(n = 100,000, n0 = 100 per input; 10,000 CIFAR-10 / MNIST inputs, 500 ImageNet inputs) from the engine's
samples/s at fp32 and at the fastest setting.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

import torch

from bench.throughput import (
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
from rs_lightning.models import CIFARResNet, LeNet, ResNet50
from rs_lightning.smoothing.noise import NOISE_BLOCK

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "gpu.json"
DEFAULT_TIME_LIMIT_S = 420.0
GPU_SETTINGS = ("fp32", "fp32_cl", "bf16", "bf16_cl", "fp16", "fp16_cl")
CERTIFY_N, CERTIFY_N0 = 100_000, 100

CASES: dict[str, dict] = {
    "lenet_mnist": {
        "build": lambda shape: LeNet(input_shape=shape, num_classes=10),
        "shape": (1, 28, 28),
        "num_classes": 10,
        "batch_size": 1000,
        "samples": 500_000,
        "certify_inputs": 10_000,
        "smoke": {"shape": (1, 28, 28), "batch_size": 4, "samples": 8},
    },
    "resnet110_cifar": {
        "build": lambda shape: CIFARResNet(input_shape=shape, num_classes=10, depth=110),
        "shape": (3, 32, 32),
        "num_classes": 10,
        "batch_size": 1000,
        "samples": 40_000,
        "certify_inputs": 10_000,
        "smoke": {"shape": (3, 32, 32), "batch_size": 4, "samples": 8},
    },
    "resnet50_imagenet": {
        "build": lambda shape: ResNet50(input_shape=shape, num_classes=1000),
        "shape": (3, 224, 224),
        "num_classes": 1000,
        "batch_size": 400,
        "samples": 4_000,
        "certify_inputs": 500,
        "smoke": {"shape": (3, 32, 32), "batch_size": 2, "samples": 4},
    },
}


def error_text(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:500]


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_cell(work: Workload, setting: str, num_samples: int, batch_size: int, repeats: int) -> dict:
    """Raw and engine at one setting, ``repeats`` alternating rounds after one warm-up run of each."""
    device = work.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    warm = min(num_samples, 2 * batch_size)
    impls = {impl: getattr(work, impl)(setting, num_samples, batch_size) for impl in ("raw", "engine")}
    warmups = {impl: getattr(work, impl)(setting, warm, batch_size) for impl in ("raw", "engine")}
    times = run_interleaved(impls, repeats, device, warmups)
    cell = {"status": "ok", **SETTINGS[setting]}
    cell["raw"] = summarize(times["raw"], num_samples)
    cell["engine"] = summarize(times["engine"], num_samples)
    cell["ratio"] = cell["engine"]["median_samples_per_s"] / cell["raw"]["median_samples_per_s"]
    cell["ratio_paired_median"] = paired_median(times["raw"], times["engine"])
    if device.type == "cuda":
        cell["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return cell


def implied(case: dict, cells: dict) -> dict:
    """Time to certify ``certify_inputs`` inputs at n + n0 draws each, at fp32 and at the fastest setting."""
    inputs = case["certify_inputs"]
    draws = inputs * (CERTIFY_N + CERTIFY_N0)
    out: dict = {"inputs": inputs, "n": CERTIFY_N, "n0": CERTIFY_N0, "total_draws": draws}
    ok = {s: c["engine"]["median_samples_per_s"] for s, c in cells.items() if c.get("status") == "ok"}
    for label, setting in (
        ("fp32", "fp32" if "fp32" in ok else None),
        ("best", max(ok, key=ok.get, default=None)),
    ):
        if setting is None:
            out[label] = None
            continue
        seconds = draws / ok[setting]
        out[label] = {
            "setting": setting,
            "engine_samples_per_s": ok[setting],
            "seconds": round(seconds, 1),
            "hours": round(seconds / 3600, 2),
        }
    if out["fp32"] and out["best"]:
        out["best_speedup_over_fp32"] = (
            out["best"]["engine_samples_per_s"] / out["fp32"]["engine_samples_per_s"]
        )
    return out


def write(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:i, or cpu (with --smoke)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round: checks the code path only")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON file (default {DEFAULT_OUT})")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--settings", nargs="+", default=list(GPU_SETTINGS), choices=list(SETTINGS))
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed rounds per cell (default 3; smoke 1)"
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        help="seconds; cells that would end past it are skipped (default 420)",
    )
    parser.add_argument(
        "--cudnn-benchmark",
        action="store_true",
        help="torch.backends.cudnn.benchmark = True (certify.py leaves it False)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    started = time.perf_counter()
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(
            f"bench.gpu: no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"built for CUDA {torch.version.cuda}). Run it on a machine with a GPU, or check the code path "
            "here with: python -m bench.gpu --device cpu --smoke"
        )
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        sys.exit(f"bench.gpu: {device} does not exist (torch sees {torch.cuda.device_count()} CUDA devices)")
    if device.type == "cpu" and not args.smoke:
        sys.exit("bench.gpu: --device cpu only with --smoke (full sizes take hours on a CPU); use bench.run")
    if device.type == "cpu":  # a smoke run: one thread avoids OpenMP stalls on a loaded machine
        torch.set_num_threads(1)
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    repeats = args.repeats or (1 if args.smoke else 3)
    report: dict = {
        "benchmark": "gpu_certify_throughput",
        "schema": 1,
        "smoke": args.smoke,
        "complete": False,
        "machine": machine_info(device),
        "settings": {
            "sigma": SIGMA,
            "noise_block": NOISE_BLOCK,
            "repeats": repeats,
            "time_limit_s": args.time_limit,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "precision_settings": {s: SETTINGS[s] for s in args.settings},
            "models": "random weights, BatchNorm statistics calibrated on one batch of noisy random inputs",
            "statistic": "median samples/s over rounds; ratio = engine / raw; ratio_paired_median = median "
            "over rounds of raw time / engine time; implied = inputs * (n + n0) / engine samples/s",
        },
        "notes": [],
        "cases": {},
    }
    for name in args.cases:
        report["cases"][name] = run_case(name, args, device, repeats, started, report)
        free_memory(device)
    cells = [c for e in report["cases"].values() for c in e["cells"].values()]
    skipped = sum(c["status"] == "skipped" for c in cells)
    if skipped:
        report["notes"].append(
            f"{skipped} cells skipped: the time limit ({args.time_limit:.0f} s) was near; "
            "rerun them with --cases/--settings"
        )
    report["complete"] = not skipped
    report["errors"] = sum(c["status"] == "error" for c in cells)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    write(report, args.out)
    print_summary(report)
    print(f"\nwrote {args.out} ({report['wall_s']:.0f} s)")
    return report


def build(name: str, shape: tuple[int, ...], device: torch.device) -> Workload:
    case = CASES[name]
    torch.manual_seed(0)
    model = calibrate_batchnorm(case["build"](shape).to(device), shape, device)
    return Workload(model, torch.rand(shape, device=device), case["num_classes"])


def run_case(
    name: str, args: argparse.Namespace, device: torch.device, repeats: int, started: float, report: dict
) -> dict:
    """Every setting of one case; each cell guarded; the report is rewritten after each cell."""
    case = CASES[name]
    sizes = case["smoke"] if args.smoke else case
    shape, batch_size, num_samples = tuple(sizes["shape"]), sizes["batch_size"], sizes["samples"]
    entry: dict = {
        "input_shape": list(shape),
        "num_classes": case["num_classes"],
        "batch_size": batch_size,
        "num_samples": num_samples,
        "cells": {},
    }
    report["cases"][name] = entry
    work, durations = None, []  # durations of this case's cells predict the next one's
    if time.perf_counter() - started < args.time_limit:
        build_start = time.perf_counter()
        try:
            work = build(name, shape, device)
            entry["build_s"] = round(time.perf_counter() - build_start, 2)
        except Exception as err:  # noqa: BLE001 (one case's failure must not end the run)
            entry["error"] = error_text(err)
            traceback.print_exc()
    for setting in args.settings:
        elapsed = time.perf_counter() - started
        predicted = max(durations, default=0.0)
        if elapsed + predicted > args.time_limit:
            cell = {
                "status": "skipped",
                "note": f"time limit: {elapsed:.0f} s elapsed + about {predicted:.0f} s for this cell "
                f"> --time-limit {args.time_limit:.0f} s",
            }
        elif work is None:
            cell = {"status": "error", "error": f"model not built: {entry.get('error')}"}
        elif reason := unsupported_reason(setting, device):
            cell = {"status": "error", "error": f"unsupported on {device}: {reason}"}
        else:
            cell_start = time.perf_counter()
            try:
                cell = measure_cell(work, setting, num_samples, batch_size, repeats)
            except Exception as err:  # noqa: BLE001 (OOM, missing kernels, non-finite logits)
                cell = {"status": "error", "error": error_text(err)}
                traceback.print_exc()
            cell["wall_s"] = round(time.perf_counter() - cell_start, 2)
            durations.append(cell["wall_s"])
            work.release()
            free_memory(device)
        entry["cells"][setting] = cell
        print(f"{name} {setting}: {summary_line(cell)}", flush=True)
        report["wall_s"] = round(time.perf_counter() - started, 1)
        write(report, args.out)
    ok = {s: c for s, c in entry["cells"].items() if c["status"] == "ok"}
    if ok:
        entry["best_setting"] = max(ok, key=lambda s: ok[s]["engine"]["median_samples_per_s"])
        if "fp32" in ok:
            base = ok["fp32"]["engine"]["median_samples_per_s"]
            entry["engine_speedup_over_fp32"] = {
                s: c["engine"]["median_samples_per_s"] / base for s, c in ok.items()
            }
    entry["implied_certification"] = implied(case, entry["cells"])
    return entry


def summary_line(cell: dict) -> str:
    if cell["status"] != "ok":
        return f"{cell['status']}: {cell.get('error') or cell.get('note')}"
    raw, engine = cell["raw"]["median_samples_per_s"], cell["engine"]["median_samples_per_s"]
    return f"raw {raw:.0f}/s, engine {engine:.0f}/s, ratio {cell['ratio']:.3f} ({cell['wall_s']:.1f} s)"


def print_summary(report: dict) -> None:
    print()
    for name, entry in report["cases"].items():
        imp = entry.get("implied_certification", {})
        parts = [f"{name} B={entry['batch_size']}: best {entry.get('best_setting')}"]
        for label in ("fp32", "best"):
            if imp.get(label):
                what = imp[label]
                parts.append(f"{imp['inputs']} inputs at {label} ({what['setting']}): {what['hours']:.2f} h")
        print("; ".join(parts))


if __name__ == "__main__":
    main()
