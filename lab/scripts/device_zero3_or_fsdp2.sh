#!/usr/bin/env bash
# The device call that makes notebook 03e's reference (workshop_lessons/reference/h200/zero3_or_fsdp2) on a machine of
# 2 GPUs: installs the carried wheels, builds FusedAdam, then `scripts/zero3_or_fsdp2_reference.py /tmp/z3f FOLDERS`
# inside BUDGET seconds and brings back every run's small files (never model/). Runs finished in an earlier call
# (carried in .whl/z3f) are skipped, so a reference too long for one call is made in several.
#   FOLDERS="runs repeat" BUDGET=460 bash lab/scripts/device_zero3_or_fsdp2.sh   # kind nvidia-h200-x2, carrying .whl
source lab/scripts/device_env.sh  # the carried wheels installed, the call's environment
t0=$SECONDS; timeout -k 5 200 python3 scripts/build_ops.py FusedAdamBuilder; echo "ops: $((SECONDS - t0)) s"
mkdir -p /tmp/z3f && [ -d .whl/z3f ] && cp -r .whl/z3f/. /tmp/z3f/
t0=$SECONDS
WORKSHOP_RANDOM_WEIGHTS=1 timeout -k 5 "${BUDGET:-460}" python3 scripts/zero3_or_fsdp2_reference.py /tmp/z3f \
  ${FOLDERS:-runs repeat} 2>&1 | grep -vE "it/s\]|s/it\]" | grep -E "tokens/s|made|Error|error|To fix|failed" | tail -30
echo "reference: $((SECONDS - t0)) s"
python3 -c 'import json, pathlib, sys
for f in sorted(pathlib.Path("/tmp/z3f").glob("**/results.json")):
    r = json.loads(f.read_text())
    print(f.parent.relative_to("/tmp/z3f"), round(r.get("steady_train_tokens_per_second") or 0),
          round(r.get("gpu_states_allocated_mib") or 0), round(r.get("gpu_peak_allocated_mib") or 0), sep="\t")'
cd /tmp/z3f && tar czf "$OUT/z3f.tgz" --exclude=model --exclude=checkpoints */*/results.json */*/*/results.json \
  */*/train_log.csv */*/*/train_log.csv */*/memory*.csv */*/run_config.json */*/ds_config.json */*/*/comms.json \
  */*/*/run_config.json 2>/dev/null
ls -la "$OUT"
