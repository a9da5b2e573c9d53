#!/usr/bin/env bash
# Reduced-schedule comparison of the six training methods on full MNIST (LeNet), sigma = 0.25 and 0.5,
# every model certified on one protocol. Produces the numbers in docs/results.md:
#   bash scripts/mnist_comparison.sh
# Each method runs its published MNIST experiment (conf/experiment/<method>_mnist_sigma<..>.yaml) with the
# schedule cut to EPOCHS epochs at constant lr 0.01 and warm-ups/deferral compressed to the first epoch.
# The two sigmas run as two single-threaded processes side by side (2 CPU cores); STAGE=train|soft|catrs|
# certify with SIGMAS="025" runs one stage for one sigma. Finished runs are skipped, so a rerun resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}/mnist.npz
OUT=${OUT:-outputs/mnist_comparison}
EPOCHS=${EPOCHS:-3}
SOFT_LABEL_SAMPLES=${SOFT_LABEL_SAMPLES:-32}   # reference: 10,000 draws per training image
CERTIFY=${CERTIFY:-"n0=100 n=10000 alpha=0.001 skip=50 batch_size=400 seed=0"}   # 200 test images, one protocol
COMMON="data=npz data.path=$DATA model=lenet optim.max_epochs=$EPOCHS optim.scheduler=null seed=0 \
  trainer.enable_progress_bar=false logger=csv ${EXTRA:-}"   # EXTRA: more overrides (e.g. for a dry run)
SOFT="$OUT/soft_labels_gaussian_s025.npy"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT"
TIMES="$OUT/train_times.tsv"
[ -f "$TIMES" ] || printf 'run\tepochs\tseconds\tthreads\n' > "$TIMES"

train() {  # train NAME EXPERIMENT [overrides...]
  local name=$1 experiment=$2; shift 2
  local dir="$OUT/train/$name"
  if [ -f "$dir/checkpoints/last.ckpt" ]; then echo "skip training $name (done)"; return; fi
  rm -rf "$dir"
  local start=$(date +%s)
  $PY train.py experiment="$experiment" $COMMON "$@" hydra.run.dir="$dir"
  printf '%s\t%s\t%s\t%s\n' "$name" "$EPOCHS" "$(( $(date +%s) - start ))" "$OMP_NUM_THREADS" >> "$TIMES"
}

stage() {  # stage STAGE SIGMA
  local s=$2
  case $1 in
    train)
      train "gaussian_s$s" "cohen_mnist_sigma$s"
      train "consistency_s$s" "consistency_mnist_sigma$s"
      train "macer_s$s" "macer_mnist_sigma$s" method.deferred_epochs=1
      train "smoothmix_s$s" "smoothmix_mnist_sigma$s" method.warmup=1
      train "smoothadv_s$s" "smoothadv_mnist_sigma$s" method.warmup=1 ;;
    soft)  # CAT-RS's soft labels: a Gaussian sigma = 0.25 model on the training set, used for every sigma
      [ -f "$SOFT" ] || $PY soft_labels.py checkpoint="$OUT/train/gaussian_s025/checkpoints/last.ckpt" \
        output="$SOFT" num_samples="$SOFT_LABEL_SAMPLES" batch_size=3200 hydra.run.dir="$OUT/soft_labels" ;;
    catrs)
      train "catrs_s$s" "catrs_mnist_sigma$s" method.soft_labels="$SOFT" ;;
    certify)
      for dir in "$OUT"/train/*_s"$s"/; do
        local name=$(basename "$dir")
        $PY certify.py checkpoint="$dir/checkpoints/last.ckpt" $CERTIFY output_dir="$OUT/certify/$name" \
          hydra.run.dir="$OUT/certify/$name"
      done ;;
  esac
}

if [ -n "${STAGE:-}" ]; then
  for s in ${SIGMAS:-025 050}; do stage "$STAGE" "$s"; done
  exit 0
fi
for st in train catrs certify; do
  [ "$st" = catrs ] && stage soft 025
  stage "$st" 025 > "$OUT/log_${st}_s025.txt" 2>&1 &
  stage "$st" 050 > "$OUT/log_${st}_s050.txt" 2>&1 &
  wait
done
