#!/usr/bin/env bash
# The fine-tuned model's round trip on one GPU, timed: a short ZeRO-3 run with the optimizer and the
# parameters offloaded to the CPU (Qwen3-0.6B, random weights), its OUTPUT_DIR/model reloaded and checked
# against the run's last eval loss, its ZeRO-3 checkpoint exported through DeepSpeed's zero_to_fp32, and
# `workshop eval` over 500 SQuAD dev questions. Prints each stage's wall time and the sizes on disk.
#   bash lab/scripts/model_roundtrip.sh [OUT [workshop run arguments]]     # default OUT: runs/roundtrip-<time>
#   WORKSHOP="python3 -m workshop_lib.cli" bash lab/scripts/model_roundtrip.sh   # where `workshop` is not on PATH
# Needs what `workshop run` needs (deepspeed, datasets, ...) and torchmetrics (with lightning-utilities).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKSHOP=${WORKSHOP:-workshop}
command -v "${WORKSHOP%% *}" >/dev/null || WORKSHOP="python3 -m workshop_lib.cli"
OUT=${1:-runs/roundtrip-$(date +%Y%m%d-%H%M%S)}
shift || true
# DeepSpeed's op builder cannot parse arch suffixes ("9.0a", set on Hopper images): keep the numbers.
if [ -n "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  export TORCH_CUDA_ARCH_LIST=$(sed -E 's/([0-9]+\.[0-9]+)[af]/\1/g' <<<"$TORCH_CUDA_ARCH_LIST")
fi
stage() { echo; echo "== $1"; T0=$SECONDS; }
took() { echo "-- $(( SECONDS - T0 )) s"; }

stage "train: stage3_offload, Qwen/Qwen3-0.6B with random weights, 8 steps, a checkpoint at step 8"
$WORKSHOP run stage3_offload --model Qwen/Qwen3-0.6B --random-weights --max-steps 8 --save-strategy steps \
  --save-steps 8 --output-dir "$OUT" "$@"
took
du -sh "$OUT/model" "$OUT/checkpoints/checkpoint-8" "$OUT/checkpoints/checkpoint-8/global_step8"
ls -l "$OUT/model" "$OUT/checkpoints/checkpoint-8/global_step8"

stage "reload $OUT/model with from_pretrained; its eval loss against the run's last"
python3 - "$OUT" <<'EOF'
import json, sys
import pandas as pd
from workshop_lib import evaluation
out = sys.argv[1]
net, tok = evaluation.load_model(out)
final = pd.read_csv(f"{out}/train_log.csv")["eval_loss"].dropna().iloc[-1]
loss = evaluation.eval_loss(net, tok, json.load(open(f"{out}/results.json"))["config"])
print(f"{sum(p.numel() for p in net.parameters()):,} parameters; reloaded eval loss {loss:.4f} (fp32), "
      f"the run's last {final:.4f} (bf16 autocast)")
EOF
took

stage "export: the ZeRO-3 checkpoint -> a Hugging Face model directory (fp32)"
$WORKSHOP export "$OUT" "$OUT-exported"
took
du -sh "$OUT-exported"

stage "eval: greedy answers to 500 SQuAD dev questions, exact match and F1"
$WORKSHOP eval "$OUT" --num-questions 500
took
cat "$OUT/squad_scores.json"
