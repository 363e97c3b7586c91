# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
#   language_info:
#     codemirror_mode:
#       name: ipython
#       version: 3
#     file_extension: .py
#     mimetype: text/x-python
#     name: python
#     nbconvert_exporter: python
#     pygments_lexer: ipython3
#     version: 3.11.7
# ---

# %% [markdown]
# # 4. Several GPUs, several nodes
#
# **Learning goals**
# - predict what ZeRO leaves on each of N GPUs (the 16Ψ arithmetic), and check it against a measurement;
# - start ranks on a SLURM cluster, submit the batch jobs and read their results back;
# - count the bytes each ZeRO stage communicates per step, and check it with DeepSpeed's comms logger.
#
# Data parallelism averages the gradients of N GPUs: without ZeRO each holds all model states, with ZeRO 1/N.
# Without SLURM or GPUs it starts two CPU processes.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import torch
from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import multi_gpu as lesson
from workshop_lib import ds_config, env, launch, memory, model, results, units, variables
from workshop_lib.comms import COMMS_FILE
from workshop_lib.errors import WorkshopError

display(Markdown(lessons.header("04_multi_gpu")))

COMMON = lessons.notebook_run_options()
print(f"device: {env.device_name()}, GPUs: {torch.cuda.device_count()}, SLURM: {launch.slurm_available()}")
RUNS = Path("runs/04_multi_gpu")

# %% [markdown]
# ## 1. What ZeRO divides: 16Ψ bytes per parameter
#
# For Ψ parameters, per GPU with N GPUs (Rajbhandari et al. 2020, figure 1; the 2 + 2 + 12 bytes of 00_setup):
#
# | | parameters | gradients | optimizer states | total per GPU |
# | --- | --- | --- | --- | --- |
# | no ZeRO (stage 0) | 2Ψ | 2Ψ | 12Ψ | 16Ψ |
# | stage 1 | 2Ψ | 2Ψ | 12Ψ/N | 4Ψ + 12Ψ/N |
# | stage 2 | 2Ψ | 2Ψ/N | 12Ψ/N | 2Ψ + 14Ψ/N |
# | stage 3 | 2Ψ/N | 2Ψ/N | 12Ψ/N | 16Ψ/N |

# %%
psi = model.count_params(model.DEFAULT_MODEL)
P, MiB = psi["num_params"], units.MiB
rows = []
for n in (1, 2, 4, 8):
    for stage in (0, 1, 2, 3):  # memory.zero_bytes_per_param: the table above, per parameter
        est = memory.estimate_model_states(P, psi["largest_layer_params"], stage, num_gpus_per_node=n)
        arithmetic = memory.zero_bytes_per_param(stage, n) * P
        rows.append(
            {
                "GPUs": n,
                "zero_stage": stage,
                "16Ψ arithmetic MiB": round(arithmetic / MiB),
                "DeepSpeed estimate MiB": est["estimated_model_states_gpu_mib"],
            }
        )
arith = pd.DataFrame(rows)
ax = arith.pivot(index="GPUs", columns="zero_stage", values="16Ψ arithmetic MiB").plot(
    marker="o", figsize=(6, 3.5), title=f"Model states per GPU, {model.DEFAULT_MODEL} ({P / 1e6:.0f}M params)"
)
ax.set(ylabel="MiB per GPU")
arith.pivot(index="GPUs", columns="zero_stage", values=["16Ψ arithmetic MiB", "DeepSpeed estimate MiB"])

# %% [markdown]
# DeepSpeed's estimates add fp32 gradients (00_setup). Which stages shrink as N grows, and towards what floor:

# %%
floor = {s: memory.zero_bytes_per_param(s, float("inf")) * P for s in range(4)}  # what is never partitioned
for stage, g in arith.groupby("zero_stage"):
    a1, a8 = g.set_index("GPUs")["16Ψ arithmetic MiB"][[1, 8]]
    print(
        f"stage {stage}: {a1:,} MiB per GPU on 1 GPU -> {a8:,} on 8 ({a8 / a1:.0%})"
        + (f", towards {floor[stage] / MiB:,.0f} MiB with many GPUs" if a8 < a1 else ": nothing is partitioned")
    )

# %% [markdown]
# ## 2. Three ways to start the ranks
#
# Every rank needs `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and rank 0's address (`MASTER_ADDR`, `MASTER_PORT`). The
# batch scripts offer three launchers (`WORKSHOP_LAUNCHER`), none using ssh:
#
# - **torchrun** (default): one per node, meeting at a c10d rendezvous, one rank per GPU.
# - **srun**: one SLURM task per GPU (`RANK=$SLURM_PROCID`).
# - **deepspeed**: DeepSpeed's launcher on each node, `--no_ssh`, a hostfile from the allocation.
#
# Timeouts make a dead rank end the job instead of hanging:

# %%
common = (lessons.BATCH_SCRIPTS / "common.sh").read_text()  # slurm/common.sh, as the package ships it
print(common[common.index("# workshop_launch") :])

# %% [markdown]
# A job is one command: `sbatch --nodes=2 slurm/multi_node.slurm stage3` (here `launch.submit(...)`).
# Rank 0 writes `runs/<job name>-<job id>/results.json` (every rank's peak in `per_rank_memory`), the log `logs/`.
#
# ## 3. Scale out
#
# ZeRO-2 and ZeRO-3 at 1, 2 (and 4) ranks: SLURM jobs, `torchrun` on a machine with several GPUs, else 2 CPU
# processes. Each rank keeps its micro-batch, so the global batch grows with the ranks: weak scaling.

# %% [markdown] tags=["exercise"]
# **Predict first.** At 2 ranks, what fraction of one rank's tokens/s will each rank keep (1.0: linear)? Write it
# in `MY_EFFICIENCY`.

# %%
MY_EFFICIENCY = {"stage2": None, "stage3": None}  # for example 0.8

# %%
gpus = torch.cuda.device_count()
# WORKSHOP_NOTEBOOK_SLURM=1 (on a cluster's login node): submit GPU jobs. Else ranks on this machine: one
# per GPU with 2+ GPUs, or 2 CPU processes of the tiny model; where a SLURM cluster answers (and
# WORKSHOP_NOTEBOOK_SLURM is not 0), the 2-rank ZeRO-2 run of the tiny model goes to it as a two-node job.
flag = variables.get("WORKSHOP_NOTEBOOK_SLURM")  # True, False, or None where unset
use_slurm = flag is True and launch.slurm_available()
on_gpus = use_slurm or gpus >= 2
# (and where the batch scripts are: a copy of this notebook outside the course's folders has none to submit)
two_node_cpu = not on_gpus and flag is not False and launch.slurm_available() and (launch.workdir() / "slurm").is_dir()
sizes = [1, 2, 4] if use_slurm else ([n for n in (1, 2, 4) if n <= gpus] if on_gpus else [1, 2])
# On this machine's GPUs, micro-batches sized for them as in 01-03 (a batch job sizes its own)
extra = lesson.run_options(on_gpus, COMMON, size_micro_batches=on_gpus and not use_slurm)


def two_node_job(experiment: str, out: Path, *sbatch_options: str, env: dict | None = None, args=()) -> dict:
    """`sbatch --nodes=2 slurm/multi_node.slurm EXPERIMENT ...` into `out`; waits for it (at most a minute
    pending with no job ahead of it) and returns its results."""
    shutil.rmtree(out, ignore_errors=True)  # the job resumes a run in its output directory: start afresh
    job = launch.submit(
        "multi_node",
        experiment,
        *extra,
        *args,
        sbatch_options=("--nodes=2", *sbatch_options),
        env={"WORKSHOP_OUTPUT_DIR": str(out.resolve())} | (env or {}),
    )
    r = launch.wait(job, "multi_node", output_dir=out, poll_s=1, start_within_s=60)
    print(f"{experiment} on 2 nodes: SLURM job {job}, ranks on {sorted({m['host'] for m in r['per_rank_memory']})}")
    return r


# DeepSpeed's comms logger (section 4) in the two-rank CPU runs: it synchronizes the device after every
# collective, a no-op on the CPU; on GPUs it would slow the timed runs, so there it gets runs of its own below.
comms = [] if on_gpus else ["--comms-logger"]
here_env = {} if on_gpus else {"CUDA_VISIBLE_DEVICES": ""}


def run_here(experiment: str, n: int, out: Path, args=(), env: dict | None = None) -> dict:
    r = launch.run_local(experiment, n, out, *extra, *args, "--overwrite", env=here_env | (env or {}))
    print(f"{experiment} x{n}: finished, {out}/results.json", flush=True)
    return r


def at_once(jobs: list[dict]) -> None:
    """`run_here(**job)` for every job at the same time; a run's failure is raised."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        for done in [pool.submit(run_here, **job) for job in jobs]:
            done.result()


# One run at a time, each alone on the machine (docs/measurement.md): runs side by side share the host's cores,
# which ZeRO-3's hooks need, and would lower the one-GPU figure the scaling efficiency divides by
for experiment in ["stage2", "stage3"]:
    for n in sizes:
        out = RUNS / f"{experiment}-{n}"
        logged = comms if n == 2 else []
        if use_slurm:
            job = launch.submit(
                "multi_gpu",
                experiment,
                *extra,
                sbatch_options=(f"--gpus-per-node={n}",),
                env={"WORKSHOP_OUTPUT_DIR": str(out.resolve())},
            )
            launch.wait(job, "multi_gpu", output_dir=out)
            print(f"{experiment} x{n}: finished, {out}/results.json")
        elif two_node_cpu and experiment == "stage2" and n == 2:
            try:  # one CPU process per node, the tiny model
                two_node_job(
                    experiment,
                    out,
                    "--gpus-per-node=0",
                    env={"WORKSHOP_TINY": "1", "WORKSHOP_ENV": sys.prefix},
                    args=logged,
                )
            except WorkshopError as e:
                print(f"The two-node job did not finish ({e.problem.splitlines()[0]}); starting the ranks here.")
                run_here(experiment, n, out, logged)
        else:
            run_here(experiment, n, out, logged)
if use_slurm:  # every GPU of two nodes
    two_node_job("stage2", RUNS / "stage2-2nodes")
COMMS_RUNS = {e: RUNS / f"{e}-2" for e in ["stage2", "stage3"]}  # the runs with comms.json
if on_gpus:  # 2 steps each on 2 GPUs with the comms logger, apart from the timed runs. They count bytes, not
    # time: small micro-batches, no compiling, both at once (the logger's syncs make a ZeRO-3 step about 10 s)
    COMMS_RUNS = {e: Path("runs/04_multi_gpu_comms") / e for e in COMMS_RUNS}
    small = ["--max-steps", "2", "--comms-logger", "--max-tokens-per-micro-batch", "4096", "--torch-compile", "false"]
    if use_slurm:
        for e, out in COMMS_RUNS.items():
            launch.wait(
                launch.submit(
                    "multi_gpu",
                    e,
                    *extra,
                    *small,
                    sbatch_options=("--gpus-per-node=2",),
                    env={"WORKSHOP_OUTPUT_DIR": str(out.resolve()), "NCCL_DEBUG": "INFO"},
                ),
                "multi_gpu",
                output_dir=out,
            )
    else:
        # NCCL_DEBUG=INFO: NCCL says in each run's launch.log how it joined the ranks (section 5's checklist)
        at_once(
            [dict(experiment=e, n=2, out=out, args=small, env={"NCCL_DEBUG": "INFO"}) for e, out in COMMS_RUNS.items()]
        )

# %%
df = results.load_results(RUNS)
scaling = results.scaling_table(df)

# %% [markdown]
# The reference: these runs on 2 H200s of one host, made as this notebook makes them (its README says how):

# %%
reference = lesson.REFERENCE
ref = lessons.median_runs(reference)
info = lesson.reference_info(ref)
if info is None:
    print(f"No reference runs on file ({reference / 'runs'} is missing): only your own figures are shown.")
else:
    print(
        f"Reference: {info['device']} GPUs of one host, {info['model']} "
        f"({'random weights' if info['random_weights'] else 'pretrained'}), {info['recipe']} recipe, "
        f"{info['global_steps']} optimizer steps, steady state after {info['warmup_steps']} warm-up steps; runs: "
        + ", ".join(f"{e} x{'/'.join(map(str, n))}" for e, n in info["runs"].items())
        + f" (experiment x GPUs), each the median of its rounds, in {reference.relative_to(lessons.REFERENCE.parents[1])}."
    )
    results.plot_scaling(ref)

# %% [markdown]
# Your runs beside the reference's ("n/a" where none), the run with the most hosts beside one rank, and your
# prediction:

# %%
_ = results.plot_scaling(df)  # shown once, by the backend
print(f"Your runs: {df['device'].iloc[0]}, {df['model'].iloc[0]}.")
display(Markdown(lesson.beside(scaling, ref).to_markdown(index=False)))
display(Markdown(pd.DataFrame([lesson.multi_node_row(df)]).to_markdown(index=False)))
# CPU ranks (no GPU, or one) measure how the ranks share the cores, not what communication costs (torchrun gives
# one rank all the threads, two ranks one each): there the prediction meets the GPU reference's efficiency
against = df if on_gpus else ref
if against is not None:
    measured = {x.experiment: x.per_rank.ratio for x in reversed(lesson.scaling(against)) if x.gpus == 2}
    print(f"Your prediction beside {'your runs' if on_gpus else 'the GPU reference'}:")
    display(Markdown(lessons.beside_prediction(MY_EFFICIENCY, measured, "efficiency").to_markdown(index=False)))

# %% [markdown]
# ## 4. Communication per step
#
# Data parallelism all-reduces the gradients every optimizer step: a ring reduce-scatter then all-gather, 2Ψ
# elements, each rank sending (N-1)/N of them. ZeRO's (Rajbhandari et al. 2020, section 7):
#
# | | collectives per optimizer step | volume |
# | --- | --- | --- |
# | data parallel (stage 0) | all-reduce of the gradients | 2Ψ |
# | stage 1, stage 2 | reduce-scatter of the gradients, all-gather of the updated parameters | Ψ + Ψ = 2Ψ |
# | stage 3 | all-gather of the parameters in the forward and the backward pass, reduce-scatter of the gradients | 3Ψ |
#
# DeepSpeed 0.19.8 calls others too (`lesson.DEEPSPEED`). For your runs, and for Qwen3-0.6B on 4 GPUs in bf16:

# %%
mine = df[df.world_size == 2].iloc[0]
Bmine = lesson.BYTES_PER_ELEMENT[mine["precision"]]
for name, psi, n, b in [(mine["model"], int(mine["num_params"]), 2, Bmine), (model.DEFAULT_MODEL, P, 4, 2)]:
    paper = lesson.comm_volume(psi, n, b)
    ds = lesson.comm_volume(psi, n, b, collectives=lesson.DEEPSPEED)
    print(f"{name}: Ψ = {psi:,} parameters, {b} bytes an element, {n} ranks (ring factor {(n - 1) / n:.2f})")
    both = paper.assign(
        **{
            "DeepSpeed's collectives": ds["collectives"],
            "DeepSpeed (Ψ)": ds["volume (Ψ)"],
            "DeepSpeed MiB per step": ds["MiB per step"],
        }
    )
    display(Markdown(both.to_markdown(index=False, floatfmt=",.2f")))

# %% [markdown]
# ### What your run sent: DeepSpeed's comms logger
#
# `--comms-logger` adds DeepSpeed's `comms_logger`: each rank's collectives go to `comms.json`. It synchronizes
# after each collective: volumes, not speed (on GPUs, runs of its own).

# %%
print(json.dumps({"comms_logger": ds_config.COMMS_LOGGER}))
for e, d in COMMS_RUNS.items():
    c = lesson.read_comms(d)
    if c is None:
        print(f"{d}: no {COMMS_FILE} (the run had no --comms-logger)")
        continue
    r = results.load_results(d).iloc[0]
    print(
        f"{e}: {c['world_size']} ranks over {c['backend']}, {c['optimizer_steps']} optimizer steps of {r['model']}; "
        f"rank 0's collectives per optimizer step (volume: the data the collective moves, in MiB and in Ψ):"
    )
    display(
        Markdown(
            lesson.comm_measured(c, int(r["num_params"]), lesson.BYTES_PER_ELEMENT[r["precision"]]).to_markdown(
                index=False, floatfmt=",.3f"
            )
        )
    )

# %% [markdown]
# ### Buckets and overlap
#
# - `reduce_bucket_size` (elements): ZeRO-1 and -2 reduce gradients bucket by bucket, with `overlap_comm: true`
#   behind the backward pass; the last bucket waits for its end.
# - The all-gather of the updated parameters comes between the optimizer step and the next forward pass: nothing
#   overlaps it.
# - With gradient accumulation, ZeRO-2 reduces after every micro-batch; data parallelism and ZeRO-1 once per step.
# - ZeRO-3 prefetches parameters (`stage3_prefetch_bucket_size`), overlapping the layer before. The workshop sets
#   DeepSpeed's 5e7 elements: the Trainer's "auto", 0.9 x hidden², holds less than one of Qwen3-0.6B's matrices.
#
# The reference's gradient buckets, from its ds_config and model:

# %%
if ref is not None:
    ref_cfg = json.loads((reference / "runs" / "stage2-2" / "ds_config.json").read_text())
    ref_params = int(ref.loc[ref.experiment == "stage2", "num_params"].iloc[0])
    bk = lesson.buckets(ref_cfg, ref_params)
    print(
        f"reduce_bucket_size {bk.reduce_bucket_size:,} elements, {bk.num_params:,} gradients of "
        f"{bk.bytes_per_element} bytes: {bk.count} bucket(s) of {bk.bucket_mib:,.0f} MiB, the last "
        f"{bk.last_mib:,.0f} MiB. The first is full when {bk.first_sent_at:.0%} of the backward pass is done: "
        f"{bk.reduced_during_backward:.0%} of the gradients can be reduced beside the backward pass, in its last "
        f"{1 - bk.first_sent_at:.0%}, and the last {bk.last_mib:,.0f} MiB wait for its end."
    )
    ga = ref_cfg["gradient_accumulation_steps"]
    for steps in sorted({ga, 4}):
        v = lesson.comm_volume(ref_params, 4, bk.bytes_per_element, steps, lesson.DEEPSPEED).set_index("zero_stage")
        print(
            f"gradient_accumulation_steps {steps}{' (the recipe)' if steps == ga else ''}, 4 GPUs, DeepSpeed's "
            f"collectives: ZeRO-1 {v.at[1, 'MiB per step']:,.0f} MiB per step, "
            f"ZeRO-2 {v.at[2, 'MiB per step']:,.0f}."
        )

# %% [markdown]
# ## 5. Links and stragglers
#
# The reference on 2 x H100: two nodes on one host (`scripts/two_nodes_one_host.sh`: NCCL over sockets) against
# NVLink, with ZeRO-2's collectives as DeepSpeed issues them (`lesson.zero2_collectives_ms`); then how far apart
# your ranks' forward passes were (`micro_batches.csv`): the faster rank waits at the gradients' all-reduce.

# %%
display(Markdown(lesson.links(lesson.LINKS).round(3).to_markdown(index=False)))
s = lesson.stragglers(RUNS / "stage2-2")
print(
    f"Your stage2 x2: in the steady steps the ranks' forward passes differed by {s.mean_waited_ms:,.1f} ms a step on "
    f"average, which the faster rank then waits at the gradients' all-reduce; their micro-batches' padded lengths "
    f"differed by {s.length_gap:,.0f} tokens."
)

# %% [markdown]
# A job that hangs or crawls:
#
# 1. Time the link first: `scripts/comm_benchmark.py` under the job's launcher, against the table.
# 2. `NCCL_DEBUG=INFO` names the network, the interface and each channel's transport ("via P2P", "via
#    NET/Socket", "via NET/IB"): three lines below.
# 3. `NCCL_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME` and `NCCL_IB_HCA` choose the interface: one that matches none
#    fails at once, one that cannot reach the other nodes hangs until the timeout.
# 4. A hang at start: can every node reach `MASTER_ADDR:MASTER_PORT`?
# 5. A slow step: which rank waited (`lesson.stragglers`)?
# 6. A hung job: end its workers, not only `torchrun`, whose workers each have a session of their own and keep
#    their GPUs (`nvidia-smi`); under SLURM `scancel` ends the job step.

# %%
# item 2: your run's launch.log, else (no NCCL here) the reference's run over sockets
lines, log = lesson.nccl_lines(*(d / "launch.log" for d in COMMS_RUNS.values()), lesson.LINKS / "nccl-sockets.txt")
print(f"From {log}:" if log else "No NCCL log found.")
print("\n".join(lines))

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Your figures are in the tables of sections 3 (scaling, and the run with the most hosts) and 4 (collectives).
#
# 1. By the 16Ψ arithmetic, how many MiB of model states per GPU would ZeRO-2 and ZeRO-3 need for Qwen3-0.6B on
#    16 GPUs, and what fraction of the one-GPU figure is that?
# 2. From 1 rank to the most you ran, did the peak per rank fall as much as the arithmetic says the model states
#    fall? What else is in memory?
# 3. The global batch grew with the ranks. What would keep it as on one rank, and what would that do to the steps
#    per epoch?
# 4. How does your runs' scaling efficiency compare with the reference's, and why may it differ?
#
# 5. How did the run with the most hosts compare with one rank of the same experiment, and what carries the
#    gradients between nodes? How much of ZeRO-2's step lost over sockets (section 5) do its collectives explain?
# 6. Which collectives carried gradients and parameters in your two-rank runs, and how does their logged volume
#    per step compare with the paper's 2Ψ (ZeRO-2) and 3Ψ (ZeRO-3)? Where they differ, why?
# 7. Predict what a 10x smaller `reduce_bucket_size` (`--reduce-bucket-size 50000000`) would do to ZeRO-2 in the
#    reference's recipe: how many buckets, how much of the reduction could overlap the backward pass, at what cost?
#    Then check it against the measured A/B.

# %% [markdown]
# ## Summary
# - ZeRO divides model states across ranks; activations, logits and buffers stay whole on each, so the peak per
#   GPU stops falling where they dominate.
# - ZeRO-1 and -2 move 2Ψ a step in the paper, 3Ψ as DeepSpeed all-reduces the gradients; ZeRO-3 3Ψ. The comms
#   logger shows what moved.
