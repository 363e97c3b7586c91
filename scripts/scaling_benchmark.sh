#!/usr/bin/env bash
# The multi-GPU benchmark behind docs/h200/: ZeRO-2 and ZeRO-3 on 1, 2, 4 and 8 GPUs of one node, the
# default recipe (micro-batches of up to 32,768 tokens per GPU, one per optimizer step: weak scaling), Qwen3-0.6B
# with random weights (the real shapes, no download), MAX_STEPS optimizer steps (default 24, the warm-up
# found in each run's log), then `workshop report`, whose scaling.md gives steady-state tokens/s per GPU, scaling efficiency
# and the peak memory of every rank.
# Each rank is started as slurm/multi_gpu.slurm starts it (torchrun, one process per GPU), without SLURM.
# At each count above 1, scripts/comm_benchmark.py times ZeRO-2's collectives at the model's sizes (comm-<N>gpu.csv):
# what communication could cost a step, beside what the scaling efficiency says it lost.
# A run whose results.json exists is skipped, so an interrupted benchmark resumes (each device call: 10 minutes).
# MODEL (default Qwen/Qwen3-0.6B), AC=true (activation checkpointing), MAX_TOKENS (tokens per micro-batch and
# GPU; the recipe's 32,768 by default) and EXTRA (more `workshop run` options, e.g. "--reduce-bucket-size 50000000"
# for an A/B in another OUT_DIR) change every run.
#   bash scripts/scaling_benchmark.sh [OUT_DIR] [GPU COUNT ...]
#   EXPERIMENTS=stage2 bash scripts/scaling_benchmark.sh bench-scaling 1 2 4     # on a 4-GPU machine
#   EXPERIMENTS="stage2 stage3 stage3_offload" bash scripts/scaling_benchmark.sh bench 1 2 4 8
#   MODEL=Qwen/Qwen3-8B AC=true MAX_TOKENS=8192 EXPERIMENTS="stage3 stage3_offload" bash scripts/scaling_benchmark.sh bench-8b 1 2 4 8
set -uo pipefail
out=${1:-bench-scaling}; shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 2 4 8)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
for exp in ${EXPERIMENTS:-stage2 stage3}; do
  for n in "${counts[@]}"; do
    dir="$out/$exp-${n}gpu"
    if [ "$n" -gt "$gpus" ]; then echo "skip $dir: this machine has $gpus GPU(s)"; continue; fi
    if [ -f "$dir/results.json" ]; then echo "skip $dir (done)"; continue; fi
    python -m torch.distributed.run --standalone --nproc_per_node "$n" -m workshop_lib.cli run "$exp" \
      --model "${MODEL:-Qwen/Qwen3-0.6B}" --random-weights --save-strategy no --max-steps "${MAX_STEPS:-24}" \
      ${AC:+--activation-checkpointing "$AC"} ${MAX_TOKENS:+--max-tokens-per-micro-batch "$MAX_TOKENS"} ${EXTRA:-} \
      --output-dir "$dir" 2>&1 | grep -vE "it/s\]|s/it\]" || echo "FAILED: $dir"
  done
done
for n in "${counts[@]}"; do
  if [ "$n" -gt 1 ] && [ "$n" -le "$gpus" ] && [ ! -f "$out/comm-${n}gpu.csv" ]; then
    python -m torch.distributed.run --standalone --nproc_per_node "$n" scripts/comm_benchmark.py \
      --model "${MODEL:-Qwen/Qwen3-0.6B}" --out "$out/comm-${n}gpu.csv" || echo "FAILED: comm benchmark on $n GPUs"
  fi
done
workshop report "$out" --out "$out/report"
