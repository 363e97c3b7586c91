#!/usr/bin/env bash
# The device call that makes the course's GPU reference (workshop_lessons/reference/<gpu>/course) by the measurement
# protocol (docs/measurement.md): installs the carried wheels (.whl/, into a folder named site-packages: NOTES),
# builds the ops, then `scripts/make_references.py runs` (a fresh process per notebook, its warm-up first, one run at
# a time, GPU_MAX_STEPS steps) into /tmp/ref/runs, or /tmp/ref/repeat with REPEAT=1, and brings back every run's
# small files (never model/). Runs finished in an earlier call (carried in .whl/ref) are skipped.
#   NOTEBOOKS="01_baseline 02_zero_stages" bash lab/scripts/device_references.sh
source lab/scripts/device_env.sh  # the carried wheels installed, the call's environment
t0=$SECONDS; timeout -k 5 200 python3 scripts/build_ops.py ${OPS:-FusedAdamBuilder CPUAdamBuilder}; echo "ops: $((SECONDS - t0)) s"
mkdir -p /tmp/ref && [ -d .whl/ref ] && cp -r .whl/ref/. /tmp/ref/
end=$((SECONDS + ${BUDGET:-440}))  # the whole call stays inside the device's 600 s
for nb in ${NOTEBOOKS:-01_baseline 02_zero_stages 03_cpu_offload}; do
  t0=$SECONDS
  timeout -k 5 $((end - SECONDS)) python3 scripts/make_references.py runs /tmp/ref ${REPEAT:+--repeat} --notebook "$nb" 2>&1 |
    grep -vE "it/s\]|s/it\]" | grep -E "tokens/s|Error|error|To fix|failed" | tail -20
  echo "$nb: $((SECONDS - t0)) s"
done
cd /tmp/ref && tar czf "$OUT/ref.tgz" --exclude=model --exclude=checkpoints \
  */*/results.json */*/train_log.csv */*/memory*.csv */*/run_config.json */*/ds_config.json 2>/dev/null
ls -la "$OUT"
