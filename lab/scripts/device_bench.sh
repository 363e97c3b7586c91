#!/usr/bin/env bash
# The device call behind the bench with the peers at their best (issue 56), one GPU: installs the carried wheels
# (.whl/: deepspeed, datasets and their needs, trl 1.16.0, liger-kernel 0.8.5; into a folder named site-packages:
# NOTES), says whether FlashAttention is importable (the padding-free rows need it to be fast), builds fused_adam
# and cpu_adam, then runs the ceiling, default ZeRO-2, ZeRO-3, ZeRO-2 + CPU offload at accumulation 4 (the fastest
# offload setting, lab/findings/h200/protocol/levers) and every peer row, STEPS optimizer steps each, into
# /tmp/bench (outside the repository). Brings back the table, CSV, plot, log and each row's small files (no model/,
# no checkpoints). Wall time on one H200: about 8.5 minutes (install 15 s, ops 90 s, the bench BUDGET=400 s at most:
# stopped there, it keeps the rows it finished, the peers' A/B rows last). As the device command, carrying .whl:
#   bash lab/scripts/device_bench.sh                  # STEPS=20 BUDGET=400 by default
source lab/scripts/device_env.sh  # the carried wheels installed, the call's environment
python3 -c "import importlib.util, torch, transformers, accelerate, trl, deepspeed, liger_kernel
print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__,
      'trl', trl.__version__, 'deepspeed', deepspeed.__version__)
print('FlashAttention importable: flash_attn', importlib.util.find_spec('flash_attn') is not None,
      'flash_attn_interface (FA3)', importlib.util.find_spec('flash_attn_interface') is not None)
" 2>&1 | grep -v -i "ascend\|cutedsl"
t0=$SECONDS
timeout -k 5 200 python3 scripts/build_ops.py FusedAdamBuilder CPUAdamBuilder
echo "ops: $((SECONDS - t0)) s"
t0=$SECONDS
mapfile -t peers < <(python3 -c "from lab.bench import PEERS; print(*PEERS, sep='\n')" 2>/dev/null)
timeout -k 10 "${BUDGET:-400}" python3 -m lab.bench --out /tmp/bench --max-steps "${STEPS:-20}" --only \
  "default ZeRO-2" "default ZeRO-3" "A/B: ZeRO-2 + CPU offload, 4 x 32k tokens (accumulation 4)" "${peers[@]}" \
  2>&1 | grep -vE "it/s\]|s/it\]|examples/s\]" | tee /tmp/bench.log | grep -E "===|Error|error|To fix|tokens/s \(|^\|"
echo "bench: $((SECONDS - t0)) s"
cp /tmp/bench/bench.md /tmp/bench/bench.csv /tmp/bench/bench.png "$OUT"/ 2>/dev/null
grep -E "===|Error|error|Traceback|To fix|Warning: .*liger|flash" /tmp/bench.log | tail -200 >"$OUT/log_headers_and_errors.txt"
gzip -c /tmp/bench.log >"$OUT/bench.log.gz"
cd /tmp/bench/runs && tar czf "$OUT/runs.tgz" --exclude=model --exclude=checkpoints --exclude='*.safetensors' \
  --exclude='*.pt' --exclude='*.bin' . && ls -la "$OUT"
