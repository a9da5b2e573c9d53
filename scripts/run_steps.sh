# Resumable train/certify steps, sourced (PY set first) by scripts/reproduce.sh and by every evidence
# generator under evidence/ (README.md there). One rule for every script:
#   - a training is finished when its folder holds train.done (last.ckpt is written every epoch, so it
#     does not mean "finished"); a killed training resumes from its last.ckpt;
#   - only finished trainings are certified; a finished certification (summary.json) is skipped, an
#     interrupted one resumes its rows;
#   - per-input rows are archived as certify.tsv + settings.json + summary.json (a few kB), so the reports
#     rebuild from the repository without the checkpoints;
#   - background jobs are waited for one by one, and a failed one fails the script.
# DRY_RUN=1 prints the train.py / certify.py commands ("+ ...", shell-quoted) without running them.
JOB_PIDS=()

run_step() {  # run_step COMMAND...: print it ("+ ...", shell-quoted), then run it unless DRY_RUN=1
  printf '+'
  printf ' %q' "$@"
  printf '\n'
  [ "${DRY_RUN:-0}" = 1 ] || "$@"
}

already_done() {  # already_done FILE WHAT: status 0, and "# WHAT (FILE): skipped", when FILE exists
  [ -f "$1" ] && echo "# $2 ($1): skipped"
}

train_run() {  # train_run DIR OVERRIDES...: train.py "OVERRIDES" into DIR, then DIR/train.done; skipped when done
  local dir=$1
  shift
  already_done "$dir/train.done" "training in $dir is finished" && return 0
  run_step "$PY" train.py "$@" "hydra.run.dir=$dir" ckpt_path=last || return  # (set -e is off inside `a && b`)
  [ "${DRY_RUN:-0}" = 1 ] || date -u +%Y-%m-%dT%H:%M:%SZ > "$dir/train.done"
}

require_trained() {  # require_trained TRAIN_DIR: status 1 with a one-line error unless its training finished
  if [ ! -f "$1/train.done" ] && [ "${DRY_RUN:-0}" != 1 ]; then
    echo "error: $(basename "$1") has not finished training ($1/train.done is missing); train it first" >&2
    return 1
  fi
}

soft_labels_run() {  # soft_labels_run TRAIN_DIR OUTPUT OVERRIDES...: soft_labels.py (CAT-RS's soft labels) from
  # TRAIN_DIR's finished training into OUTPUT; skipped when OUTPUT exists
  local train=$1 output=$2
  shift 2
  already_done "$output" "soft labels exist" && return 0
  require_trained "$train" || return
  run_step "$PY" soft_labels.py "checkpoint=$train/checkpoints/last.ckpt" "output=$output" "$@"
}

certify_run() {  # certify_run TRAIN_DIR OUT_DIR OVERRIDES...: certify.py on TRAIN_DIR's last.ckpt (CHECKPOINT=
  # another file name in TRAIN_DIR/checkpoints, e.g. epoch089.ckpt: the same weights) into OUT_DIR
  local train=$1 dir=$2
  shift 2
  require_trained "$train" || return
  already_done "$dir/summary.json" "certification in $dir is finished" && return 0
  run_step "$PY" certify.py "checkpoint=$train/checkpoints/${CHECKPOINT:-last.ckpt}" "$@" "output_dir=$dir" \
    "hydra.run.dir=$dir"
}

train() {  # train NAME OVERRIDES...: train_run into $OUT/train/NAME, one thread, seed 0, CSV log
  local name=$1; shift
  OMP_NUM_THREADS=1 train_run "$OUT/train/$name" "$@" seed=0 trainer.enable_progress_bar=false logger=csv
}

certify() {  # certify THREADS MODEL NAME OVERRIDES...: certify_run of $OUT/train/MODEL into
  # $OUT/certify/MODEL/NAME at n = 100,000, alpha = 0.001, seed 0, float Gaussian noise (the noise the
  # archived runs were certified with; lattice noise is certify.py's default on 8-bit data) (scripts may
  # define their own instead)
  local threads=$1 model=$2 name=$3; shift 3
  OMP_NUM_THREADS=$threads certify_run "$OUT/train/$model" "$OUT/certify/$model/$name" n=100000 alpha=0.001 \
    seed=0 noise=gaussian "$@"
}

archive_run() {  # archive_run RUN_DIR DEST: the run's per-input rows and settings (and its summary once
  # finished; an unfinished run's rows can be compared on the inputs they share), copied to DEST
  mkdir -p "$2"
  cp "$1"/{certify.tsv,settings.json} "$2/"
  if [ -f "$1/summary.json" ]; then cp "$1/summary.json" "$2/"; else rm -f "$2/summary.json"; fi
}

in_background() {  # in_background LOG FUNCTION ARGS...: run it in the background, output to LOG
  local log=$1
  shift
  "$@" > "$log" 2>&1 &
  JOB_PIDS+=($!)
}

wait_all() {  # wait for every job started by in_background; status 1 if any failed (a bare `wait` returns 0,
  # so a failed training went unnoticed and the next stage went on with whatever checkpoint it had left)
  local pid failed=0
  for pid in "${JOB_PIDS[@]}"; do wait "$pid" || failed=1; done
  JOB_PIDS=()
  [ "$failed" = 0 ] || echo "error: a background job failed; see its log in ${OUT:-the output folder}" >&2
  return "$failed"
}
