# %% [markdown]
# # 4. Several GPUs, several nodes
#
# **Learning goals**
# - predict what ZeRO leaves on each of N GPUs from the 16Ψ arithmetic, and check it against DeepSpeed's
#   estimator and a measurement;
# - know the three ways to start the ranks on a SLURM cluster (`torchrun`, `srun`, the `deepspeed`
#   launcher) and what each needs;
# - submit the workshop's batch jobs from this notebook or a terminal, and read their `results.json` back
#   into the same tables and plots.
#
# With N GPUs, data parallelism runs N copies of the training step on different micro-batches and averages
# the gradients. Without ZeRO, every copy holds all model states; ZeRO gives each rank 1/N of them. This
# is where ZeRO pays. On a machine without SLURM or GPUs this notebook starts two processes on the CPU.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import os
import shutil
import sys
from pathlib import Path

import pandas as pd
import torch
from IPython.display import Markdown, display

from workshop_lib import env, launch, lessons, memory, model, results
from workshop_lib.lessons import multi_gpu as answers
from workshop_lib.errors import WorkshopError

display(Markdown(lessons.header("04_multi_gpu")))

COMMON = env.notebook_run_options()
print(f"device: {env.device_name()}, GPUs: {torch.cuda.device_count()}, SLURM: {launch.slurm_available()}")
RUNS = Path("runs/04_multi_gpu")

# %% [markdown]
# ## 1. What ZeRO divides: 16Ψ bytes per parameter
#
# Mixed-precision Adam keeps 2Ψ bytes of 16-bit parameters, 2Ψ of 16-bit gradients and KΨ = 12Ψ of fp32
# optimizer states (master weights, momentum, variance) for Ψ parameters. Per GPU, with N GPUs (Rajbhandari
# et al. 2020, figure 1):
#
# | | parameters | gradients | optimizer states | total per GPU |
# | --- | --- | --- | --- | --- |
# | no ZeRO (stage 0) | 2Ψ | 2Ψ | 12Ψ | 16Ψ |
# | stage 1 | 2Ψ | 2Ψ | 12Ψ/N | 4Ψ + 12Ψ/N |
# | stage 2 | 2Ψ | 2Ψ/N | 12Ψ/N | 2Ψ + 14Ψ/N |
# | stage 3 | 2Ψ/N | 2Ψ/N | 12Ψ/N | 16Ψ/N |

# %%
psi = model.count_params(model.DEFAULT_MODEL)
P, MiB = psi["num_params"], 2**20
per_gpu = {0: lambda n: 16 * P, 1: lambda n: 4 * P + 12 * P / n, 2: lambda n: 2 * P + 14 * P / n,
           3: lambda n: 16 * P / n}
rows = []
for n in (1, 2, 4, 8):
    for stage, f in per_gpu.items():
        est = memory.estimate_model_states(P, psi["largest_layer_params"], stage, num_gpus_per_node=n)
        rows.append({"GPUs": n, "zero_stage": stage, "16Ψ arithmetic MiB": round(f(n) / MiB),
                     "DeepSpeed estimate MiB": est["estimated_model_states_gpu_mib"]})
arith = pd.DataFrame(rows)
ax = arith.pivot(index="GPUs", columns="zero_stage", values="16Ψ arithmetic MiB").plot(
    marker="o", figsize=(6, 3.5), title=f"Model states per GPU, {model.DEFAULT_MODEL} ({P / 1e6:.0f}M params)")
ax.set(ylabel="MiB per GPU")
arith.pivot(index="GPUs", columns="zero_stage", values=["16Ψ arithmetic MiB", "DeepSpeed estimate MiB"])

# %% [markdown]
# DeepSpeed's estimators count a little more (fp32 gradients during the reduction: 18 bytes/param
# partitioned instead of 14). DeepSpeed has no estimator for stage 1: `memory.estimate_model_states` gives
# it the stage-2 figure, a lower bound (stage 1 keeps whole gradients). Which stages' states shrink as N
# grows, and towards what floor, the cell below computes from the arithmetic.

# %%
floor = {0: 16 * P, 1: 4 * P, 2: 2 * P, 3: 0}  # bytes per GPU as N grows without bound: what is not partitioned
for stage, g in arith.groupby("zero_stage"):
    a1, a8 = g.set_index("GPUs")["16Ψ arithmetic MiB"][[1, 8]]
    print(f"stage {stage}: {a1:,} MiB per GPU on 1 GPU -> {a8:,} on 8 ({a8 / a1:.0%})"
          + (f", towards {floor[stage] / MiB:,.0f} MiB with many GPUs" if a8 < a1 else ": nothing is partitioned"))

# %% [markdown]
# ## 2. Three ways to start the ranks
#
# Every rank needs `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, and the address of rank 0 (`MASTER_ADDR`,
# `MASTER_PORT`) to meet the others. The batch scripts in `slurm/` offer three launchers
# (`WORKSHOP_LAUNCHER=torchrun|srun|deepspeed`), all without ssh between nodes:
#
# - **torchrun** (default): `srun` starts one `torchrun` per node; they meet at a c10d rendezvous on the
#   first node and start one rank per GPU. Restarts and rank numbering are torchrun's.
# - **srun**: SLURM starts every rank itself (one task per GPU); each takes `RANK=$SLURM_PROCID`,
#   `WORLD_SIZE=$SLURM_NTASKS`, `LOCAL_RANK=$SLURM_LOCALID`. No extra launcher process.
# - **deepspeed**: `srun` starts DeepSpeed's launcher on each node with `--no_ssh --node_rank $SLURM_NODEID`
#   and a hostfile written from the allocation (`node slots=GPUs`): the launcher you know from DeepSpeed's
#   docs, without its usual ssh fan-out.
#
# `MASTER_ADDR` is the first host of `scontrol show hostnames $SLURM_JOB_NODELIST`. The shared set-up also
# sets the NCCL and rendezvous timeouts, so that a dead rank or an unreachable node ends the job with an
# error instead of hanging until the time limit:

# %%
common = (launch.ROOT / "slurm" / "common.sh").read_text()
print(common[common.index("# workshop_launch"):])

# %% [markdown]
# A job is one command from a terminal, e.g. `sbatch --nodes=2 slurm/multi_node.slurm stage3`, or from
# here with `launch.submit(...)` and `launch.wait(...)`. Each job writes `runs/<job name>-<job id>/results.json`
# (rank 0 writes it, with every rank's peak memory in `per_rank_memory`) and its log to `logs/`.
#
# ## 3. Scale out
#
# ZeRO-2 and ZeRO-3 at 1 and 2 ranks (and 4 where there are 4 GPUs): on a GPU cluster as SLURM jobs, on
# one GPU machine with `torchrun`, and on a CPU-only machine as 2 CPU processes of the tiny model. Each rank
# keeps its micro-batch size (up to `max_tokens_per_micro_batch` tokens), so the global batch grows with
# the number of ranks: weak scaling.

# %%
gpus = torch.cuda.device_count()
# WORKSHOP_NOTEBOOK_SLURM=1 (on a cluster's login node): submit GPU jobs. Else ranks on this machine: one
# per GPU with 2+ GPUs, or 2 CPU processes of the tiny model; where a SLURM cluster answers (and
# WORKSHOP_NOTEBOOK_SLURM is not 0), the 2-rank ZeRO-2 run of the tiny model goes to it as a two-node job.
flag = os.environ.get("WORKSHOP_NOTEBOOK_SLURM")
use_slurm = flag == "1" and launch.slurm_available()
on_gpus = use_slurm or gpus >= 2
two_node_cpu = not on_gpus and flag != "0" and launch.slurm_available()
sizes = [1, 2, 4] if use_slurm else ([n for n in (1, 2, 4) if n <= gpus] if on_gpus else [1, 2])
extra = ["--max-steps", "16" if on_gpus else "4"] + ([] if on_gpus and not COMMON["tiny"] else ["--tiny"])
extra += ["--random-weights"] if COMMON["random_weights"] else []


def two_node_job(experiment: str, out: Path, *sbatch_options: str, env: dict | None = None) -> dict:
    """`sbatch --nodes=2 slurm/multi_node.slurm EXPERIMENT ...` into `out`; waits for it (at most a minute in
    the queue) and returns its results."""
    shutil.rmtree(out, ignore_errors=True)  # the job resumes a run in its output directory: start afresh
    job = launch.submit("multi_node", experiment, *extra, sbatch_options=("--nodes=2", *sbatch_options),
                        env={"WORKSHOP_OUTPUT_DIR": str(out.resolve())} | (env or {}))
    r = launch.wait(job, "multi_node", output_dir=out, poll_s=1, start_within_s=60)
    print(f"{experiment} on 2 nodes: SLURM job {job}, ranks on {sorted({m['host'] for m in r['per_rank_memory']})}")
    return r


for experiment in ["stage2", "stage3"]:
    for n in sizes:
        out = RUNS / f"{experiment}-{n}"
        if use_slurm:
            job = launch.submit("multi_gpu", experiment, *extra, sbatch_options=(f"--gpus-per-node={n}",),
                                env={"WORKSHOP_OUTPUT_DIR": str(out.resolve())})
            r = launch.wait(job, "multi_gpu", output_dir=out)
        elif two_node_cpu and experiment == "stage2" and n == 2:
            try:  # one CPU process per node, the tiny model
                r = two_node_job(experiment, out, "--gpus-per-node=0",
                                 env={"WORKSHOP_TINY": "1", "WORKSHOP_ENV": sys.prefix})
            except WorkshopError as e:
                print(f"The two-node job did not finish ({e.problem.splitlines()[0]}); starting the ranks here.")
                r = launch.run_local(experiment, n, out, *extra, "--overwrite", env={"CUDA_VISIBLE_DEVICES": ""})
        else:
            r = launch.run_local(experiment, n, out, *extra, "--overwrite", env={} if on_gpus else {"CUDA_VISIBLE_DEVICES": ""})
        print(f"{experiment} x{n}: finished, {out}/results.json")
if use_slurm:  # every GPU of two nodes
    two_node_job("stage2", RUNS / "stage2-2nodes")

# %%
df = results.load_results(RUNS)
scaling = results.scaling_table(df)

# %% [markdown]
# For comparison, the reference runs of the default recipe on one host with 4 H200 GPUs
# (`docs/h200/default-x4/runs`, steady state; `docs/h200/README.md` has the commands). The cell prints which
# experiments and GPU counts are on file.

# %%
reference = launch.ROOT / "docs" / "h200" / "default-x4" / "runs"
ref = results.load_results(reference) if reference.exists() else None
print(answers.reference_note(ref, reference.relative_to(launch.ROOT)))
if ref is not None:
    results.plot_scaling(ref);

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# | experiment | ranks | global batch | steady tokens/s | tokens/s per rank | scaling efficiency | peak memory per rank MiB | DS est. model states MiB |
# | --- | --- | --- | --- | --- | --- | --- | --- |
# | stage2 | 1 | | | | | | |
# | stage2 | 2 | | | | | | |
# | stage3 | 1 | | | | | | |
# | stage3 | 2 | | | | | | |
#
# Several nodes: from the two-node run (`sbatch --nodes=2 slurm/multi_node.slurm stage2`; the cell above
# submits it where a SLURM cluster answers; its results.json lists every rank's host in `per_rank_memory`),
# or, without a cluster, from the two-process run on this machine:
#
# | run | nodes (distinct hosts) | ranks | tokens/s | peak memory per rank MiB | tokens/s against 1 rank |
# | --- | --- | --- | --- | --- | --- |
# | | | | | | |
#
# 1. By the 16Ψ arithmetic, how many MiB of model states per GPU would ZeRO-2 and ZeRO-3 need for
#    Qwen3-0.6B on 16 GPUs (two nodes of 8), and what fraction of the one-GPU figure is that?
# 2. From 1 rank to the most ranks you ran, did the measured peak per rank fall by as much as the
#    arithmetic says the model states fall (for the model your runs trained)? What else is in memory?
# 3. The global batch grew with the ranks. What would you change to keep it as on one rank, and what
#    would that do to the number of optimizer steps per epoch?
# 4. How does the scaling efficiency of your runs compare with the H200 reference, and why may it differ?
# 5. Several nodes: how did the run with the most hosts compare with one rank of the same experiment, and
#    what carries the gradients between the nodes?

# %% [markdown]
# ## Summary
# - ZeRO divides model states across ranks: stage 1 the optimizer states, stage 2 the gradients too, stage 3
#   the parameters too: 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N and 16Ψ/N bytes per GPU (Ψ parameters).
# - What is not model states (activations, logits, buffers) stays on every rank, so the peak per GPU stops
#   falling where those dominate; the reference table shows where that is for Qwen3-0.6B.
# - Batch jobs: `sbatch slurm/multi_gpu.slurm` (one node) and `sbatch --nodes=N slurm/multi_node.slurm`
#   (N nodes), with torchrun, srun or the deepspeed launcher, no ssh; results come back as `results.json`
#   and into the same tables and plots (`workshop report runs/*` adds the scaling table).
