#!/usr/bin/env bash
# The "models that do not fit" reference runs behind docs/*/large-models (notebook 03c): each MODEL:EXPERIMENT
# once, random weights (the published shapes, no download), micro-batches of MAX_TOKENS tokens (default
# 8,192) with activation checkpointing if AC=true (default false), MAX_STEPS optimizer steps (default 8), no
# checkpoints. A run that fails (out of memory, refused by the workshop's check) keeps its
# message in OUT_DIR/<run>.log; a run with a results.json is skipped, so an interrupted call resumes.
# NPROC>1 runs each experiment on that many GPUs of this node (torchrun). `workshop report` ends it.
#   bash scripts/large_models.sh OUT_DIR MODEL:EXPERIMENT ...
#   bash scripts/large_models.sh large Qwen/Qwen3-4B:baseline Qwen/Qwen3-4B:stage2 Qwen/Qwen3-4B:stage3_offload
#   NPROC=2 bash scripts/large_models.sh large-x2 Qwen/Qwen3-8B:stage3 Qwen/Qwen3-8B:stage3_offload
set -uo pipefail
out=${1:?usage: bash scripts/large_models.sh OUT_DIR MODEL:EXPERIMENT ...}; shift
mkdir -p "$out"
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; free -g | head -2; df -h /tmp | tail -1
  ds_report 2>/dev/null | grep -E "cpu_adam|fused_adam"; } > "$out/machine.txt" 2>&1
nproc=${NPROC:-1}
launch=(workshop run)
[ "$nproc" -gt 1 ] && launch=(python3 -m torch.distributed.run --standalone --nproc_per_node "$nproc" -m workshop_lib.cli run)
for pair in "$@"; do
  model=${pair%%:*} exp=${pair##*:}
  dir="$out/$(basename "$model")-$exp"
  if [ -f "$dir/results.json" ]; then echo "skip $dir (done)"; continue; fi
  echo "== $model $exp on $nproc GPU(s)"
  SECONDS=0
  "${launch[@]}" "$exp" --model "$model" --random-weights --activation-checkpointing "${AC:-false}" \
    --max-tokens-per-micro-batch "${MAX_TOKENS:-8192}" --max-steps "${MAX_STEPS:-8}" --save-strategy no --save-model false \
    --output-dir "$dir" --overwrite > "$dir.log" 2>&1
  echo "   exit $? after ${SECONDS} s; last lines of $dir.log:"; grep -vE "it/s\]|s/it\]" "$dir.log" | tail -4
done
workshop report "$out" --out "$out/report" || true
