#!/usr/bin/env bash
# ZeRO-3's parameter prefetch, A/B on a machine with 2 GPUs (lab/findings/h200/zero3-prefetch). HF's "auto" sets
# stage3_prefetch_bucket_size to 0.9 x hidden² (943,718 elements for Qwen3-0.6B, less than one of its matrices);
# the other arm sets DeepSpeed's own default, 5e7. Alternating on 2 GPUs (recipe, prefetch, prefetch, recipe), then
# one run of each on 1 GPU, notebook 04's options (`multi_gpu.run_options`), fresh torchrun processes.
#   WORKSHOP_RANDOM_WEIGHTS=1 bash lab/scripts/zero3_prefetch_ab.sh OUT
# (Made before the workshop's recipe took 5e7: to rerun it now, give the recipe arm
#  --ds-config zero_optimization.stage3_prefetch_bucket_size=auto.)
set -uo pipefail
OUT=$1; mkdir -p "$OUT/logs"
ARGS=$(python3 -c 'import workshop_lessons as L; from workshop_lessons import multi_gpu as m
print(" ".join(m.run_options(True, L.notebook_run_options(), True)))' | tail -1)
PF="--ds-config zero_optimization.stage3_prefetch_bucket_size=50000000"
one() {  # name nproc extra options...
  local name=$1 n=$2; shift 2
  python -m torch.distributed.run --standalone --nproc_per_node "$n" -m workshop_lib.cli run stage3 $ARGS "$@" \
    --output-dir "$OUT/runs/$name" 2>&1 | tee "$OUT/logs/$name.log" | tail -2
}
one x2-recipe-1 2; one x2-prefetch-1 2 $PF; one x2-prefetch-2 2 $PF; one x2-recipe-2 2
CUDA_VISIBLE_DEVICES=0 one x1-recipe-alone 1
CUDA_VISIBLE_DEVICES=0 one x1-prefetch-alone 1 $PF
