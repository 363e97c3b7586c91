#!/usr/bin/env bash
# The single-GPU benchmark behind docs/h100/: baseline, stage2, stage2_offload and stage3_offload for each
# MODEL:RECIPE pair, random weights (the real shapes, no download), 16 optimizer steps of the recipe
# (16 x 16 = 256 SQuAD questions; MAX_STEPS to change), then `workshop report` over every finished run.
# A run whose results.json exists is skipped, so an interrupted benchmark resumes.
#   bash scripts/gpu_benchmark.sh [OUT_DIR] [MODEL:RECIPE ...]
#   bash scripts/gpu_benchmark.sh bench Qwen/Qwen3-0.6B:default bigscience/bloom-560m:classic
set -uo pipefail
out=${1:-bench}; shift || true
pairs=("$@")
[ ${#pairs[@]} -gt 0 ] || pairs=(Qwen/Qwen3-0.6B:default Qwen/Qwen3-0.6B:classic
                                 bigscience/bloom-560m:default bigscience/bloom-560m:classic)
experiments=${EXPERIMENTS:-"baseline stage2 stage2_offload stage3_offload"}
for pair in "${pairs[@]}"; do
  model=${pair%%:*} recipe=${pair##*:}
  for exp in $experiments; do
    dir="$out/$(basename "$model")-$recipe-$exp"
    if [ -f "$dir/results.json" ]; then echo "skip $dir (done)"; continue; fi
    workshop run "$exp" --model "$model" --recipe "$recipe" --random-weights --max-steps "${MAX_STEPS:-16}" \
      --save-strategy no \
      --output-dir "$dir" 2>&1 | grep -vE "it/s\]|s/it\]" || echo "FAILED: $exp $model $recipe"
  done
done
workshop report "$out" --out "$out/report"
