#!/usr/bin/env bash
# Core binding as an A/B for the offload experiment (issue 26): stage2_offload through DeepSpeed's launcher without,
# with, and again without --bind_cores_to_rank (numactl -C <the rank's cores> -m <its NUMA node>), each a process
# of its own, on one GPU, in one call. Writes OUT/{plain,bound,plain2}/ (results.json, train_log.csv),
# OUT/{name}.log and OUT/lscpu.txt (the machine's cores and NUMA nodes).
#   WORKSHOP_RANDOM_WEIGHTS=1 bash lab/scripts/core_binding_ab.sh OUT [workshop run options]
set -euo pipefail
out=${1:?usage: lab/scripts/core_binding_ab.sh OUT [workshop run options]}; shift
mkdir -p "$out"
lscpu | grep -i "numa\|^CPU(s)\|Thread\|Core" > "$out/lscpu.txt"
for name in plain bound plain2; do
  bind=(); [ "$name" = bound ] && bind=(--bind_cores_to_rank)
  run=/tmp/core_binding_$name
  timeout -k 5 150 python3 -m deepspeed.launcher.runner --num_gpus 1 --no_local_rank "${bind[@]}" --master_port 29611 \
    --module workshop_lib.cli run stage2_offload --max-steps 24 --save-strategy no --save-model false \
    --output-dir "$run" --overwrite "$@" > "$out/$name.log" 2>&1 || echo "$name: exit $? (see $out/$name.log)"
  mkdir -p "$out/$name" && cp "$run/results.json" "$run/train_log.csv" "$out/$name/"
done
