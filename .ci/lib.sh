# .ci/run's clock, sourced: CI_TIME_BUDGET_S (default 1800 s: 30 minutes, the bound for a machine that never built
# DeepSpeed's ops; 20 is the goal where they were built) for the whole run, each phase's time printed.
#   took NAME        "CI: phase NAME took N s" since the previous phase
#   within CMD...    CMD, stopped at the end of the budget; being stopped fails CI, as any other failure
#   fail MESSAGE     "CI: FAILED: MESSAGE", exit 1
t0=$SECONDS phase_t0=$SECONDS
budget=${CI_TIME_BUDGET_S:-1800}
left() { echo $((budget - (SECONDS - t0))); }
took() {
  echo "CI: phase $1 took $((SECONDS - phase_t0)) s (CI at $((SECONDS - t0)) s of its ${budget} s)"
  phase_t0=$SECONDS
}
fail() {
  echo "CI: FAILED: $*"
  exit 1
}
within() {
  [ "$(left)" -gt 0 ] || fail "the time budget (${budget} s) was spent before: $*"
  local rc=0
  timeout -k 10 "$(left)" "$@" || rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then fail "stopped at the end of the time budget (${budget} s): $*"; fi
  return $rc
}
# `skipped LOG`: fails CI when a pytest summary line in LOG counts a skipped test (their reasons printed first)
skipped() {
  if grep -E '[0-9]+ (passed|failed).* in [0-9.]+s' "$1" | grep -qE '[0-9]+ skipped'; then
    grep -E "SKIPPED \[" "$1" || true
    fail "tests were skipped (above, with their reasons): CI runs every test"
  fi
}
