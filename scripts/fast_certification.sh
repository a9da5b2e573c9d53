#!/usr/bin/env bash
# Evidence for fast certification (issue 8): input-specific sampling (ISS) against input-agnostic sampling
# (IAS) at n = 100,000 on 200 test inputs, bf16 against fp32, and the headline: bf16 + ISS against the fp32
# IAS run. Two real models:
#   - MNIST LeNet, Gaussian sigma = 0.5 (cohen_mnist_sigma050 shortened to 15 epochs, StepLR(5): the
#     reference's two LR drops at 1/3 and 2/3 of the schedule kept)
#   - LeNet on the 4k/1k CIFAR-10 subset, Gaussian sigma = 0.25 (data=npz, the MNIST LeNet recipe, 90 epochs)
#   bash scripts/fast_certification.sh            # OUT=... PY=... RS_SHARED_DATA=... to change paths
#   STAGE=compare|headline|tables bash scripts/fast_certification.sh   # one stage
# Stage "compare" runs one process per certification with one thread (two can share the 2 cores); stage
# "headline" runs the two timed runs back to back with 2 threads and must have the machine to itself.
# Every certify.py run is resumable (rerun the script); finished runs are skipped. Each run's per-input rows
# are archived under $ARCHIVE/<model>/<run> and the tables are built from there into $TABLES, so they rebuild
# from the repository (tests/test_archived_evidence.py). The models are those of
# scripts/sequential_certification.sh (same recipes and folder names): OUT=<its OUT> reuses its trainings.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/evidence.sh
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}
OUT=${OUT:-outputs/fast_certification}
ARCHIVE=${ARCHIVE:-docs/results/fast_certification/runs}
TABLES=${TABLES:-docs/results/fast_certification}
mkdir -p "$TABLES"

MNIST="data=npz data.path=$DATA/mnist.npz skip=50"            # idx 0, 50, ..., 9950: 200 inputs
CIFAR="data=npz data.path=$DATA/cifar10_subset.npz skip=5"    # idx 0, 5, ..., 995: 200 inputs
FAST="precision=bf16 channels_last=true"
ISS005="sampling=iss iss.decline=ad iss.max_decline=0.05"
ISS010="sampling=iss iss.decline=ad iss.max_decline=0.1"

certify_archived() {  # certify_archived THREADS MODEL NAME OVERRIDES...: certify (scripts/evidence.sh), then
  # archive the rows to $ARCHIVE/MODEL/NAME
  certify "$@" || return
  [ "${DRY_RUN:-0}" = 1 ] || archive_run "$OUT/certify/$2/$3" "$ARCHIVE/$2/$3"
}

stage_compare() {
  train mnist_lenet_s050 experiment=cohen_mnist_sigma050 data=npz data.path="$DATA/mnist.npz" \
    optim.max_epochs=15 optim.scheduler.step_size=5
  train cifar_subset_lenet_s025 method=gaussian sigma=0.25 model=lenet data=npz \
    data.path="$DATA/cifar10_subset.npz" 'data.mean=[0.4914,0.4822,0.4465]' 'data.std=[0.2023,0.1994,0.2010]' \
    data.augment=true
  for spec in "mnist_lenet_s050:$MNIST" "cifar_subset_lenet_s025:$CIFAR"; do
    model=${spec%%:*}; data=${spec#*:}
    certify_archived 1 "$model" ias_bf16 $data $FAST
    certify_archived 1 "$model" iss_ad005_bf16 $data $FAST $ISS005
    certify_archived 1 "$model" iss_ad010_bf16 $data $FAST $ISS010
  done
}

stage_headline() {  # the machine to itself: fp32 IAS, then bf16 + ISS AD 0.05, same 200 inputs, 2 threads
  certify_archived 2 mnist_lenet_s050 headline_ias_fp32 $MNIST precision=32
  certify_archived 2 mnist_lenet_s050 headline_iss_ad005_bf16 $MNIST $FAST $ISS005
  $PY scripts/throughput_ratio.py "$ARCHIVE/mnist_lenet_s050/headline_ias_fp32" \
    "$ARCHIVE/mnist_lenet_s050/headline_iss_ad005_bf16" | tee "$TABLES/headline.txt"
}

stage_tables() {
  for spec in "mnist_lenet_s050:0 0.5 1 1.5" "cifar_subset_lenet_s025:0 0.25 0.5 0.75"; do
    model=${spec%%:*}; radii=${spec#*:}; dir="$ARCHIVE/$model"
    $PY scripts/iss_comparison.py "$dir/ias_bf16" "$dir/iss_ad005_bf16" "$dir/iss_ad010_bf16" --radii $radii \
      --json "$TABLES/iss_$model.json" | tee "$TABLES/iss_$model.md"
  done
  $PY scripts/precision_agreement.py runs "$ARCHIVE/mnist_lenet_s050/headline_ias_fp32" \
    "$ARCHIVE/mnist_lenet_s050/ias_bf16" | tee "$TABLES/agreement_runs_mnist.json"
  # (from the checkpoint: per noisy sample, not rebuilt from archived rows)
  OMP_NUM_THREADS=1 $PY scripts/precision_agreement.py samples "$OUT/train/mnist_lenet_s050/checkpoints/last.ckpt" \
    --inputs 200 --skip 50 --samples 1000 --settings bf16 bf16+cl fp32+cl | tee "$TABLES/agreement_samples_mnist.json"
}

if [ -n "${STAGE:-}" ]; then "stage_$STAGE"; exit 0; fi
stage_compare
stage_headline
stage_tables
