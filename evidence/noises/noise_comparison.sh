#!/usr/bin/env bash
# Evidence for other noises: a LeNet trained with Gaussian, Laplace and uniform noise at the same
# per-coordinate std SIGMA, each certified with its own noise, all stated as L1 radii (Gaussian: its L2 radius,
# since ||d||_2 <= ||d||_1), on the same 200 test inputs; then one report with the paired certified-accuracy
# verdicts. Does uniform beat Gaussian at L1, as Yang et al. (ICML 2020) report?
#   OUT=/work/runs/noises bash evidence/noises/noise_comparison.sh                          # MNIST, sigma 0.5
#   DATASET=mnist SIGMA=1.0 OUT=/work/runs/noises_mnist_s100 bash evidence/noises/noise_comparison.sh
#   DATASET=cifar_subset OUT=/work/runs/noises_cifar_s050 bash evidence/noises/noise_comparison.sh
#   STAGE=train|certify|report ...                                                  # one stage
# Training, MNIST: cohen_mnist_sigma<SIGMA> shortened to 15 epochs with StepLR(5) (the reference's two LR drops
# at 1/3 and 2/3 of the schedule kept; a shortened schedule, not the recipe); the 4k/1k CIFAR-10 subset: the
# LeNet recipe of the sequential-certification evidence (data=npz, 90 epochs, augmentation). method=gaussian
# with each noise, seed 0. Certification: n = 10,000 (not the usual 100,000: a tenth of the cost; the L1 radii
# it can reach are smaller, see the report's caps), alpha = 0.001, n0 = 100, fp32, one thread per job, 200 test
# inputs (MNIST idx 0, 50, ...; CIFAR subset idx 0, 5, ...). Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/run_steps.sh
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}
DATASET=${DATASET:-mnist}
SIGMA=${SIGMA:-0.5}
TAG=$(awk -v s="$SIGMA" 'BEGIN { printf "%03d", s * 100 + 0.5 }')   # 0.5 -> 050, 1.0 -> 100
OUT=${OUT:-outputs/noise_comparison/${DATASET}_sigma$TAG}
REPORT=${REPORT:-docs/results/noises/${DATASET}_sigma$TAG}
STAGE=${STAGE:-all}
NOISES="gaussian laplace uniform"
case $DATASET in
  mnist)
    TRAIN="experiment=cohen_mnist_sigma$TAG data=npz data.path=$DATA/mnist.npz optim.max_epochs=15
      optim.scheduler.step_size=5"
    CERTIFY="data=npz data.path=$DATA/mnist.npz skip=50" ;;
  cifar_subset)
    TRAIN="method=gaussian sigma=$SIGMA model=lenet data=npz data.path=$DATA/cifar10_subset.npz
      data.mean=[0.4914,0.4822,0.4465] data.std=[0.2023,0.1994,0.2010] data.augment=true"
    CERTIFY="data=npz data.path=$DATA/cifar10_subset.npz skip=5" ;;
  *) echo "error: DATASET=$DATASET is invalid: choose mnist or cifar_subset" >&2; exit 2 ;;
esac
mkdir -p "$OUT"

train() {  # train NOISE: train_run (scripts/run_steps.sh), one thread
  OMP_NUM_THREADS=1 train_run "$OUT/train/$1" $TRAIN noise="$1" seed=0 trainer.enable_progress_bar=false logger=csv
}

certify() {  # certify NOISE: L1 radii with the training noise; certify_run (only a finished training; resumes)
  OMP_NUM_THREADS=1 certify_run "$OUT/train/$1" "$OUT/certify/$1" $CERTIFY n=10000 n0=100 alpha=0.001 seed=0 \
    norm=l1 noise="$1"
}

if [ "$STAGE" = all ] || [ "$STAGE" = train ]; then for noise in $NOISES; do train "$noise"; done; fi
if [ "$STAGE" = all ] || [ "$STAGE" = certify ]; then for noise in $NOISES; do certify "$noise"; done; fi
if [ "$STAGE" = all ] || [ "$STAGE" = report ]; then
  # from the archived rows (tests/test_archived_evidence.py rebuilds the report from them); the noises differ
  # on purpose: --compare-noises lets the report compare them (same inputs and protocol, same L1 ball)
  for noise in $NOISES; do archive_run "$OUT/certify/$noise" "$REPORT/runs/$noise"; done
  $PY -m rs_lightning.cli.report "$REPORT"/runs/{gaussian,laplace,uniform} --compare-noises --overwrite \
    --out "$REPORT"
  $PY -m rs_lightning.cli.report paired "$REPORT"/runs/{uniform,gaussian,laplace} --compare-noises \
    --radii ${RADII:-0 0.5 1 1.5 2} \
    > "$REPORT/paired_differences.txt"
  $PY -m rs_lightning.cli.report paired "$REPORT"/runs/{laplace,gaussian} --compare-noises \
    --radii ${RADII:-0 0.5 1 1.5 2} 2.5 3 \
    > "$REPORT/paired_laplace_gaussian.txt"
fi
