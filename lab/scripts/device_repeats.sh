#!/usr/bin/env bash
# The device call behind the measurement protocol's repeat tables (docs/measurement.md): installs the carried
# wheels (.whl/: deepspeed, datasets and their needs, into a folder named site-packages: NOTES), builds fused_adam,
# runs scripts/repeats.py on RUNS, REPEATS times each (adding to earlier repeats in .whl/rep), and brings back
# every run's results.json, train_log.csv and configuration.txt.
#   RUNS="stage2:40 stage3:40" REPEATS=3 bash lab/scripts/device_repeats.sh
source lab/scripts/device_env.sh  # the carried wheels installed, the call's environment
t0=$SECONDS; timeout -k 5 150 python3 scripts/build_ops.py FusedAdamBuilder ${OPS:-}; echo "ops: $((SECONDS - t0)) s"
mkdir -p /tmp/rep
[ -d .whl/rep ] && cp -r .whl/rep/. /tmp/rep/  # earlier repeats: more add to them
t0=$SECONDS
timeout -k 5 "${BUDGET:-420}" python3 scripts/repeats.py /tmp/rep --runs $RUNS --repeats "${REPEATS:-3}" \
  -- --random-weights 2>&1 | grep -vE "it/s\]|s/it\]" | grep -E "round|tokens/s|Error|error|To fix" | tail -60
echo "runs: $((SECONDS - t0)) s"
cd /tmp/rep && tar czf "$OUT/runs.tgz" */results.json */train_log.csv */configuration.txt; ls -la "$OUT"
