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
# rs_lightning/analysis/published_numbers.py: CIFAR-10 = Sun et al. 2025 Table 2, MNIST = Jeong & Shin 2020's
# MNIST table (+ CAT-RS's ACR), all as the authors' released logs. A cell without a published number or
# an experiment file is refused (one line "error: ...", exit status 2) before any work.
#
# Steps (each resumable: rerun the same command after an interruption):
#   0. CAT-RS only: a Gaussian sigma = 0.25 model on CAT-RS's schedule (experiment
#      cohen_<DATASET>_sigma025_catrs_pretrain) and its soft labels (soft_labels.py, N = 10,000 draws per
#      training image), shared by the three sigmas of a dataset; skipped when SOFT_LABELS=FILE.npy is given.
#   1. train.py experiment=<cell> into OUT/train (ckpt_path=last: a rerun resumes; OUT/train/train.done
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
source scripts/run_steps.sh   # run_step (DRY_RUN=1 prints), train_run (train.done)

USAGE="scripts/reproduce.sh DATASET SIGMA METHOD (DATASET: cifar10|mnist; SIGMA: 0.25|0.5|1.0; METHOD: cohen|smoothadv|macer|consistency|smoothmix|catrs|acr_gaming)"
fail() { echo "error: $*" >&2; exit 2; }

if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
command -v "$PY" > /dev/null 2>&1 || fail "PY=$PY is not an executable Python interpreter; set PY=/path/to/python"

if [ "${1:-}" = "--estimate" ]; then
  [ $# -eq 1 ] || fail "--estimate takes no other argument"
  exec "$PY" scripts/gpu_hours.py
fi

[ $# -eq 3 ] || fail "expected 3 arguments, got $#; usage: $USAGE"
DATASET=$1
SIGMA_ARG=$2
METHOD=$3
CELL=$("$PY" -m rs_lightning.cli.published_cells shell "$DATASET" "$SIGMA_ARG" "$METHOD") || exit 2
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

echo "# reproduce $DATASET sigma=$CELL_SIGMA $METHOD: experiment=$EXPERIMENT; published: $CELL_SOURCE"
echo "# protocol: $CELL_NUM_IMAGES test images (start=$CELL_START skip=$CELL_SKIP), n0=$CELL_N0 n=$CELL_N alpha=$CELL_ALPHA; out: $OUT"
if [ ${#CERTIFY_ARGS[@]} -gt 0 ]; then
  echo "# note: CERTIFY_EXTRA=${CERTIFY_EXTRA} may change the protocol; the report then refuses unless REPORT_EXTRA=--allow-protocol-difference" >&2
fi

if [ -n "$PRETRAIN" ]; then
  if [ -f "$SOFT_LABELS" ]; then
    echo "# soft labels $SOFT_LABELS exist: step 0 skipped"
  else
    train_run "$PRETRAIN/train" "experiment=$PRE_EXPERIMENT" "${DATA_ARGS[@]}" "${PRETRAIN_ARGS[@]}"
    soft_labels_run "$PRETRAIN/train" "$SOFT_LABELS" "${SOFT_ARGS[@]}" "hydra.run.dir=$PRETRAIN/soft_labels"
  fi
fi

train_run "$OUT/train" "experiment=$EXPERIMENT" "${METHOD_ARGS[@]}" "${DATA_ARGS[@]}" "${EXTRA_ARGS[@]}"

# float Gaussian noise: the papers' protocol (certify.py's default on 8-bit data is lattice noise)
run_step "$PY" certify.py "checkpoint=$OUT/train/checkpoints/last.ckpt" "n0=$CELL_N0" "n=$CELL_N" "alpha=$CELL_ALPHA" \
  "start=$CELL_START" "skip=$CELL_SKIP" "max=$CELL_MAX" noise=gaussian "${CERTIFY_ARGS[@]}" "output_dir=$OUT/certify"

run_step "$PY" -m rs_lightning.cli.report published "$OUT/certify" --dataset "$DATASET" --method "$METHOD" \
  --sigma "$CELL_SIGMA" --out "$OUT/report" --overwrite "${REPORT_ARGS[@]}"
