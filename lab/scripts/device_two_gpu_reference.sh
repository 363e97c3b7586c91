#!/usr/bin/env bash
# The device call that makes notebook 04's reference (workshop_lessons/reference/h200/x2-DATE, `multi_gpu.REFERENCE`)
# on a machine of 2 GPUs, by the measurement protocol: installs the carried wheels, builds FusedAdam, then
# `scripts/two_gpu_reference.py /tmp/x2 --rounds ROUNDS --no-ab` inside BUDGET seconds (finished runs, carried in
# .whl/x2, are skipped: a reference too long for one call is made in several), and copies every finished run's small
# files (never model/) to $OUT/x2 and, with REF set, into the tree at REF (for a later step of the same chain).
#   ROUNDS=3 BUDGET=900 REF=workshop_lessons/reference/h200/x2-2026-11-29 bash lab/scripts/device_two_gpu_reference.sh
source lab/scripts/device_env.sh  # the carried wheels installed, the call's environment
t0=$SECONDS; timeout -k 5 200 python3 scripts/build_ops.py FusedAdamBuilder; echo "ops: $((SECONDS - t0)) s"
mkdir -p /tmp/x2 && [ -d .whl/x2 ] && cp -r .whl/x2/. /tmp/x2/
t0=$SECONDS
WORKSHOP_RANDOM_WEIGHTS=1 timeout -k 5 "${BUDGET:-900}" python3 scripts/two_gpu_reference.py /tmp/x2 \
  --rounds "${ROUNDS:-3}" --no-ab 2>&1 | grep -vE "it/s\]|s/it\]" | grep -E "tokens/s|skip|Error|error|To fix|failed" | tail -30
echo "reference: $((SECONDS - t0)) s"
(cd /tmp/x2 && find . -name results.json -printf '%h\n' | while read -r run; do
  mkdir -p "$OUT/x2/$run" && find "$run" -maxdepth 1 -type f -size -2M -exec cp {} "$OUT/x2/$run/" \;
done)
[ -n "$REF" ] && mkdir -p "$REF" && cp -r "$OUT/x2/." "$REF/"
python3 -c 'import json, pathlib
for f in sorted(pathlib.Path("'"$OUT"'/x2").glob("**/results.json")):
    r = json.loads(f.read_text())
    print(f.parent.relative_to("'"$OUT"'/x2"), round(r["steady_train_tokens_per_second"]), round(r["wall_seconds"]),
          round(r.get("gpu_peak_allocated_mib") or 0), sep="\t")'
