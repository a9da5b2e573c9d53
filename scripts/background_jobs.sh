# Sourced by the evidence scripts that run two jobs at a time in the background on 2 cores.
JOB_PIDS=()

in_background() {  # in_background LOG FUNCTION ARGS...: run it in the background, output to LOG
  local log=$1; shift
  "$@" > "$log" 2>&1 &
  JOB_PIDS+=($!)
}

wait_all() {  # wait for every job started by in_background; status 1 if any failed (a bare `wait` returns 0,
  # so a failed training went unnoticed and the next stage went on with whatever checkpoint it had left)
  local pid failed=0
  for pid in "${JOB_PIDS[@]}"; do wait "$pid" || failed=1; done
  JOB_PIDS=()
  [ "$failed" = 0 ] || echo "error: a background job failed; see its log in $OUT" >&2
  return "$failed"
}
