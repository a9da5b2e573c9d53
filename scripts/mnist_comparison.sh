#!/usr/bin/env bash
# Reduced-schedule comparison of the six training methods on full MNIST (LeNet), sigma = 0.25 and 0.5,
# every model certified on one protocol. Produces the numbers in docs/results.md:
#   bash scripts/mnist_comparison.sh            (EPOCHS=3 by default; ~2 h on 2 CPU cores)
# Each method runs its published MNIST experiment (conf/experiment/<method>_mnist_sigma<..>.yaml) with the
# schedule cut to EPOCHS epochs at constant lr 0.01 and warm-ups/deferral compressed to the first epoch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}/mnist.npz
OUT=${OUT:-outputs/mnist_comparison}
EPOCHS=${EPOCHS:-3}
SOFT_LABEL_SAMPLES=${SOFT_LABEL_SAMPLES:-100}
CERTIFY=${CERTIFY:-"n0=100 n=10000 alpha=0.001 skip=50 batch_size=400 seed=0"}   # 200 test images, one protocol
COMMON="data=npz data.path=$DATA model=lenet optim.max_epochs=$EPOCHS optim.scheduler=null seed=0 \
  trainer.enable_progress_bar=false logger=csv ${EXTRA:-}"   # EXTRA: more overrides (e.g. for a dry run)
mkdir -p "$OUT"
TIMES="$OUT/train_times.tsv"
[ -f "$TIMES" ] || printf 'run\tepochs\tseconds\n' > "$TIMES"

train() {  # train NAME EXPERIMENT [overrides...]
  local name=$1 experiment=$2; shift 2
  local dir="$OUT/train/$name"
  if [ -f "$dir/checkpoints/last.ckpt" ]; then echo "skip training $name (done)"; return; fi
  local start=$(date +%s)
  $PY train.py experiment="$experiment" $COMMON "$@" hydra.run.dir="$dir"
  printf '%s\t%s\t%s\n' "$name" "$EPOCHS" "$(( $(date +%s) - start ))" >> "$TIMES"
}

for s in 025 050; do
  train "gaussian_s$s" "cohen_mnist_sigma$s"
  train "consistency_s$s" "consistency_mnist_sigma$s"
  train "macer_s$s" "macer_mnist_sigma$s" method.deferred_epochs=1
  train "smoothmix_s$s" "smoothmix_mnist_sigma$s" method.warmup=1
  train "smoothadv_s$s" "smoothadv_mnist_sigma$s" method.warmup=1
done

# CAT-RS needs the soft labels of a Gaussian sigma = 0.25 model on the training set (used for every sigma).
SOFT="$OUT/soft_labels_gaussian_s025.npy"
[ -f "$SOFT" ] || $PY soft_labels.py checkpoint="$OUT/train/gaussian_s025/checkpoints/last.ckpt" \
  output="$SOFT" num_samples="$SOFT_LABEL_SAMPLES" hydra.run.dir="$OUT/soft_labels"
for s in 025 050; do
  train "catrs_s$s" "catrs_mnist_sigma$s" method.soft_labels="$SOFT"
done

for dir in "$OUT"/train/*/; do
  name=$(basename "$dir")
  $PY certify.py checkpoint="$dir/checkpoints/last.ckpt" $CERTIFY output_dir="$OUT/certify/$name" \
    hydra.run.dir="$OUT/certify/$name"
done
