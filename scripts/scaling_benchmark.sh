#!/usr/bin/env bash
# The multi-GPU benchmark behind docs/h200/: ZeRO-2 and ZeRO-3 on 1, 2 and 4 GPUs of one node, Qwen3-0.6B
# with random weights (the real shapes, no download), 16 optimizer steps of micro-batch 4 x accumulation 4
# per GPU (global batch 16 x GPUs; 1,024 SQuAD questions so 4 GPUs stay inside one epoch), then
# `workshop report`, whose scaling.md gives samples/s per GPU and peak memory per GPU.
# Each rank is started as slurm/multi_gpu.slurm starts it (torchrun, one process per GPU), without SLURM.
# A run whose results.json exists is skipped, so an interrupted benchmark resumes.
#   bash scripts/scaling_benchmark.sh [OUT_DIR] [GPU COUNT ...]
#   bash scripts/scaling_benchmark.sh bench-scaling 1 2          # on a 2-GPU machine
set -uo pipefail
out=${1:-bench-scaling}; shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 2 4)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
for exp in ${EXPERIMENTS:-stage2 stage3}; do
  for n in "${counts[@]}"; do
    dir="$out/$exp-${n}gpu"
    if [ "$n" -gt "$gpus" ]; then echo "skip $dir: this machine has $gpus GPU(s)"; continue; fi
    if [ -f "$dir/results.json" ]; then echo "skip $dir (done)"; continue; fi
    python -m torch.distributed.run --standalone --nproc_per_node "$n" -m workshop_lib.cli run "$exp" \
      --model "${MODEL:-Qwen/Qwen3-0.6B}" --random-weights --max-steps "${MAX_STEPS:-16}" \
      --num-train-samples 1024 --output-dir "$dir" 2>&1 | grep -vE "it/s\]|s/it\]" || echo "FAILED: $dir"
  done
done
workshop report "$out" --out "$out/report"
