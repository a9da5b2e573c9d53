#!/usr/bin/env bash
# Gaussian and Consistency on full MNIST with LeNet at the published 90-epoch recipe
# (jh-jeong/smoothing-consistency train_cohen.py / train_consistency.py, EXPERIMENTS.MD), sigma 0.25 and 0.5,
# then CERTIFY on the same 200 test images (idx 0, 50, ..., 9950; SKIP=20: 500) at alpha = 0.001 and
# N = BUDGETS (default 10,000 and 100,000), then the reports against the published table (Jeong & Shin 2020,
# full test set). Each report is built from per-input rows archived under $REPORTS/sigma<s>_n<N>/runs/, so it
# rebuilds from the repository (tests/test_archived_evidence.py). The sigma = 1.0 pair (ACR against the p_A distribution at a large sigma):
#   RUNS="cohen_mnist_sigma100 consistency_mnist_sigma100" SIGMAS=100 SKIP=20 BUDGETS=100000 \
#     CHECKPOINT=epoch089.ckpt OUT=/work/runs/mnist_repro bash evidence/mnist_reproduction/mnist_reproduction.sh
# LR schedule as the reference runs it: its legacy scheduler.step(epoch) after each epoch makes StepLR(30)'s
# drops take effect from 0-based epochs 31 and 61 (the experiment files' optim.scheduler_epoch_offset: 1).
# Resumable: every run uses a fixed folder and ckpt_path=last, and certify.py skips certified rows, so
# rerunning the script continues killed or unfinished runs (1 thread each; RUNS="a b" to choose; JOBS
# parallel processes; STAGE=report only writes the reports).
#   OUT=/work/runs/mnist_repro bash evidence/mnist_reproduction/mnist_reproduction.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/run_steps.sh
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}
OUT=${OUT:-outputs/mnist_reproduction}
RUNS=${RUNS:-"cohen_mnist_sigma025 consistency_mnist_sigma025 cohen_mnist_sigma050 consistency_mnist_sigma050"}
BUDGETS=${BUDGETS:-"10000 100000"}
SIGMAS=${SIGMAS:-"025 050"}   # the reports' sigmas, as in the experiment names (100 = 1.0)
SKIP=${SKIP:-50}
JOBS=${JOBS:-2}
REPORTS=${REPORTS:-docs/results/mnist_reproduction}

one() {  # train then certify one experiment at every budget (scripts/run_steps.sh: train.done, resumable)
  local exp=$1 dir="$OUT/$1" n
  OMP_NUM_THREADS=1 train_run "$dir/train" experiment="$exp" data=npz data.path="$DATA/mnist.npz" seed=0 \
    logger=csv trainer.enable_progress_bar=false || return
  for n in $BUDGETS; do
    OMP_NUM_THREADS=1 certify_run "$dir/train" "$dir/certify_n$n" data=npz data.path="$DATA/mnist.npz" n="$n" \
      alpha=0.001 skip="$SKIP" seed=0 noise=gaussian || return  # float noise: the papers' (and archived)
  done
}

report() {  # per sigma and budget: archive the rows, the ECDF/budget report from them at the published
  # radii, the paired Consistency - Gaussian CIs, and each run against its published row
  local s n run exp method folder
  for s in $SIGMAS; do
    for n in $BUDGETS; do
      folder="$REPORTS/sigma${s}_n$n"
      for run in "$OUT"/*_sigma"$s"/certify_n"$n"; do
        exp=$(basename "$(dirname "$run")")
        archive_run "$run" "$folder/runs/${exp%%_mnist_*}"
      done
      $PY -m rs_lightning.cli.report "$folder"/runs/* --out "$folder" --overwrite --budgets 1000 10000 100000 \
        --radii $(radii_of "$s")
      if [ -d "$folder/runs/cohen" ] && [ -d "$folder/runs/consistency" ]; then  # the CIs the docs quote
        $PY -m rs_lightning.cli.report paired "$folder"/runs/{consistency,cohen} --radii $(radii_of "$s") \
          > "$folder/paired_consistency_cohen.txt"
      fi
    done
  done
  for exp in $RUNS; do
    method=${exp%%_mnist_*} s=${exp##*_sigma}
    for n in $BUDGETS; do
      $PY -m rs_lightning.cli.report published "$REPORTS/sigma${s}_n$n/runs/$method" --dataset mnist \
        --method "$method" --sigma "$(sigma_of "$s")" --allow-protocol-difference \
        --out "$REPORTS/published/${exp}_n$n" --overwrite
    done
  done
}

radii_of() {  # radii_of 050: the published table's radii at that sigma (Jeong & Shin 2020, MNIST table)
  case $1 in
    025) echo 0 0.25 0.5 0.75 ;;
    050) echo 0 0.25 0.5 0.75 1 1.25 1.5 1.75 ;;
    *) echo 0 0.5 1 1.5 2 2.5 3 3.5 ;;
  esac
}

sigma_of() {  # sigma_of 025 -> 0.25, 100 -> 1.0 (the experiment names' sigma digits)
  printf '%s.%s' "${1:0:1}" "${1:1}" | sed 's/0*$//; s/\.$/.0/'
}

if [ "${STAGE:-}" = report ]; then report; exit 0; fi
mkdir -p "$OUT"
running=0
for exp in $RUNS; do
  in_background "$OUT/$exp.log" one "$exp"
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi  # failures: wait_all
done
wait_all
report
