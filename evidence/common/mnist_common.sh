# Shared settings and helpers of the MNIST evidence scripts (sourced by evidence/mnist_structured's
# mnist_comparison.sh and acr_gaming_comparison.sh, so both use one schedule and one certification protocol,
# and by evidence/denoised_smoothing/denoised_smoothing.sh for the same schedule).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/run_steps.sh
PY=${PY:-.venv/bin/python}
DATA=${RS_SHARED_DATA:-$(cd .. && pwd)/shared/data}/mnist.npz
OUT=${OUT:-outputs/mnist_comparison}
EPOCHS=${EPOCHS:-27}
# 200 test images, one protocol; float Gaussian noise, as archived (lattice noise is the default on 8-bit data)
CERTIFY=${CERTIFY:-"n0=100 n=10000 alpha=0.001 skip=50 batch_size=400 seed=0 noise=gaussian"}
# The reference's 90-epoch MNIST schedule scaled by 0.3 with its structure kept: 27 short epochs, each a fresh
# random ninth of the training set (trainer.limit_train_batches, 26 of 235 batches; 3 passes in all, as 3 full
# epochs would be), StepLR(9) = 30 x 0.3, each experiment's own scheduler_epoch_offset (the legacy timing:
# drops take effect from epochs 10 and 19, reference 31 and 61), 10-epoch warm-ups -> 3 (WARMUP), MACER's
# lambda on with the first drop (its experiment's deferred_epochs=lr_drop). The same schedule for every method.
STEP=${STEP:-9}
WARMUP=${WARMUP:-3}
LIMIT=${LIMIT:-0.1111}
SEED=${SEED:-0}   # the training seed; SEED=1 ... trains another seed of every run, named <run>_seed<SEED>
SUFFIX=$([ "$SEED" = 0 ] || echo "_seed$SEED")
COMMON="data=npz data.path=$DATA model=lenet optim.max_epochs=$EPOCHS optim.scheduler.step_size=$STEP \
  trainer.limit_train_batches=$LIMIT seed=$SEED \
  trainer.enable_progress_bar=false logger=csv ${EXTRA:-}"   # EXTRA: more overrides (e.g. for a dry run)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT"
TIMES="$OUT/train_times.tsv"
[ -f "$TIMES" ] || printf 'run\tepochs\tseconds\tthreads\n' > "$TIMES"

selected() {  # selected NAME: true unless ONLY (a space-separated list of run names) leaves NAME out
  [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]
}

train() {  # train NAME OVERRIDES...: train_run (scripts/run_steps.sh) into $OUT/train/NAME; the wall-clock of a
  # run that trained is appended to $TIMES
  local base=$1 name=$1$SUFFIX; shift
  selected "$base" || selected "$name" || return 0
  local dir="$OUT/train/$name" start
  if [ -f "$dir/train.done" ]; then echo "skip training $name (done)"; return; fi
  start=$(date +%s)
  train_run "$dir" "$@" $COMMON || return
  printf '%s\t%s\t%s\t%s\n' "$name" "$EPOCHS" "$(( $(date +%s) - start ))" "$OMP_NUM_THREADS" >> "$TIMES"
}

ARCHIVE=${ARCHIVE:-docs/results/mnist_structured/runs}   # per-input results kept in the repo (see certify)

certify() {  # certify NAME: certify_run (only a finished training; resumes) on the common protocol, then
  # archive_run to $ARCHIVE/NAME, so the reports and paired CIs can be rebuilt from the repo without the checkpoints
  selected "$1" || return 0
  certify_run "$OUT/train/$1" "$OUT/certify/$1" $CERTIFY || return
  archive_run "$OUT/certify/$1" "$ARCHIVE/$1"
}
