#!/usr/bin/env bash
# The single-GPU benchmark behind the README's reference table: baseline, stage2, stage2_offload and
# stage3_offload for each MODEL:RECIPE pair, with random weights (real shapes, no download), one epoch of
# the recipe's 500 questions, then `workshop report` over all of them.
#   bash scripts/gpu_benchmark.sh [OUT_DIR] [MODEL:RECIPE ...]
#   bash scripts/gpu_benchmark.sh bench Qwen/Qwen3-0.6B:default bigscience/bloom-560m:classic
set -euo pipefail
out=${1:-bench}; shift || true
pairs=("${@:-Qwen/Qwen3-0.6B:default bigscience/bloom-560m:classic}")
experiments=${EXPERIMENTS:-"baseline stage2 stage2_offload stage3_offload"}
for pair in ${pairs[@]}; do
  model=${pair%%:*} recipe=${pair##*:}
  for exp in $experiments; do
    dir="$out/$(basename "$model")-$recipe-$exp"
    if [ -f "$dir/results.json" ]; then echo "skip $dir (done)"; continue; fi
    workshop run "$exp" --model "$model" --recipe "$recipe" --random-weights --epochs "${EPOCHS:-1}" \
      --output-dir "$dir" 2>&1 | grep -vE "it/s\]|s/it\]" || echo "FAILED: $exp $model $recipe"
  done
done
workshop report "$out" --out "$out/report"
