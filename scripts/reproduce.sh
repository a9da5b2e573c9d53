#!/usr/bin/env bash
# Reproduce one published cell end to end: train -> certify on the paper's test set at the paper's protocol ->
# compare with the published numbers (docs/reproduce.md).
#
#   scripts/reproduce.sh DATASET SIGMA METHOD
#     DATASET  cifar10 | mnist
#     SIGMA    0.25 | 0.5 | 1.0
#     METHOD   cohen | smoothadv | macer | consistency | smoothmix | catrs | acr_gaming
#              (conf/experiment/<METHOD>_<DATASET>_sigma<025|050|100>.yaml; cohen = Gaussian augmentation)
#   scripts/reproduce.sh --estimate     # the GPU-hours table of docs/reproduce.md (an estimate, see there;
#                                       # GPU_JSON=FILE: a make bench-gpu output, default bench/results/gpu.json)
#
# The cells, their published numbers and their certification protocol (test indices, N0, N, alpha) come from
# rs_lightning/analysis/published_numbers.py: CIFAR-10 = Sun et al. 2025 Table 2 (methods-advanced.md §3.5),
# MNIST = methods-core.md §7.6 (+ CAT-RS's ACR, methods-advanced.md §2.5). A cell without a published number or
# an experiment file is refused (one line "error: ...", exit status 2) before any work.
#
# Steps (each resumable: rerun the same command after an interruption):
#   0. CAT-RS only: a Gaussian sigma = 0.25 model on CAT-RS's schedule (experiment
#      cohen_<DATASET>_sigma025_catrs_pretrain) and its soft labels (soft_labels.py, N = 10,000 draws per
#      training image), shared by the three sigmas of a dataset; skipped when SOFT_LABELS=FILE.npy is given.
#   1. train.py experiment=<cell> into OUT/train (ckpt_path=last: a rerun resumes; OUT/train/reproduce.done
#      marks a finished training, which a rerun skips).
#   2. certify.py on OUT/train/checkpoints/last.ckpt into OUT/certify (rows already certified are skipped).
#   3. python -m rs_lightning.cli.report published OUT/certify ... into OUT/report (published.md, published.csv).
#
# Environment:
#   OUT=DIR              run folder (default outputs/reproduce/<DATASET>/<METHOD>_s<SIGMA>)
#   PY=PYTHON            interpreter (default .venv/bin/python if present, else python3)
#   DATA_OVERRIDES="..." data overrides for training, e.g. "data.root=/data/cifar10" (CIFAR-10: torchvision's
#                        cifar-10-batches-py under data.root, default ./data) or, for MNIST,
#                        "data=npz data.path=/data/mnist.npz" or "data.download=true". certify.py and
#                        soft_labels.py take the data from the checkpoint.
#   EXTRA="..."          more Hydra overrides for the cell's training (e.g. "trainer=ddp trainer.devices=4")
#   CERTIFY_EXTRA="..."  more overrides for certify.py (e.g. "batch_size=4000"; a protocol change such as
#                        precision=bf16 makes step 3 refuse unless REPORT_EXTRA=--allow-protocol-difference)
#   REPORT_EXTRA="..."   more arguments for the report (e.g. --allow-protocol-difference)
#   SOFT_LABELS=FILE     CAT-RS: an existing soft-label file (skips step 0)
#   PRETRAIN_OUT=DIR     CAT-RS: folder of step 0 (default <dirname OUT>/catrs_pretrain, shared by the sigmas)
#   PRETRAIN_EXTRA="..." CAT-RS: more overrides for step 0's training; SOFT_LABELS_EXTRA="..." for soft_labels.py
#   DRY_RUN=1            print the commands (lines starting with "+ ") without running them
# The *_EXTRA and DATA_OVERRIDES values are split at whitespace (no spaces inside one override).
set -euo pipefail
cd "$(dirname "$0")/.."

USAGE="scripts/reproduce.sh DATASET SIGMA METHOD (DATASET: cifar10|mnist; SIGMA: 0.25|0.5|1.0; METHOD: cohen|smoothadv|macer|consistency|smoothmix|catrs|acr_gaming)"
fail() { echo "error: $*" >&2; exit 2; }

if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
command -v "$PY" > /dev/null 2>&1 || fail "PY=$PY is not an executable Python interpreter; set PY=/path/to/python"

if [ "${1:-}" = "--estimate" ]; then
  [ $# -eq 1 ] || fail "--estimate takes no other argument"
  exec "$PY" - << 'PYTHON'
"""GPU-hours estimate per cell (docs/reproduce.md): reference GPU anchors x CPU-measured cost ratios."""
import json
import os
import statistics
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rs_lightning.analysis import published_numbers as pn

steps = json.loads(Path("bench/results/method_steps.json").read_text())
bench = {r["method"]: r for r in steps["results"] if "error" not in r}
base = bench["gaussian"]["measured_passes"] / bench["gaussian"]["expected_passes"]
overhead = {m: r["measured_passes"] / r["expected_passes"] / base for m, r in bench.items()}
throughput = json.loads(Path("bench/results/certify_throughput.json").read_text())
rate = {
    r["case"]: r["engine"]["median_samples_per_s"]
    for r in throughput["results"]
    if r["setting"] == "fp32" and r["batch_size"] == 400
}
lenet_speedup = rate["lenet_mnist"] / rate["resnet110_cifar"]  # LeNet vs ResNet-110 samples/s (CPU, fp32)
cert_s = statistics.mean(pn.CIFAR10_CERTIFY_SECONDS_PER_IMAGE)  # ResNet-110, N = 1e5 (+ N0), reference GPU
epoch_s = pn.P100_SECONDS_PER_EPOCH["cohen"]  # Gaussian ResNet-110 CIFAR-10 epoch, 1 P100
per_draw = {"cifar10": cert_s / 100_100, "mnist": cert_s / 100_100 / lenet_speedup}
gauss_epoch = {"cifar10": epoch_s, "mnist": epoch_s * 60_000 / 50_000 / lenet_speedup}
measured, speed = "", 1.0
gpu_path = Path(os.environ.get("GPU_JSON") or "bench/results/gpu.json")
if gpu_path.is_file():  # a measured GPU: certification from it, training anchors scaled by its speed-up
    gpu = json.loads(gpu_path.read_text())
    cases = {"cifar10": "resnet110_cifar", "mnist": "lenet_mnist"}
    for dataset, case in cases.items():
        implied = ((gpu.get("cases") or {}).get(case) or {}).get("implied_certification") or {}
        if implied.get("fp32"):
            per_draw[dataset] = implied["fp32"]["seconds"] / implied["total_draws"]
    speed = per_draw["cifar10"] / (cert_s / 100_100)
    gauss_epoch = {d: s * speed for d, s in gauss_epoch.items()}
    device = gpu["machine"].get("device_name") or gpu["machine"].get("device", "?")
    measured = f"{gpu_path} ({device}; certification measured, training anchors x {speed:.3f})"


def forward_passes(method: dict, epochs: int) -> float:
    """acr_gaming's p-hat estimates as training-pass equivalents per image (a forward pass ~ 1/3 of one)."""
    ds = method["ds_epoch"] if method["ds_epoch"] >= 1 else int(method["ds_epoch"] * epochs)
    extra = method.get("discard_samples", 100) / 3 if method.get("discard_hard") else 0.0
    if method.get("reweight"):
        extra += len(range(ds, epochs, method.get("reweight_every", 10))) * method["reweight_samples"] / 3
    return extra


rows, pretrain = [], {}
with initialize_config_dir(config_dir=str(Path("conf").resolve()), version_base="1.3"):
    for (dataset, method, sigma), cell in pn.PUBLISHED.items():
        if not Path(f"conf/experiment/{cell.experiment}.yaml").is_file():
            continue
        cfg = compose("train", [f"experiment={cell.experiment}"])
        hyper = OmegaConf.to_container(cfg.method, resolve=True)
        epochs, images = int(cfg.optim.max_epochs), pn.TRAIN_IMAGES[dataset]
        if method == "acr_gaming":
            ds = hyper["ds_epoch"] if hyper["ds_epoch"] >= 1 else int(hyper["ds_epoch"] * epochs)
            total = sum(pn.passes_per_image(method, hyper, e, ds) for e in range(epochs))
            total += forward_passes(hyper, epochs)
        else:
            total = epochs * pn.passes_per_image(method, hyper)
        factor = overhead.get("gaussian" if method == "cohen" else method)
        if dataset == "cifar10" and method == "macer" and hyper["num_noise_vec"] == 16:
            train_s = epochs * pn.P100_SECONDS_PER_EPOCH["macer"] * speed
            how = "measured (P100)" if speed == 1.0 else f"measured (P100) x {speed:.2f}"
        else:
            train_s = total * (factor or 1.0) * gauss_epoch[dataset]
            how = f"{factor:.2f}" if factor else "not measured (1)"
        draws = cell.protocol.num_images * (cell.protocol.n + cell.protocol.n0)
        cert_h = draws * per_draw[dataset] / 3600
        rows.append((dataset, sigma, method, epochs, total / epochs, how, train_s / 3600, cert_h))
        if method == "catrs" and dataset not in pretrain:
            pre = compose("train", [f"experiment=cohen_{dataset}_sigma025_catrs_pretrain"])
            soft = images * 10_000 * per_draw[dataset] / 3600
            pretrain[dataset] = (int(pre.optim.max_epochs) * gauss_epoch[dataset] / 3600, soft)

def hours(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def per_sigma(values: list, fmt) -> str:
    """One value if the three σ agree, else "a / b / c" (σ = 0.25 / 0.5 / 1.0)."""
    texts = [fmt(v) for v in values]
    return texts[0] if len(set(texts)) == 1 else " / ".join(texts)


groups: dict = {}
for row in sorted(rows, key=lambda r: (r[0], pn.METHODS.index(r[2]), r[1])):
    groups.setdefault((row[0], row[2]), []).append(row)
print("| dataset | method | epochs | passes / image / epoch (× Gaussian) | CPU overhead | train h | "
      "certify h | total h |")
print("|---|---|---|---|---|---|---|---|")
for (dataset, method), group in groups.items():
    extra = " + pretrain" if method == "catrs" else ""
    cols = [
        per_sigma([r[3] for r in group], str),
        per_sigma([r[4] for r in group], lambda v: f"{v:.1f}"),
        per_sigma([r[5] for r in group], str),
        per_sigma([r[6] for r in group], hours),
        per_sigma([r[7] for r in group], hours),
        per_sigma([r[6] + r[7] for r in group], hours) + extra,
    ]
    print(f"| {dataset} | {method} | " + " | ".join(cols) + " |")
print("\n`a / b / c`: σ = 0.25 / 0.5 / 1.0 (one value: the same at every σ); h = hours on one GPU.")
for dataset, (train_h, soft_h) in pretrain.items():
    print(f"\nCAT-RS pretrain, {dataset} (once for the three σ): Gaussian σ = 0.25 training {hours(train_h)} "
          f"h + soft labels (10,000 draws × {pn.TRAIN_IMAGES[dataset]:,} images) {hours(soft_h)} h")
print(f"\nanchors: Gaussian ResNet-110 CIFAR-10 epoch {epoch_s} s (1 P100, MACER README); MACER k = 16 epoch "
      f"{pn.P100_SECONDS_PER_EPOCH['macer']} s (same); CERTIFY {cert_s} s per CIFAR-10 image at N = 1e5 "
      f"(released logs); LeNet / ResNet-110 samples/s on this CPU = {lenet_speedup:.1f}")
print(f"measured GPU: {measured or 'none (bench/results/gpu.json absent)'}")
PYTHON
fi

[ $# -eq 3 ] || fail "expected 3 arguments, got $#; usage: $USAGE"
DATASET=$1
SIGMA_ARG=$2
METHOD=$3
CELL=$("$PY" -m rs_lightning.analysis.published_numbers shell "$DATASET" "$SIGMA_ARG" "$METHOD") || exit 2
eval "$CELL"  # CELL_EXPERIMENT CELL_SIGMA CELL_N0 CELL_N CELL_ALPHA CELL_START CELL_SKIP CELL_MAX ...
EXPERIMENT=$CELL_EXPERIMENT
[ -f "conf/experiment/$EXPERIMENT.yaml" ] ||
  fail "experiment=$EXPERIMENT does not exist (no conf/experiment/$EXPERIMENT.yaml for dataset=$DATASET sigma=$CELL_SIGMA method=$METHOD)"

OUT=${OUT:-outputs/reproduce/$DATASET/${METHOD}_s$CELL_SIGMA}
DRY_RUN=${DRY_RUN:-0}
read -r -a DATA_ARGS <<< "${DATA_OVERRIDES:-}"
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
read -r -a CERTIFY_ARGS <<< "${CERTIFY_EXTRA:-}"
read -r -a REPORT_ARGS <<< "${REPORT_EXTRA:-}"
read -r -a PRETRAIN_ARGS <<< "${PRETRAIN_EXTRA:-}"
read -r -a SOFT_ARGS <<< "${SOFT_LABELS_EXTRA:-}"

METHOD_ARGS=()
PRETRAIN=""
if [ "$METHOD" = catrs ]; then
  if [ -n "${SOFT_LABELS:-}" ]; then
    [ -f "$SOFT_LABELS" ] || [ "$DRY_RUN" = 1 ] || fail "SOFT_LABELS=$SOFT_LABELS does not exist"
  else
    PRE_EXPERIMENT=cohen_${DATASET}_sigma025_catrs_pretrain
    [ -f "conf/experiment/$PRE_EXPERIMENT.yaml" ] ||
      fail "experiment=$PRE_EXPERIMENT (CAT-RS's soft-label model) does not exist (no conf/experiment/$PRE_EXPERIMENT.yaml); pass SOFT_LABELS=FILE.npy from soft_labels.py instead"
    PRETRAIN=${PRETRAIN_OUT:-$(dirname "$OUT")/catrs_pretrain}
    SOFT_LABELS=$PRETRAIN/soft_labels.npy
  fi
  METHOD_ARGS=("method.soft_labels=$SOFT_LABELS")
fi

step() {  # print a command ("+ ..." , shell-quoted), then run it unless DRY_RUN=1
  printf '+'
  printf ' %q' "$@"
  printf '\n'
  [ "$DRY_RUN" = 1 ] || "$@"
}

train() {  # train DIR OVERRIDES...: resumable (ckpt_path=last); DIR/reproduce.done marks a finished run
  local dir=$1
  shift
  if [ -f "$dir/reproduce.done" ]; then
    echo "# training in $dir is finished ($dir/reproduce.done): skipped"
    return
  fi
  step "$PY" train.py "$@" "hydra.run.dir=$dir" ckpt_path=last
  if [ "$DRY_RUN" != 1 ]; then
    date -u +%Y-%m-%dT%H:%M:%SZ > "$dir/reproduce.done"
  fi
}

echo "# reproduce $DATASET sigma=$CELL_SIGMA $METHOD: experiment=$EXPERIMENT; published: $CELL_SOURCE"
echo "# protocol: $CELL_NUM_IMAGES test images (start=$CELL_START skip=$CELL_SKIP), n0=$CELL_N0 n=$CELL_N alpha=$CELL_ALPHA; out: $OUT"
if [ ${#CERTIFY_ARGS[@]} -gt 0 ]; then
  echo "# note: CERTIFY_EXTRA=${CERTIFY_EXTRA} may change the protocol; the report then refuses unless REPORT_EXTRA=--allow-protocol-difference" >&2
fi

if [ -n "$PRETRAIN" ]; then
  if [ -f "$SOFT_LABELS" ]; then
    echo "# soft labels $SOFT_LABELS exist: step 0 skipped"
  else
    train "$PRETRAIN/train" "experiment=$PRE_EXPERIMENT" "${DATA_ARGS[@]}" "${PRETRAIN_ARGS[@]}"
    step "$PY" soft_labels.py "checkpoint=$PRETRAIN/train/checkpoints/last.ckpt" "output=$SOFT_LABELS" \
      "${SOFT_ARGS[@]}" "hydra.run.dir=$PRETRAIN/soft_labels"
  fi
fi

train "$OUT/train" "experiment=$EXPERIMENT" "${METHOD_ARGS[@]}" "${DATA_ARGS[@]}" "${EXTRA_ARGS[@]}"

step "$PY" certify.py "checkpoint=$OUT/train/checkpoints/last.ckpt" "n0=$CELL_N0" "n=$CELL_N" "alpha=$CELL_ALPHA" \
  "start=$CELL_START" "skip=$CELL_SKIP" "max=$CELL_MAX" "${CERTIFY_ARGS[@]}" "output_dir=$OUT/certify"

step "$PY" -m rs_lightning.cli.report published "$OUT/certify" --dataset "$DATASET" --method "$METHOD" \
  --sigma "$CELL_SIGMA" --out "$OUT/report" --overwrite "${REPORT_ARGS[@]}"
