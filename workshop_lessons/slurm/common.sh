# Shared setup for every workshop batch script: sourced by slurm/*.slurm, never run on its own.
# Site-specific values are marked EDIT; each can also be given without editing: SLURM options on the
# sbatch command line (sbatch --account=A --partition=P slurm/stage2.slurm), the rest as variables
# (WORKSHOP_ENV=~/envs/ws sbatch ...).
set -euo pipefail
fail() { echo "workshop job: error: $1" >&2; echo "To fix: $2" >&2; exit 2; }
[ -n "${SLURM_JOB_ID:-}" ] || fail "not inside a SLURM job." "submit it: sbatch slurm/<experiment>.slurm"
cd "$SLURM_SUBMIT_DIR"

# --- software environment -------------------------------------------------------------------------
# EDIT: modules your site needs, e.g. WORKSHOP_MODULES="gcc/12 cuda/12.4"
if [ -n "${WORKSHOP_MODULES:-}" ]; then module load $WORKSHOP_MODULES; fi
# An environment already active at submission (sbatch exports it) is used as it is; else WORKSHOP_ENV,
# a venv directory or a conda environment name (EDIT); else ./.venv made by scripts/setup.sh.
if [ -n "${WORKSHOP_CONTAINER:-}" ]; then :  # the container brings its own (--- container --- below)
elif [ -z "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ]; then
  env_=${WORKSHOP_ENV:-.venv}
  if [ -f "$env_/bin/activate" ]; then source "$env_/bin/activate"
  elif command -v conda >/dev/null && conda env list | awk '{print $1}' | grep -qx "$env_"; then
    eval "$(conda shell.bash hook)" && conda activate "$env_"
  else fail "no Python environment: '$env_' is neither a venv nor a conda environment." \
            "run 'bash scripts/setup.sh' once on a login node (makes ./.venv), or set WORKSHOP_ENV=<venv dir or conda env>."
  fi
fi
[ -n "${WORKSHOP_CONTAINER:-}" ] || python -c "import workshop_lib" 2>/dev/null || \
  fail "workshop_lib is not installed in $(command -v python)." "pip install -e . in that environment."

# --- where things go ------------------------------------------------------------------------------
# A run is named after its job: runs/<name>-<job id>, its log logs/<name>-<job id>.out (#SBATCH --output), where
# the name is the job's (--job-name; each script's own by default), or WORKSHOP_RUN_NAME where it is set
# (one_gpu.slurm: its experiment; the log SLURM writes under the job's name is linked under the run's).
WORKSHOP_RUN_NAME=${WORKSHOP_RUN_NAME:-$SLURM_JOB_NAME}
export WORKSHOP_OUTPUT_DIR=${WORKSHOP_OUTPUT_DIR:-runs/${WORKSHOP_RUN_NAME}-${SLURM_JOB_ID}}
# a quoted ~ (WORKSHOP_OUTPUT_DIR="~/x") read as the run reads it (config.resolve): the STOP file goes where the run is
WORKSHOP_OUTPUT_DIR=${WORKSHOP_OUTPUT_DIR/#\~\//$HOME/}
mkdir -p logs "$(dirname "$WORKSHOP_OUTPUT_DIR")"
if [ "$WORKSHOP_RUN_NAME" != "$SLURM_JOB_NAME" ]; then
  log_=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *StdOut=//p' || true)
  case $log_ in "$PWD"/logs/*) log_=${log_##*/} ;; esac  # a relative link beside it
  [ -z "$log_" ] || ln -sfn "$log_" "logs/$WORKSHOP_RUN_NAME-$SLURM_JOB_ID.out"
fi
# Compute nodes often have no internet: models and data come from a shared cache (EDIT: HF_HOME on a
# shared filesystem; fill it first, once, on a login node with the same HF_HOME: `hf download Qwen/Qwen3-0.6B`,
# `hf download bigscience/bloom-560m` (recipe classic), and for SQuAD, which runs read from the datasets cache
# (`hf download` does not fill it): python -c "import datasets; datasets.load_dataset('rajpurkar/squad')").
export HF_HOME=${HF_HOME:-$HOME/.cache/huggingface}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1}

# --- GPUs, compilers, communication ---------------------------------------------------------------
# DeepSpeed's op builder cannot parse arch suffixes ("9.0a", "10.0a"): keep the numbers.
if [ -n "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  export TORCH_CUDA_ARCH_LIST=$(sed -E 's/([0-9]+\.[0-9]+)[af]/\1/g' <<<"$TORCH_CUDA_ARCH_LIST")
fi
# A dead or unreachable rank must end the job, not hang it until the time limit.
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export WORKSHOP_DIST_TIMEOUT_S=${WORKSHOP_DIST_TIMEOUT_S:-300}  # collectives and rendezvous, seconds
export MASTER_ADDR=${WORKSHOP_MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
export MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}
# Nodes of this start's allocation: a requeued job may start on fewer (scontrol update JobId=J NumNodes=1
# NumTasks=1 while it waits), but the batch environment keeps the submission's SLURM_NTASKS, so every srun
# below names its task count from the nodes rather than inherit it; the run resumes on the new world size.
NNODES=${SLURM_NNODES:-1}
# Checked here, before torchrun reads them: its own errors name neither the variable nor the fix.
for v_ in WORKSHOP_CPU_PROCS_PER_NODE WORKSHOP_DIST_TIMEOUT_S; do
  [[ ${!v_:-1} =~ ^[1-9][0-9]{0,5}$ ]] || fail "$v_=${!v_} is not a whole number from 1 to 999999." \
    "set $v_ to 1 or more (processes per CPU node; seconds), or unset it (defaults: 1 process, 300 s)."
done
# GPUs: one line per device from nvidia-smi's query (a broken driver's error line counts none); WORKSHOP_MIG=1:
# the MIG instances instead, one process each (nvidia-smi -L's indented "MIG ..." lines).
if [ "${WORKSHOP_MIG:-0}" = 1 ]; then
  GPUS_PER_NODE=$(nvidia-smi -L 2>/dev/null | grep -c '^ *MIG ' || true)
else
  GPUS_PER_NODE=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c '^[0-9][0-9]*$' || true)
fi
# One process per GPU; on CPU nodes (WORKSHOP_TINY=1) WORKSHOP_CPU_PROCS_PER_NODE processes.
NPROC_PER_NODE=$(( GPUS_PER_NODE > 0 ? GPUS_PER_NODE : ${WORKSHOP_CPU_PROCS_PER_NODE:-1} ))
TINY=(); [ "${WORKSHOP_TINY:-0}" = 1 ] && TINY=(--tiny)
echo "job $SLURM_JOB_ID: $NNODES node(s) x $NPROC_PER_NODE process(es), master $MASTER_ADDR:$MASTER_PORT," \
     "launcher ${WORKSHOP_LAUNCHER:-torchrun}, output $WORKSHOP_OUTPUT_DIR"

# --- container (optional) -------------------------------------------------------------------------
# WORKSHOP_CONTAINER=IMAGE runs every rank inside the image built from container/Containerfile, through
# WORKSHOP_CONTAINER_RUNTIME (container/README.md):
#   pyxis (default): srun --container-image=IMAGE (a .sqsh from `enroot import`, or an image name), with this
#                    directory and HF_HOME mounted at the same paths;
#   apptainer:       apptainer exec --nv IMAGE (a .sif);
#   podman:          podman run IMAGE on each node (a .sqsh is mounted and used as the root file system).
SRUN_CONTAINER=(); PY=(python)
if [ -n "${WORKSHOP_CONTAINER:-}" ]; then
  mkdir -p "$HF_HOME"
  case ${WORKSHOP_CONTAINER_RUNTIME:-pyxis} in
    pyxis) SRUN_CONTAINER=(--container-image="$WORKSHOP_CONTAINER" --container-workdir="$SLURM_SUBMIT_DIR"
                           --container-mounts="$SLURM_SUBMIT_DIR:$SLURM_SUBMIT_DIR,$HF_HOME:$HF_HOME") ;;
    apptainer) PY=(apptainer exec --nv --bind "$SLURM_SUBMIT_DIR,$HF_HOME" --pwd "$SLURM_SUBMIT_DIR"
                   "$WORKSHOP_CONTAINER" /opt/venv/bin/python) ;;
    podman) PY=(bash "$SLURM_SUBMIT_DIR/container/podman_run.sh" "$WORKSHOP_CONTAINER" /opt/venv/bin/python) ;;
    *) fail "unknown WORKSHOP_CONTAINER_RUNTIME=$WORKSHOP_CONTAINER_RUNTIME." "use pyxis (default), apptainer or podman." ;;
  esac
  [ "${WORKSHOP_LAUNCHER:-torchrun}" = torchrun ] || [ "${WORKSHOP_CONTAINER_RUNTIME:-pyxis}" = pyxis ] || \
    fail "WORKSHOP_LAUNCHER=$WORKSHOP_LAUNCHER with WORKSHOP_CONTAINER_RUNTIME=$WORKSHOP_CONTAINER_RUNTIME." \
         "use the torchrun launcher (default), or pyxis, which runs every launcher inside the container."
  echo "job $SLURM_JOB_ID: inside container $WORKSHOP_CONTAINER (${WORKSHOP_CONTAINER_RUNTIME:-pyxis})"
fi

# --- preemption and time limits ---------------------------------------------------------------------
# The scripts ask for SIGUSR1 to this shell before the time limit (#SBATCH --signal=B:USR1@120) and may be
# requeued (--requeue); SLURM also signals before a preemption. The trap creates OUTPUT_DIR/STOP, which
# every rank on every node reads at its next optimizer step: they save a checkpoint there and exit 75.
# The job then requeues itself; the next start passes --resume (always) and continues from the checkpoint.
# The same job id, so the same output directory and log (--open-mode=append).
PREEMPTED=0
trap 'PREEMPTED=1; echo "job $SLURM_JOB_ID: SIGUSR1 (time limit or preemption ahead): checkpointing at the next step"
      touch "$WORKSHOP_OUTPUT_DIR/STOP"' USR1

# --- per node: caches and threads ---------------------------------------------------------------------
# Run by every srun task of a launch, on its own node, before the launcher (prints one line per node to the log):
#  - compiled code on node-local storage, ${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/$USER/workshop-<node>/: DeepSpeed's op
#    builds (TORCH_EXTENSIONS_DIR), Triton's kernels (TRITON_CACHE_DIR), Inductor's (TORCHINDUCTOR_CACHE_DIR). On a
#    shared $HOME the nodes would build into one folder, wait on each other's lock, and load ops compiled for
#    another node's CPU. Each variable already set is kept (the container's built ops, too); the folder the engine
#    picks per environment under ~/.cache/torch_extensions, inherited from a notebook's submission, is not a choice.
#  - on CPU nodes, OpenMP threads per rank: the cores this task may run on (nproc: its affinity) shared among the
#    node's ranks, unless OMP_NUM_THREADS is set (torchrun would give each rank 1; 2 threads per rank on 2 cores
#    for 2 ranks ran 8-10x slower than 1).
NODE_SETUP='case ${TORCH_EXTENSIONS_DIR:-} in "$HOME"/.cache/torch_extensions/*) unset TORCH_EXTENSIONS_DIR ;; esac
  node_=${SLURMD_NODENAME:-$(hostname -s)}
  if [ -z "${WORKSHOP_CONTAINER:-}" ]; then
    tmp_=${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/${USER:-$(id -un)}/workshop-$node_
    export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$tmp_/torch_extensions} \
      TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$tmp_/triton} TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$tmp_/inductor}
  fi
  [ "$GPUS_PER_NODE" -gt 0 ] || export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) > NPROC_PER_NODE ? $(nproc) / NPROC_PER_NODE : 1 ))}
  [ "${SLURM_LOCALID:-0}" != 0 ] || echo "node $node_: TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-}" \
    "TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-} TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-}" \
    "OMP_NUM_THREADS=${OMP_NUM_THREADS:-}"'
export GPUS_PER_NODE NPROC_PER_NODE

# workshop_launch EXPERIMENT [workshop run arguments]: start every rank with the chosen launcher, resuming
# the run in WORKSHOP_OUTPUT_DIR if there is one; requeue the job if SLURM asked it to stop.
workshop_launch() {
  local exp=$1 rc=0 tokens; shift
  # micro-batches sized for this job's GPU as the notebooks size theirs, unless given (the reason goes to the log)
  tokens=$(srun --nodes=1 --ntasks=1 "${SRUN_CONTAINER[@]}" "${PY[@]}" -m workshop_lib.preflight "$exp" "${TINY[@]}" \
    --output-dir "$WORKSHOP_OUTPUT_DIR" "$@") || tokens=
  tokens=${tokens##*$'\n'}  # its last line: the number, or empty
  if [[ $tokens =~ ^[0-9]+$ ]]; then set -- "$@" --max-tokens-per-micro-batch "$tokens"; fi
  local run=(-m workshop_lib.cli run "$exp" "${TINY[@]}" --output-dir "$WORKSHOP_OUTPUT_DIR" --resume "$@")
  _launch "${run[@]}" &
  local pid=$!
  while :; do  # a trapped signal cuts `wait` short: wait again until the launcher has ended
    wait "$pid" && rc=0 || rc=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  if [ "$PREEMPTED" = 1 ] && [ "$rc" != 0 ]; then
    echo "job $SLURM_JOB_ID: stopped with a checkpoint (exit $rc); requeued, the next start resumes"
    scontrol requeue "$SLURM_JOB_ID"
  fi
  return "$rc"
}

_launch() {
  local run=("$@")
  case ${WORKSHOP_LAUNCHER:-torchrun} in
    torchrun)   # one torchrun per node; c10d rendezvous at MASTER_ADDR, no ssh
      srun --kill-on-bad-exit=1 --ntasks="$NNODES" --ntasks-per-node=1 "${SRUN_CONTAINER[@]}" \
        bash -c "$NODE_SETUP"'; exec "$@"' _ "${PY[@]}" -m torch.distributed.run --nnodes="$NNODES" \
        --nproc_per_node="$NPROC_PER_NODE" --rdzv_backend=c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" \
        --rdzv_id="$SLURM_JOB_ID" --rdzv_conf="join_timeout=$WORKSHOP_DIST_TIMEOUT_S,read_timeout=$WORKSHOP_DIST_TIMEOUT_S" --max_restarts=0 "${run[@]}" ;;
    srun)       # SLURM starts every rank itself; ranks from its variables
      srun --kill-on-bad-exit=1 --ntasks=$((NNODES * NPROC_PER_NODE)) --ntasks-per-node="$NPROC_PER_NODE" \
        "${SRUN_CONTAINER[@]}" bash -c "$NODE_SETUP"'
        export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID; exec python "$@"' \
        _ "${run[@]}" ;;
    deepspeed)  # DeepSpeed's launcher on each node, hostfile from the allocation, --no_ssh
      local hostfile=$WORKSHOP_OUTPUT_DIR.hostfile
      scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/$/ slots=$NPROC_PER_NODE/" > "$hostfile"
      srun --kill-on-bad-exit=1 --ntasks="$NNODES" --ntasks-per-node=1 "${SRUN_CONTAINER[@]}" \
        bash -c "$NODE_SETUP"'
         exec deepspeed --hostfile "$0" --no_ssh --node_rank "$SLURM_NODEID" --master_addr "$MASTER_ADDR" \
           --master_port "$MASTER_PORT" --no_local_rank --module "$@"' \
        "$hostfile" "${run[@]:1}" ;;
    *) fail "unknown WORKSHOP_LAUNCHER=$WORKSHOP_LAUNCHER." "use torchrun (default), srun or deepspeed." ;;
  esac
}
