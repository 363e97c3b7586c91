#!/usr/bin/env bash
# Two nodes on one host: what an inter-node link does to ZeRO-2 and ZeRO-3, on a machine with 2 GPUs. Two
# torchrun agents (--nnodes 2, --node-rank 0 and 1, c10d rendezvous on 127.0.0.1), one GPU each, as two nodes'
# agents would run; NCCL is kept off NVLink and shared memory (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1) and on
# the loopback interface (NCCL_SOCKET_IFNAME=lo), so the ranks talk over sockets as between nodes. Then the same
# on one node over NVLink (--standalone, --nproc_per_node 2). For each link: scripts/comm_benchmark.py's
# bandwidths (comm-<link>.csv) and one run per EXPERIMENT (<experiment>-<link>/), and nccl-<link>.txt: the
# NCCL_DEBUG=INFO lines that name the transport NCCL chose ("via P2P/...", "via NET/Socket/..."). NVLink
# multicast stays off (NCCL_NVLS_ENABLE=0). Notebook 04 reads the folder (`multi_gpu.links`).
#   bash scripts/two_nodes_one_host.sh OUT_DIR [EXPERIMENT ...]      # default: stage2 stage3
# LINKS (default "sockets nvlink") picks the links; MAX_STEPS (default 40) and EXTRA (more `workshop run` options)
# change every run; a finished run is skipped.
set -uo pipefail
out=${1:?usage: bash scripts/two_nodes_one_host.sh OUT_DIR [EXPERIMENT ...]}; shift
experiments=("$@"); [ ${#experiments[@]} -gt 0 ] || experiments=(stage2 stage3)
[ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] || { echo "This needs 2 GPUs on this host. To fix: run it on a 2-GPU machine." >&2; exit 2; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
port=$((29500 + RANDOM % 1000))
launch() {  # launch LINK LOG ARGS...: ARGS under torchrun, over the link named
  local link=$1 log=$2; shift 2
  if [ "$link" = nvlink ]; then
    python -m torch.distributed.run --standalone --nproc_per_node 2 "$@" > "$log" 2>&1
  else
    port=$((port + 1)); local pids=()
    for node in 1 0; do
      CUDA_VISIBLE_DEVICES=$node NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo \
        python -m torch.distributed.run --nnodes 2 --node-rank $node --nproc_per_node 1 --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:$port --rdzv-id "sockets-$port" "$@" > "$log.node$node" 2>&1 &
      pids+=($!)
    done
    wait "${pids[0]}"; local a=$?; wait "${pids[1]}"; local b=$?
    cat "$log.node0" "$log.node1" > "$log"; rm -f "$log.node0" "$log.node1"
    return $((a || b))
  fi
}
for link in ${LINKS:-sockets nvlink}; do
  [ -f "$out/comm-$link.csv" ] || launch $link "$out/comm-$link.log" scripts/comm_benchmark.py \
    --out "$out/comm-$link.csv" || echo "FAILED: comm benchmark over $link (see $out/comm-$link.log)"
  for exp in "${experiments[@]}"; do
    dir="$out/$exp-$link"
    if [ -f "$dir/results.json" ]; then echo "skip $dir (done)"; continue; fi
    launch $link "$out/$exp-$link.log" -m workshop_lib.cli run "$exp" --model "${MODEL:-Qwen/Qwen3-0.6B}" \
      --random-weights --save-strategy no --no-save-model --max-steps "${MAX_STEPS:-40}" ${EXTRA:-} \
      --output-dir "$dir" || echo "FAILED: $exp over $link (see $out/$exp-$link.log)"
  done
  grep -h "NCCL INFO.* via \|NCCL INFO Using network\|NCCL INFO NET/" "$out"/*-$link.log | sed 's/^[^ ]* //' \
    | sort | uniq -c | sort -rn | head -40 > "$out/nccl-$link.txt"
done
