#!/usr/bin/env bash
# Evidence for Adaptive RS on the offline clutter benchmark (cluttered MNIST, 28x28 digits on 56x56
# canvases with fragments of other digits; data=cluttered_mnist), sigma = 0.5: ARS's vanilla baseline
# (Gaussian noise), its static-mask baseline and ARS itself, trained on one recipe and certified in
# L-infinity on the same materialized test images with one protocol; then the report, the paired CIs and
# the mask PNG for docs/results.md. Stage report archives each run's per-input rows (certify.tsv,
# settings.json, summary.json) under $ARCHIVE and builds the report and paired CIs from them (stage tables,
# which tests/test_archived_evidence.py runs), then draws the masks from the checkpoints.
#   OUT=/work/runs/ars_clutter bash evidence/ars_clutter/ars_clutter.sh
#   (STAGE=train|certify|report|tables|masks, RUNS="...")
# Schedule: the experiments' 90-epoch recipe (conf/experiment/ars*_cluttered_mnist_sigma050.yaml) scaled by
# 1/30 with its structure kept: 9 short epochs, each a fresh random third of the training canvases (LIMIT,
# trainer.limit_train_batches: 78 of 235 batches; 3 passes in all), the classifier's StepLR(30, x0.1) ->
# StepLR(3) and the mask's StepLR(30, x0.5) -> StepLR(3), drops after epochs 3 and 6 (ARS's train.py timing).
# (One ARS step costs ~4x a vanilla one on this CPU: the full 9 passes would take ~3 CPU hours for ARS
# alone.) Certification: ARS's own alpha = 0.05 and n0 = 100 (its src/certify.py), n = 1,000 (reference
# 50,000; cut for the CPU, where one ARS sample costs 3.7 vanilla ones, bench/results/ars_cost.json; the
# largest certifiable r_inf is then 0.0245 instead of 0.034) on 500 test canvases (skip=20), L-infinity
# radii (norm=linf).
# Each process has one thread; every stage skips finished work, so a rerun resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/run_steps.sh
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}/mnist.npz
OUT=${OUT:-outputs/ars_clutter}
RUNS=${RUNS:-"ars_vanilla ars_static ars"}
REPORTS=${REPORTS:-docs/results/ars_clutter}
ARCHIVE=${ARCHIVE:-docs/results/ars_clutter/runs}  # per-input rows: the tables rebuild from them alone
EPOCHS=${EPOCHS:-9}
STEP=${STEP:-3}
LIMIT=${LIMIT:-0.3333}
RADII="0 0.001 0.002 0.0039216 0.0078431 0.0117647"   # the paired CIs' L-infinity radii (1/255 = 0.0039216)
CERTIFY=${CERTIFY:-"norm=linf n0=100 n=1000 alpha=0.05 skip=20 batch_size=1000 seed=0 noise=gaussian"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT"

train() {  # train RUN: train_run (scripts/run_steps.sh: train.done, resumable) into $OUT/RUN/train
  local run=$1 mask=""
  [ "$run" != ars_vanilla ] && mask="method.mask_scheduler.step_size=$STEP"
  train_run "$OUT/$run/train" experiment="${run}_cluttered_mnist_sigma050" data.source.path="$DATA" seed=0 \
    optim.max_epochs="$EPOCHS" optim.scheduler.step_size="$STEP" trainer.limit_train_batches="$LIMIT" $mask \
    logger=csv trainer.enable_progress_bar=false
}

certify() {  # certify RUN on the common protocol: certify_run (only a finished training; resumes)
  certify_run "$OUT/$1/train" "$OUT/$1/certify" $CERTIFY
}

train_and_certify() { train "$1"; certify "$1"; }

archive() {  # the finished certifications' per-input rows into $ARCHIVE (scripts/run_steps.sh archive_run)
  for run in ars ars_static ars_vanilla; do archive_run "$OUT/$run/certify" "$ARCHIVE/$run"; done
}

tables() {  # the report and the paired CIs from the archived rows alone (tests/test_archived_evidence.py)
  mkdir -p "$REPORTS"
  $PY -m rs_lightning.cli.report "$ARCHIVE"/{ars,ars_static,ars_vanilla} --out "$REPORTS" --overwrite \
    --budgets 100 1000 10000 50000
  $PY -m rs_lightning.cli.report paired "$ARCHIVE"/{ars,ars_vanilla,ars_static} \
    --radii $RADII > "$REPORTS/paired_differences.txt"
  $PY -m rs_lightning.cli.report paired "$ARCHIVE"/{ars_static,ars_vanilla} \
    --radii $RADII > "$REPORTS/paired_static_vanilla.txt"
}

masks() {  # the learned masks, and beside each PNG its numbers (mask mean, sigma2): these need the checkpoints
  require_trained "$OUT/ars/train" && require_trained "$OUT/ars_static/train" || return
  $PY scripts/ars_masks.py "$OUT/ars/train/checkpoints/last.ckpt" \
    --out "$REPORTS/masks_ars.png" --inputs 6 --skip 1000 > "$REPORTS/masks_ars.txt"
  $PY scripts/ars_masks.py "$OUT/ars_static/train/checkpoints/last.ckpt" \
    --out "$REPORTS/mask_static.png" --inputs 1 > "$REPORTS/mask_static.txt"
}

report() { archive; tables; masks; }

case "${STAGE:-all}" in
  train) for run in $RUNS; do in_background "$OUT/$run.train.log" train "$run"; done; wait_all ;;
  certify) for run in $RUNS; do in_background "$OUT/$run.certify.log" certify "$run"; done; wait_all ;;
  report) report ;;
  tables) tables ;;
  masks) masks ;;
  all)
    for run in $RUNS; do in_background "$OUT/$run.log" train_and_certify "$run"; done
    wait_all
    report ;;
esac
