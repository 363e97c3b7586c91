# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 4. Several GPUs, several nodes
#
# **Learning goals**
# - predict what ZeRO leaves on each of N GPUs from the 16Ψ arithmetic, and check it against DeepSpeed's
#   estimator and a measurement;
# - know the three ways to start the ranks on a SLURM cluster (`torchrun`, `srun`, the `deepspeed`
#   launcher) and what each needs;
# - submit the workshop's batch jobs from this notebook or a terminal, and read their `results.json` back
#   into the same tables and plots;
# - count the bytes each ZeRO stage communicates per step, check the count against DeepSpeed's comms logger in
#   your own run, and reason about gradient buckets and overlap.
#
# With N GPUs, data parallelism runs N copies of the training step on different micro-batches and averages
# the gradients. Without ZeRO, every copy holds all model states; ZeRO gives each rank 1/N of them. This
# is where ZeRO pays. On a machine without SLURM or GPUs this notebook starts two processes on the CPU.

# %%
import json
import shutil
import sys
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
P, MiB = psi["num_params"], units.MiB
rows = []
for n in (1, 2, 4, 8):
    for stage in (0, 1, 2, 3):  # memory.zero_bytes_per_param: the table above, per parameter
        est = memory.estimate_model_states(P, psi["largest_layer_params"], stage, num_gpus_per_node=n)
        arithmetic = memory.zero_bytes_per_param(stage, n) * P
        rows.append({"GPUs": n, "zero_stage": stage, "16Ψ arithmetic MiB": round(arithmetic / MiB),
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
floor = {s: memory.zero_bytes_per_param(s, float("inf")) * P for s in range(4)}  # what is never partitioned
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
flag = variables.get("WORKSHOP_NOTEBOOK_SLURM")  # True, False, or None where unset
use_slurm = flag is True and launch.slurm_available()
on_gpus = use_slurm or gpus >= 2
two_node_cpu = not on_gpus and flag is not False and launch.slurm_available()
sizes = [1, 2, 4] if use_slurm else ([n for n in (1, 2, 4) if n <= gpus] if on_gpus else [1, 2])
extra = ["--max-steps", "16" if on_gpus else "4"] + ([] if on_gpus and not COMMON["tiny"] else ["--tiny"])
extra += ["--random-weights"] if COMMON["random_weights"] else []
if on_gpus and not use_slurm and not COMMON["tiny"]:  # this machine's GPUs: micro-batches sized for them, as 01-03
    extra += ["--max-tokens-per-micro-batch",
              str(lessons.notebook_run_options(size_micro_batches=True)["max_tokens_per_micro_batch"])]


def two_node_job(experiment: str, out: Path, *sbatch_options: str, env: dict | None = None, args=()) -> dict:
    """`sbatch --nodes=2 slurm/multi_node.slurm EXPERIMENT ...` into `out`; waits for it (at most a minute in
    the queue) and returns its results."""
    shutil.rmtree(out, ignore_errors=True)  # the job resumes a run in its output directory: start afresh
    job = launch.submit("multi_node", experiment, *extra, *args, sbatch_options=("--nodes=2", *sbatch_options),
                        env={"WORKSHOP_OUTPUT_DIR": str(out.resolve())} | (env or {}))
    r = launch.wait(job, "multi_node", output_dir=out, poll_s=1, start_within_s=60)
    print(f"{experiment} on 2 nodes: SLURM job {job}, ranks on {sorted({m['host'] for m in r['per_rank_memory']})}")
    return r


# DeepSpeed's comms logger (section 4) in the two-rank CPU runs: it synchronizes the device after every
# collective, a no-op on the CPU; on GPUs it would slow the timed runs, so there it gets runs of its own below.
comms = [] if on_gpus else ["--comms-logger"]
for experiment in ["stage2", "stage3"]:
    for n in sizes:
        out = RUNS / f"{experiment}-{n}"
        logged = comms if n == 2 else []
        if use_slurm:
            job = launch.submit("multi_gpu", experiment, *extra, sbatch_options=(f"--gpus-per-node={n}",),
                                env={"WORKSHOP_OUTPUT_DIR": str(out.resolve())})
            r = launch.wait(job, "multi_gpu", output_dir=out)
        elif two_node_cpu and experiment == "stage2" and n == 2:
            try:  # one CPU process per node, the tiny model
                r = two_node_job(experiment, out, "--gpus-per-node=0",
                                 env={"WORKSHOP_TINY": "1", "WORKSHOP_ENV": sys.prefix}, args=logged)
            except WorkshopError as e:
                print(f"The two-node job did not finish ({e.problem.splitlines()[0]}); starting the ranks here.")
                r = launch.run_local(experiment, n, out, *extra, *logged, "--overwrite",
                                     env={"CUDA_VISIBLE_DEVICES": ""})
        else:
            r = launch.run_local(experiment, n, out, *extra, *logged, "--overwrite",
                                 env={} if on_gpus else {"CUDA_VISIBLE_DEVICES": ""})
        print(f"{experiment} x{n}: finished, {out}/results.json")
if use_slurm:  # every GPU of two nodes
    two_node_job("stage2", RUNS / "stage2-2nodes")
COMMS_RUNS = {e: RUNS / f"{e}-2" for e in ["stage2", "stage3"]}  # the runs with comms.json
if on_gpus:  # 4 steps each on 2 GPUs with the comms logger, apart from the timed runs
    COMMS_RUNS = {e: Path("runs/04_multi_gpu_comms") / e for e in COMMS_RUNS}
    for e, out in COMMS_RUNS.items():
        args = (e, *extra, "--max-steps", "4", "--comms-logger")
        if use_slurm:
            launch.wait(launch.submit("multi_gpu", *args, sbatch_options=("--gpus-per-node=2",),
                                      env={"WORKSHOP_OUTPUT_DIR": str(out.resolve())}), "multi_gpu", output_dir=out)
        else:
            launch.run_local(e, 2, out, *args[1:], "--overwrite")

# %%
df = results.load_results(RUNS)
scaling = results.scaling_table(df)

# %% [markdown]
# For comparison, the reference runs of the default recipe on one host with 4 H200 GPUs
# (`workshop_lessons/reference/h200/default-x4/runs`, steady state; `docs/h200/README.md` has the commands).
# The cell prints which experiments and GPU counts are on file.

# %%
reference = lessons.REFERENCE / "h200" / "default-x4" / "runs"
ref = results.load_results(reference) if reference.exists() else None
info = lesson.reference_info(ref)
if info is None:
    print(f"No H200 reference runs on file ({reference} is missing): only your own figures are shown.")
else:
    print(f"H200 reference: {info['device']} GPUs of one host, {info['model']} "
          f"({'random weights' if info['random_weights'] else 'pretrained'}), {info['recipe']} recipe, "
          f"{info['global_steps']} optimizer steps, steady state after {info['warmup_steps']} warm-up steps; runs: "
          + ", ".join(f"{e} x{'/'.join(map(str, n))}" for e, n in info["runs"].items())
          + f" (experiment x GPUs), in {reference.relative_to(lessons.REFERENCE.parents[1])}.")
    results.plot_scaling(ref);

# %% [markdown]
# Your runs, each beside the reference run of the same experiment and number of GPUs ("n/a" where there is
# none), and the run with the most hosts beside one rank of the same experiment:

# %%
results.plot_scaling(df);
print(f"Your runs: {df['device'].iloc[0]}, {df['model'].iloc[0]}.")
display(Markdown(lesson.beside(scaling, ref).to_markdown(index=False)))
display(Markdown(pd.DataFrame([lesson.multi_node_row(df)]).to_markdown(index=False)))

# %% [markdown]
# ## 4. Communication per step
#
# Data parallelism all-reduces the gradients once per optimizer step. A ring all-reduce is a reduce-scatter
# (each rank ends with the sum of 1/N of the gradients) followed by an all-gather (each rank receives the other
# sums): 2Ψ elements of traffic per step for Ψ parameters, of which each rank sends (N-1)/N over its link.
# Rajbhandari et al. 2020 (section 7) count what ZeRO changes:
#
# | | collectives per optimizer step | volume |
# | --- | --- | --- |
# | data parallel (stage 0) | all-reduce of the gradients | 2Ψ |
# | stage 1, stage 2 | reduce-scatter of the gradients (a rank needs only the sum of its own partition), then all-gather of the updated parameters | Ψ + Ψ = 2Ψ |
# | stage 3 | all-gather of the parameters in the forward pass, again in the backward pass, reduce-scatter of the gradients | 3Ψ |
#
# By this count ZeRO-1 and ZeRO-2 cost no more traffic than plain data parallelism, and ZeRO-3 1.5x. A library
# may call other collectives than the paper's: the second count below is that of DeepSpeed 0.19.8's defaults,
# read in its source (`lesson.DEEPSPEED`). Both for the model your runs trained, with their number of ranks
# and precision (elements of 4 bytes in fp32 on the CPU, 2 in bf16), and for Qwen3-0.6B on 4 GPUs in bf16:

# %%
mine = df[df.world_size == 2].iloc[0]
Bmine = lesson.BYTES_PER_ELEMENT[mine["precision"]]
for name, psi, n, b in [(mine["model"], int(mine["num_params"]), 2, Bmine), (model.DEFAULT_MODEL, P, 4, 2)]:
    paper = lesson.comm_volume(psi, n, b)
    ds = lesson.comm_volume(psi, n, b, collectives=lesson.DEEPSPEED)
    print(f"{name}: Ψ = {psi:,} parameters, {b} bytes an element, {n} ranks (ring factor {(n - 1) / n:.2f})")
    both = paper.assign(**{"DeepSpeed's collectives": ds["collectives"], "DeepSpeed (Ψ)": ds["volume (Ψ)"],
                           "DeepSpeed MiB per step": ds["MiB per step"]})
    display(Markdown(both.to_markdown(index=False, floatfmt=",.2f")))

# %% [markdown]
# ### What your run sent: DeepSpeed's comms logger
#
# DeepSpeed times every collective that goes through `deepspeed.comm` when its ds_config has a `comms_logger`
# block (DeepSpeed docs, "Communication Logging"; `deepspeed.comm.log_summary()` prints what it kept). The
# workshop adds the block with `workshop run stage2 --comms-logger` (or `RunConfig(..., comms_logger=True)`),
# keeps the log to the optimizer steps (not the set-up or the evaluations), and writes every rank's totals to
# `comms.json` in the run directory (`workshop_lib.comms`). The logger waits for the device after every
# collective, so a run with it on tells volumes and counts, not speed: on GPUs the notebook gives it runs of
# its own. The block:

# %%
print(json.dumps({"comms_logger": ds_config.COMMS_LOGGER}))
for e, d in COMMS_RUNS.items():
    c = lesson.read_comms(d)
    if c is None:
        print(f"{d}: no {COMMS_FILE} (the run had no --comms-logger)")
        continue
    r = results.load_results(d).iloc[0]
    print(f"{e}: {c['world_size']} ranks over {c['backend']}, {c['optimizer_steps']} optimizer steps of {r['model']}; "
          f"rank 0's collectives per optimizer step (volume: the data the collective moves, in MiB and in Ψ):")
    display(Markdown(lesson.comm_measured(c, int(r["num_params"]), lesson.BYTES_PER_ELEMENT[r["precision"]])
                     .to_markdown(index=False, floatfmt=",.3f")))

# %% [markdown]
# ### Buckets and overlap
#
# - `reduce_bucket_size` (elements): ZeRO-1 and ZeRO-2 collect the gradients into a bucket as the backward pass
#   produces them, last layer first, and reduce a bucket when it is full. With `overlap_comm: true` the reduction
#   runs on its own stream while the backward pass goes on, hidden behind the compute of the layers still to
#   go. The last bucket is sent when the backward pass ends: what it carries cannot overlap anything.
# - `allgather_bucket_size` (elements) would split the all-gather of the updated parameters after the optimizer
#   step. Where torch has `all_gather_into_tensor` (every recent torch), DeepSpeed 0.19.8 gathers each parameter
#   group in one call and does not read it (`runtime/utils.all_gather_dp_groups`); your log above shows the
#   calls per step. That all-gather comes after the optimizer step and before the next forward pass: nothing
#   overlaps it either way.
# - `gradient_accumulation_steps` > 1: ZeRO-2 keeps only its partition of the gradients, so every micro-batch's
#   backward pass reduces the gradients it produced; data parallelism and ZeRO-1 keep whole gradients and
#   reduce once, at the step's last micro-batch. ZeRO-2's gradient traffic grows with the accumulation.
# - ZeRO-3 gathers parameters ahead of the layer that needs them (`stage3_prefetch_bucket_size` elements), so
#   those all-gathers overlap the compute of the layer before.
#
# The H200 reference's gradient buckets, from its ds_config and model (gradients arriving evenly through the
# backward pass), and what accumulation would add:

# %%
if ref is not None:
    ref_cfg = json.loads((reference / "stage2-2gpu" / "ds_config.json").read_text())
    ref_params = int(ref.loc[ref.experiment == "stage2", "num_params"].iloc[0])
    bk = lesson.buckets(ref_cfg, ref_params)
    print(f"reduce_bucket_size {bk.reduce_bucket_size:,} elements, {bk.num_params:,} gradients of "
          f"{bk.bytes_per_element} bytes: {bk.count} bucket(s) of {bk.bucket_mib:,.0f} MiB, the last "
          f"{bk.last_mib:,.0f} MiB. The first is full when {bk.first_sent_at:.0%} of the backward pass is done: "
          f"{bk.reduced_during_backward:.0%} of the gradients can be reduced beside the backward pass, in its last "
          f"{1 - bk.first_sent_at:.0%}, and the last {bk.last_mib:,.0f} MiB wait for its end.")
    ga = ref_cfg["gradient_accumulation_steps"]
    for steps in sorted({ga, 4}):
        v = lesson.comm_volume(ref_params, 4, bk.bytes_per_element, steps, lesson.DEEPSPEED).set_index("zero_stage")
        print(f"gradient_accumulation_steps {steps}{' (the recipe)' if steps == ga else ''}, 4 GPUs, DeepSpeed's "
              f"collectives: ZeRO-1 {v.at[1, 'MiB per step']:,.0f} MiB per step, "
              f"ZeRO-2 {v.at[2, 'MiB per step']:,.0f}.")

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Your figures are in the tables above: the scaling table beside the H200 reference (section 3), the run with
# the most hosts (a two-node job, `sbatch --nodes=2 slurm/multi_node.slurm stage2`, which section 3 submits
# where a SLURM cluster answers; else the two-process run on this machine), and the collectives of your
# two-rank runs (section 4).
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
# 6. Which collectives carried the gradients and the parameters in your two-rank runs, and how does the
#    volume per step that DeepSpeed's comms logger recorded compare with the paper's 2Ψ (ZeRO-2) and 3Ψ
#    (ZeRO-3)? Where they differ, why?
# 7. Predict what a 10x smaller `reduce_bucket_size` (50,000,000 elements, `--reduce-bucket-size 50000000`)
#    would do to ZeRO-2 in the H200 recipe: how many buckets of how many MiB, how much of the gradient
#    reduction could then overlap the backward pass, and what does it cost?

# %% tags=["solution"]
a = lesson.figures(arith, scaling, ref, df, P)
st = a.states_16.set_index("zero_stage")
for s in (2, 3):
    whole = st.at[s, "not partitioned MiB"]
    print(f"1. ZeRO-{s}: {st.at[s, 'MiB per GPU on 16 GPUs']:,.0f} MiB per GPU on 16 GPUs, "
          f"{st.at[s, 'fraction of 1 GPU']:.0%} of the {st.at[s, 'MiB per GPU on 1 GPU']:,} MiB on 1 GPU"
          + (f" (the {whole:,.0f} MiB of 16-bit parameters stay whole on every GPU)." if whole else
             ": every state partitioned."))
for m in a.memory:
    c = m.fall
    head = (f"2. {m.experiment}: {m.memory} {m.change_mib:+,.0f} MiB from {m.ranks_from} to {m.ranks_to} ranks; by "
            "the 16Ψ arithmetic the model states its GPUs keep"
            + (" (with offload: no fp32 optimizer states" + (", no parameters" if m.offload_param else "") + ")"
               if m.offload_optimizer else "")
            + f" fall by {m.arithmetic_fall_mib:,.1f} MiB for its {m.num_params:,} parameters")
    if not m.on_gpu:
        print(f"{head}. A change of that size cannot be read from host RSS: each rank's RSS is the whole process "
              "(Python, torch, DeepSpeed, the data), hundreds of MiB, and on a CPU the 'GPU' and the host are the "
              "same memory.")
    elif c.verdict in ("within the band", "equal"):
        print(f"{head}: the peak fell about as much ({c.ratio:.2f}x the arithmetic, within the {c.band_text} band); "
              "the rest of it (activations, logits, buffers) stayed on every rank.")
    elif c.verdict == "lower":
        print(f"{head}: the peak fell less ({c.ratio:.2f}x the arithmetic, outside the {c.band_text} band): "
              "activations, logits and communication buffers are not partitioned by ZeRO; they stay on every rank.")
    else:
        print(f"{head}: the peak fell more ({c.ratio:.2f}x the arithmetic, outside the {c.band_text} band): other "
              "parts of the peak changed too (under ZeRO-3 the gathered layers and prefetch buckets, the caching "
              "allocator's blocks): the peak is not the model states plus a constant.")
lo, hi = min(a.global_batch), max(a.global_batch)
print(f"3. the global batch went from {a.global_batch[lo]:g} sequences per step on {lo} rank(s) to "
      f"{a.global_batch[hi]:g} on {hi} (on average: micro-batches are filled up to a token budget): to keep it, "
      f"divide each rank's share (max_tokens_per_micro_batch, or the micro-batch or the accumulation) by {hi // lo}; "
      f"the steps per epoch then stay as on {lo} rank(s), where with the share unchanged they fall to about "
      f"1/{hi // lo}.")
LINEAR = {"lower": "below linear", "higher": "above linear", "within the band": "linear within the band",
          "equal": "linear"}


def efficiencies(xs):
    return ", ".join(f"{x.experiment} x{x.gpus}: {x.per_rank.ratio:.0%} ({LINEAR[x.per_rank.verdict]}, "
                     f"{x.per_rank.band_text})" for x in xs)


if not a.on_gpu:
    why = (f" Not a scaling figure: these are CPU processes of a {a.model_params:,}-parameter model sharing this "
           f"machine's cores, over {a.max_steps} optimizer steps at most, so warm-up and fixed per-step costs (Python, "
           "launching, gloo) dominate and the ranks compete for the same cores"
           + ("; above 100% means the one-rank run was the slower to warm up, not that two ranks beat linear "
              "speed-up" if any(x.per_rank.ratio > 1 for x in a.scaling) else "")
           + ". Steady-state figures need the GPU runs, such as the H200 reference.")
elif all(x.per_rank.verdict == "lower" for x in a.scaling):
    why = (" Below linear beyond the noise: every step adds the gradient reduction (ZeRO-2) and the parameter "
           "all-gathers (ZeRO-3) that one GPU did not need (section 4), and per-step synchronisation.")
elif any(x.per_rank.verdict == "higher" for x in a.scaling):
    why = (" Above linear is not real speed-up: the steady state may not have been reached, or the runs differ "
           "(the one-rank run slower for another reason).")
else:
    why = (" Where a figure is within the band, the runs cannot tell its scaling from linear: the loss is within "
           "the noise.")
theirs = (f" The H200 reference ({ref['device'].iloc[0]}, steady state): {efficiencies(a.reference_scaling)}."
          if a.reference_scaling else "")
print(f"4. your runs: {efficiencies(a.scaling)}.{why}{theirs}")
mn, sp = a.multi_node, a.multi_node_speed
peak = (f"{mn['peak memory per rank MiB']:,.0f} MiB ({mn['memory']})" if mn["peak memory per rank MiB"] is not None
        else "n/a")
print(f"5. several nodes, from {mn['source']}: {mn['nodes (distinct hosts)']} host(s), {mn['ranks']} ranks, "
      f"{mn['tokens/s']:,} tokens/s ({mn['tokens/s against 1 rank']} the one-rank run of the same experiment"
      + (f"; per rank {sp.ratio:.0%} of it, {LINEAR[sp.verdict]}, {sp.band_text}" if sp and a.on_gpu else "")
      + ("" if a.on_gpu else "; CPU processes: not a scaling figure, see 4")
      + f"), peak per rank {peak} ({mn['run']}). "
      + ("Between real nodes the gradients travel over the network (on GPUs NCCL over InfiniBand or Ethernet, here "
         + ("NCCL" if a.on_gpu else "gloo over TCP") + "), slower than the links inside one node."
         if mn["nodes (distinct hosts)"] > 1 else
         "All its ranks ran on one host: no traffic between nodes was measured; a SLURM cluster gives the "
         "two-node run."))
for e, d in COMMS_RUNS.items():
    c = lesson.read_comms(d)
    if c is None:
        print(f"6. {e}: no {COMMS_FILE} in {d}.")
        continue
    k = lesson.comm_check(c, json.loads((d / "results.json").read_text()))
    ops = lesson.comm_measured(c, k.num_params, k.bytes_per_element).set_index("collective").drop("total")
    calls = ", ".join(f"{op} x{row['calls per step']:g} ({row['volume (Ψ)']:.2f}Ψ)" for op, row in ops.iterrows())
    line = (f"6. {e}, {k.world_size} ranks, per optimizer step: {calls}; gradients {k.gradients:.2f}Ψ, parameters "
            f"{k.parameters:.2f}Ψ, {k.paper.value:,.2f} MiB in all: {k.paper.ratio:.2f}x the paper's "
            f"{k.paper.other:,.2f} MiB ({k.paper.verdict}) and {k.deepspeed.ratio:.2f}x the count of DeepSpeed's "
            f"own collectives ({k.deepspeed.verdict}; band {k.deepspeed.band_text}: partition padding, the gradient "
            "norm's few bytes).")
    if k.paper.verdict == "higher" and k.zero_stage in (1, 2):
        line += (" DeepSpeed all-reduces each gradient bucket and keeps its partition of the sum "
                 "(`use_multi_rank_bucket_allreduce`, on by default) where the paper reduce-scatters: "
                 f"{k.gradients:.2f}Ψ for the gradients instead of Ψ.")
    elif k.paper.verdict == "lower" and k.zero_stage == 3:
        line += (f" The parameters moved {k.parameters:.2f}Ψ, not the paper's 2Ψ: ZeRO-3 need not gather every "
                 "parameter twice; it keeps a gathered parameter it will use again soon (`stage3_max_reuse_distance`) "
                 "and parameters under `stage3_param_persistence_threshold` whole on every rank.")
    print(line)
if ref is not None:
    small = lesson.Buckets(bk.num_params, 50_000_000, bk.bytes_per_element)
    print(f"7. {small.reduce_bucket_size:,} elements a bucket: {small.count} buckets of {small.bucket_mib:,.0f} MiB "
          f"instead of {bk.count} of {bk.bucket_mib:,.0f} MiB. The first is sent when {small.first_sent_at:.0%} of the "
          f"backward pass is done (not {bk.first_sent_at:.0%}), so {small.reduced_during_backward:.0%} of the "
          f"gradients (not {bk.reduced_during_backward:.0%}) can be reduced beside the last "
          f"{1 - small.first_sent_at:.0%} of the backward pass (not its last {1 - bk.first_sent_at:.0%}), and only "
          f"the last {small.last_mib:,.0f} MiB wait for its end (not {bk.last_mib:,.0f}). The cost: "
          f"{small.count} collectives instead of {bk.count}, each paying its latency; it pays where the reduction, "
          "not the compute, is the slower. Measure it: the A/B in docs/h200/README.md.")

# %% [markdown]
# ## Summary
# - ZeRO divides model states across ranks: stage 1 the optimizer states, stage 2 the gradients too, stage 3
#   the parameters too: 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N and 16Ψ/N bytes per GPU (Ψ parameters).
# - What is not model states (activations, logits, buffers) stays on every rank, so the peak per GPU stops
#   falling where those dominate; the reference table shows where that is for Qwen3-0.6B.
# - Batch jobs: `sbatch slurm/multi_gpu.slurm` (one node) and `sbatch --nodes=N slurm/multi_node.slurm`
#   (N nodes), with torchrun, srun or the deepspeed launcher, no ssh; results come back as `results.json`
#   and into the same tables and plots (`workshop report runs/*` adds the scaling table).
# - Per optimizer step the paper counts 2Ψ of traffic for data parallelism, ZeRO-1 and ZeRO-2, and 3Ψ for
#   ZeRO-3; `--comms-logger` writes what DeepSpeed's collectives moved in your run to `comms.json`. Gradient
#   buckets (`reduce_bucket_size`) decide how much of the reduction can hide behind the backward pass.
