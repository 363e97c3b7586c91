#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv, fine-tune on the bundled real SQuAD data with ZeRO-2 and
# CPU optimizer offload, and write the exercise table and plots.
# With a GPU: Qwen/Qwen3-0.6B (from the hub or its cache; add --random-weights where the hub is unreachable).
# Without a GPU: the tiny Qwen3 on the CPU.
#   bash scripts/main.sh [extra `workshop run` arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
WORKSHOP_SETUP=run source scripts/setup.sh  # what the run needs; `bash scripts/setup.sh` adds the notebooks and tests
if python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then tiny=(); else
  echo "No GPU found: running the tiny model on the CPU."; tiny=(--tiny); fi
out=runs/main-$(date +%Y%m%d-%H%M%S)
workshop run stage2_offload "${tiny[@]}" --output-dir "$out" "$@"
workshop report "$out" --out "$out/report"
