#!/usr/bin/env bash
# Reduced-schedule comparison of the six training methods on full MNIST (LeNet), sigma = 0.25 and 0.5,
# every model certified on one protocol. Produces the numbers in docs/results.md:
#   bash evidence/mnist_structured/mnist_comparison.sh
# Each method runs its published MNIST experiment (conf/experiment/<method>_mnist_sigma<..>.yaml) on the
# reference's 90-epoch schedule scaled by 0.3 with its structure kept (mnist_common.sh: 27 short epochs of a
# ninth of the data, StepLR(9), the experiment's own LR timing): MACER's lambda switches on with the first LR
# drop (its experiment's deferred_epochs=lr_drop), the 10-epoch warm-ups last 3 (WARMUP).
# The two sigmas run as two single-threaded processes side by side (2 CPU cores); STAGE=train|soft|catrs|
# certify with SIGMAS="025" runs one stage for one sigma, ONLY="catrs_s025 smoothmix_s050" only the runs named
# (in train, catrs and certify; also in acr_gaming_comparison.sh). Finished runs are skipped, so a rerun resumes.
# Only finished trainings (train.done) are certified, and a failed background job fails the script.
source "$(dirname "$0")/../common/mnist_common.sh"
SOFT_LABEL_SAMPLES=${SOFT_LABEL_SAMPLES:-32}   # reference: 10,000 draws per training image
SOFT="$OUT/soft_labels_gaussian_s025$SUFFIX.npy"   # SEED=1: the whole recipe again, its teacher too

stage() {  # stage STAGE SIGMA
  local s=$2
  case $1 in
    train)
      train "gaussian_s$s" experiment="cohen_mnist_sigma$s"
      train "consistency_s$s" experiment="consistency_mnist_sigma$s"
      train "macer_s$s" experiment="macer_mnist_sigma$s"
      train "smoothmix_s$s" experiment="smoothmix_mnist_sigma$s" method.warmup="$WARMUP"
      train "smoothadv_s$s" experiment="smoothadv_mnist_sigma$s" method.warmup="$WARMUP" ;;
    soft)  # CAT-RS's soft labels: a Gaussian sigma = 0.25 model on the training set, used for every sigma
      soft_labels_run "$OUT/train/gaussian_s025$SUFFIX" "$SOFT" num_samples="$SOFT_LABEL_SAMPLES" batch_size=3200 \
        hydra.run.dir="$OUT/soft_labels" ;;
    catrs)
      train "catrs_s$s" experiment="catrs_mnist_sigma$s" method.soft_labels="$SOFT" ;;
    certify)
      for done in "$OUT"/train/*_s"$s$SUFFIX"/train.done; do  # finished trainings of this seed only
        if [ -f "$done" ]; then certify "$(basename "$(dirname "$done")")"; fi
      done ;;
  esac
}

if [ -n "${STAGE:-}" ]; then
  for s in ${SIGMAS:-025 050}; do stage "$STAGE" "$s"; done
  exit 0
fi
for st in train catrs certify; do
  [ "$st" = catrs ] && stage soft 025
  in_background "$OUT/log_${st}_s025.txt" stage "$st" 025
  in_background "$OUT/log_${st}_s050.txt" stage "$st" 050
  wait_all
done
