#!/usr/bin/env bash
# Evidence for lattice noise in training: does it matter whether a model is certified under the noise it was
# trained with? Cohen et al.'s Gaussian augmentation on MNIST (LeNet, sigma = 0.25, the full 90-epoch recipe
# cohen_mnist_sigma025, seed 0), trained once with float Gaussian noise and once with lattice Gaussian noise
# (Voracek & Hein, ICLR 2023: offsets j/255 with the discretized Gaussian pmf); each model is then certified
# under both noises on the same 200 test inputs, and the report pairs them by the noise they were certified
# and trained with.
#   OUT=/work/runs/lattice_pair bash evidence/lattice_noise/lattice_noise.sh
#   STAGE=train|certify|report ...                                                  # one stage
# Certification: n = 10,000 (a tenth of Cohen's 100,000, so the radius cap is 0.80 rather than 0.93 at
# sigma = 0.25), n0 = 100, alpha = 0.001, fp32, one thread per job, MNIST test idx 0, 50, ... (200 inputs).
# The two trainings run side by side, one thread each; so do a model's two certifications. Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/run_steps.sh
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}/mnist.npz
OUT=${OUT:-outputs/lattice_noise}
REPORT=${REPORT:-docs/results/lattice_noise}
STAGE=${STAGE:-all}
NOISES="gaussian gaussian_lattice"
mkdir -p "$OUT"

train_with() {  # train_with NOISE: the recipe with NOISE in training, into $OUT/NOISE/train
  OMP_NUM_THREADS=1 train_run "$OUT/$1/train" experiment=cohen_mnist_sigma025 data=npz data.path="$DATA" \
    noise="$1" seed=0 trainer.enable_progress_bar=false logger=csv
}

certify_with() {  # certify_with TRAINED CERTIFIED: the model trained with TRAINED, certified under CERTIFIED
  OMP_NUM_THREADS=1 certify_run "$OUT/$1/train" "$OUT/$1/certify_$2" data=npz data.path="$DATA" skip=50 \
    n=10000 n0=100 alpha=0.001 batch_size=400 seed=0 noise="$2"
}

if [ "$STAGE" = all ] || [ "$STAGE" = train ]; then
  for noise in $NOISES; do in_background "$OUT/train_$noise.log" train_with "$noise"; done
  wait_all
fi
if [ "$STAGE" = all ] || [ "$STAGE" = certify ]; then
  for trained in $NOISES; do
    for certified in $NOISES; do
      in_background "$OUT/certify_${trained}_under_$certified.log" certify_with "$trained" "$certified"
    done
    wait_all
  done
fi
if [ "$STAGE" = all ] || [ "$STAGE" = report ]; then
  # from the archived rows (tests/test_archived_evidence.py rebuilds the report from them); the runs differ in
  # noise on purpose, so --compare-noises (same inputs, protocol and L2 ball)
  runs=()
  for trained in $NOISES; do
    for certified in $NOISES; do
      run="$REPORT/runs/trained_${trained}_certified_$certified"
      archive_run "$OUT/$trained/certify_$certified" "$run"
      runs+=("$run")
    done
  done
  $PY -m rs_lightning.cli.report "${runs[@]}" --compare-noises --overwrite --out "$REPORT"
  # the same model under the two noises (does certifying on the lattice cost anything?) ...
  $PY -m rs_lightning.cli.report paired "$REPORT"/runs/trained_gaussian_certified_{gaussian,gaussian_lattice} \
    --compare-noises --radii ${RADII:-0 0.25 0.5 0.75} > "$REPORT/paired_certification_noise.txt"
  # ... and the two trainings under lattice noise (does training with the certified noise matter?)
  $PY -m rs_lightning.cli.report paired \
    "$REPORT"/runs/trained_{gaussian_lattice,gaussian}_certified_gaussian_lattice \
    --compare-noises --radii ${RADII:-0 0.25 0.5 0.75} > "$REPORT/paired_training_noise.txt"
fi
