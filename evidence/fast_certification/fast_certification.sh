#!/usr/bin/env bash
# Evidence for fast certification: input-specific sampling (ISS) against input-agnostic sampling
# (IAS) at n = 100,000 on 200 test inputs, bf16 against fp32, and the headline: bf16 + ISS against the fp32
# IAS run. The models and fp32 runs are those of evidence/sequential/sequential_certification.sh (same
# recipes, folder names and archive): OUT=<its OUT> reuses its trainings, and its archived fp32 rows are the
# fp32 side here.
#   - MNIST LeNet, Gaussian sigma = 0.5 (cohen_mnist_sigma050 shortened to 15 epochs, StepLR(5): the
#     reference's two LR drops at 1/3 and 2/3 of the schedule kept): IAS and ISS (AD 0.05, 0.1) at bf16 +
#     channels_last, against its fp32 IAS and ISS runs
#   - LeNet on the 4k/1k CIFAR-10 subset, Gaussian sigma = 0.25: ISS against IAS from the fp32 runs only
#   bash evidence/fast_certification/fast_certification.sh      # OUT=... PY=... RS_SHARED_DATA=... to change paths
#   STAGE=train|compare|headline|samples|tables bash evidence/fast_certification/fast_certification.sh  # one stage
# Stage "compare" runs one process per certification with one thread; stage "headline" runs the two timed
# runs back to back with 2 threads and must have the machine to itself (HEADLINE_SKIP=200: every 4th input,
# 50). Every certify.py run is resumable (rerun the script); finished runs are skipped. Each run's per-input
# rows are archived under $ARCHIVE/<model>/<run>, stage "samples" writes its per-input counts into $TABLES,
# and stage "tables" builds every table from the archived rows alone (no checkpoint), so
# tests/test_archived_evidence.py rebuilds them from the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/run_steps.sh
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}
OUT=${OUT:-outputs/fast_certification}
ARCHIVE=${ARCHIVE:-docs/results/fast_certification/runs}
TABLES=${TABLES:-docs/results/fast_certification}
FP32=${FP32:-docs/results/sequential/runs}   # evidence/sequential/sequential_certification.sh's archive: the fp32 runs
mkdir -p "$TABLES"

MNIST="data=npz data.path=$DATA/mnist.npz skip=50"            # idx 0, 50, ..., 9950: 200 inputs
FAST="precision=bf16 channels_last=true"
ISS005="sampling=iss iss.decline=ad iss.max_decline=0.05"
ISS010="sampling=iss iss.decline=ad iss.max_decline=0.1"

certify_archived() {  # certify_archived THREADS MODEL NAME OVERRIDES...: certify (scripts/run_steps.sh), then
  # archive the rows to $ARCHIVE/MODEL/NAME
  certify "$@" || return
  [ "${DRY_RUN:-0}" = 1 ] || archive_run "$OUT/certify/$2/$3" "$ARCHIVE/$2/$3"
}

stage_train() {  # the MNIST model (skipped when its train.done is there)
  train mnist_lenet_s050 experiment=cohen_mnist_sigma050 data=npz data.path="$DATA/mnist.npz" \
    optim.max_epochs=15 optim.scheduler.step_size=5
}

stage_compare() {
  certify_archived 1 mnist_lenet_s050 ias_bf16 $MNIST $FAST
  certify_archived 1 mnist_lenet_s050 iss_ad005_bf16 $MNIST $FAST $ISS005
  certify_archived 1 mnist_lenet_s050 iss_ad010_bf16 $MNIST $FAST $ISS010
}

stage_headline() {  # the machine to itself: fp32 IAS, then bf16 + ISS AD 0.05, same inputs, 2 threads
  local inputs="data=npz data.path=$DATA/mnist.npz skip=${HEADLINE_SKIP:-50}"
  certify_archived 2 mnist_lenet_s050 headline_ias_fp32 $inputs precision=32
  certify_archived 2 mnist_lenet_s050 headline_iss_ad005_bf16 $inputs $FAST $ISS005
}

stage_samples() {  # from the finished training's checkpoint: per noisy sample of certify.py's estimation
  # stream, per input
  local train="$OUT/train/mnist_lenet_s050"
  require_trained "$train" || return
  OMP_NUM_THREADS=1 run_step $PY scripts/precision_agreement.py samples "$train/checkpoints/last.ckpt" \
    --inputs 200 --skip 50 --samples 1000 --settings bf16 bf16+cl fp32+cl \
    --out "$TABLES/agreement_samples_mnist.json"
}

stage_tables() {  # from archived rows only
  local mnist="$ARCHIVE/mnist_lenet_s050" cifar="$FP32/cifar_subset_lenet_s025"
  $PY scripts/iss_comparison.py "$mnist/ias_bf16" "$mnist/iss_ad005_bf16" "$mnist/iss_ad010_bf16" \
    --radii 0 0.5 1 1.5 --json "$TABLES/iss_mnist_lenet_s050.json" > "$TABLES/iss_mnist_lenet_s050.md"
  $PY scripts/iss_comparison.py "$cifar/cohen" "$cifar/iss_ad005" --radii 0 0.25 0.5 0.75 \
    --json "$TABLES/iss_cifar_subset_lenet_s025.json" > "$TABLES/iss_cifar_subset_lenet_s025.md"
  $PY scripts/precision_agreement.py runs "$FP32/mnist_lenet_s050/cohen" "$mnist/ias_bf16" \
    > "$TABLES/agreement_runs_mnist_ias.json"
  $PY scripts/precision_agreement.py runs "$FP32/mnist_lenet_s050/iss_ad005" "$mnist/iss_ad005_bf16" \
    > "$TABLES/agreement_runs_mnist_iss.json"
  if [ -f "$mnist/headline_iss_ad005_bf16/summary.json" ]; then
    $PY scripts/throughput_ratio.py "$mnist/headline_ias_fp32" "$mnist/headline_iss_ad005_bf16" \
      > "$TABLES/headline.txt"
  fi
}

if [ -n "${STAGE:-}" ]; then "stage_$STAGE"; exit 0; fi
stage_train
stage_compare
stage_headline
stage_samples
stage_tables
