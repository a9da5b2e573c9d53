"""Scaling of certification across processes: ``certify.py trainer=ddp_sim`` (2 processes × 1 thread)
against one process with 1 and with 2 threads, same checkpoint and inputs, run back to back.

    python -m bench.certify_scaling [--inputs 60] [--n 20000] [--repeats 2]

Writes ``bench/results/certify_scaling.json`` with two ratios:

- ``certification_efficiency`` = samples/s of each DDP rank / samples/s of the single 1-thread process (from
  each run's ``summary.json``: the ``time`` column, i.e. certification alone). 1.0 = linear scaling; the
  target is ≥ 0.9, i.e. no loss beyond start-up and merge.
- ``wall_efficiency`` = t(1 process, 1 thread) / (2 × t(2 processes)) over the whole ``certify.py`` run,
  start-up (spawning the ranks) and merge included, which a short run cannot amortise.

The network is the demo's digits CNN after 3 epochs (trained here, seconds); speed does not depend on its
accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.throughput import machine_info
from rs_lightning.runs import RunSummary

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "certify_scaling.json"
SETTINGS = {  # name: (OMP threads per process, extra overrides)
    "1 process x 1 thread": (1, []),
    "1 process x 2 threads": (2, []),
    "2 processes x 1 thread (trainer=ddp_sim)": (1, ["trainer=ddp_sim"]),
}


def rate(out: str) -> float:
    """Certified samples per second per process (the summary's throughput, from the time column)."""
    return float(RunSummary.read(out).throughput["samples_per_s"])


def run(args: list[str], threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(args)}\n{done.stderr[-2000:]}")
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=60)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        train = [
            "train.py",
            "optim.max_epochs=3",
            "~callbacks.certification",
            "logger=none",
            "trainer.enable_progress_bar=false",
            f"hydra.run.dir={tmp}/train",
        ]
        run(train, 2)
        checkpoint = f"{tmp}/train/checkpoints/last.ckpt"
        skip = max(1, 360 // args.inputs)
        times: dict[str, list[float]] = {name: [] for name in SETTINGS}
        rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
        for repeat in range(args.repeats):
            for name, (threads, extra) in SETTINGS.items():  # interleaved: load changes hit all alike
                out = f"{tmp}/certify_{repeat}_{len(times[name])}_{threads}_{len(extra)}"
                certify = [
                    "certify.py",
                    f"checkpoint={checkpoint}",
                    f"n={args.n}",
                    f"skip={skip}",
                    f"max={skip * args.inputs}",
                    f"output_dir={out}",
                    f"hydra.run.dir={out}/h",
                    *extra,
                ]
                times[name].append(run(certify, threads))
                rates[name].append(rate(out))
                print(
                    f"{name}: {times[name][-1]:.1f} s, {rates[name][-1]:.0f} samples/s per process",
                    flush=True,
                )
    median = {name: statistics.median(t) for name, t in times.items()}
    median_rate = {name: statistics.median(r) for name, r in rates.items()}
    one, two_threads, ddp = (median[name] for name in SETTINGS)
    rate_one, _, rate_ddp = (median_rate[name] for name in SETTINGS)
    result = {
        "benchmark": "certify_scaling",
        "machine": machine_info(torch.device("cpu")),
        "settings": {
            "inputs": args.inputs,
            "n": args.n,
            "n0": 100,
            "repeats": args.repeats,
            "model": "digits CNN (make demo's), 3 epochs",
        },
        "wall_seconds": times,
        "median_wall_seconds": median,
        "samples_per_s_per_process": rates,
        "median_samples_per_s_per_process": median_rate,
        "certification_efficiency": rate_ddp / rate_one,
        "wall_speedup_2_processes_over_1_thread": one / ddp,
        "wall_speedup_2_processes_over_2_threads": two_threads / ddp,
        "wall_efficiency": one / (2 * ddp),
        "target_certification_efficiency": 0.9,
        "meets_target": rate_ddp / rate_one >= 0.9,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    skip_keys = ("machine", "wall_seconds", "samples_per_s_per_process")
    print(json.dumps({k: v for k, v in result.items() if k not in skip_keys}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
