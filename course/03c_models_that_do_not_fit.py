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
# # 3c. Models that do not fit: ZeRO-3 and CPU offload
#
# **Learning goals**
# - predict, before a run, whether a model fits a GPU: DeepSpeed's estimate of the model states, an estimate of
#   the activations, and the GPU's memory (`workshop_lib.fit`, and its explorer);
# - see a model that does not fit fail, through the workshop's own out-of-memory message, and read that message;
# - pick the change that makes it fit in the course's order, the cheapest in speed first: a smaller micro-batch and
#   activation checkpointing, then ZeRO stages and more GPUs, offload last (`fit.smallest_fix`);
# - train the same model, a few steps each, on the first rung that fits (activation checkpointing) and with ZeRO-3
#   and CPU offload, and measure what offload costs against checkpointing on your machine.
#
# Two more failures to recognise on sight, a batch size that does not add up across ranks and fp16 overflowing on
# a model pretrained in bf16, are drilled in `03d_failure_drills`, a short notebook of their own.
#
# Notebooks 02 and 03 trained Qwen3-0.6B, which fits one GPU anyway: offload only cost speed there. Here the model
# is the largest Qwen3, in micro-batches of the reference runs' <!--fig:reference-tokens-->8,192<!--/fig:reference-tokens--> tokens or the nearest size that works, that
# the HF Trainer alone and ZeRO-2 do not fit on this GPU while ZeRO-3 + CPU offload fits it and this machine's host
# memory, by the estimates (the next cell names it, with the numbers). Without a GPU, or where no model fits that
# description here, the runs use the tiny model, the estimates are for the H100 reference machine, and its
# reference runs are shown beside yours.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import pandas as pd
from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import large_models
from workshop_lib import env, fit, results
from workshop_lib.config import RunConfig
from workshop_lib.train import run_experiment

display(Markdown(lessons.header("03c_models_that_do_not_fit")))
COMMON = lessons.notebook_run_options()
CHOICE = large_models.pick_model(*large_models.this_machine())  # this GPU and host, or the reference machine's
BIG, GPU_MIB, HOST_MIB, HERE = CHOICE.model, CHOICE.gpu_mib, CHOICE.host_mib, CHOICE.here
GPU_KEY = large_models.nearest_gpu(GPU_MIB)  # the fit.GPUS entry for fit's explain and explorer
RUNS = "runs/03c_models_that_do_not_fit"
# Here: BIG with random weights (its real shape), the reference runs' settings in CHOICE's micro-batches, blocks
# not compiled (the activations fit.estimate counts; also no minutes of compiling a model that fails), at most
# 6 steps (seconds each at this size; the last 4 steady); else the tiny model.
LARGE = (
    dict(
        large_models.LARGE,
        model=BIG,
        random_weights=True,
        max_tokens_per_micro_batch=CHOICE.max_tokens,
        torch_compile=False,
        max_steps=min(COMMON["max_steps"] or 6, 6),
    )
    if HERE
    else {"tiny": True, "save_model": False}
)
print(f"device: {env.device_name()}. {CHOICE.line()}")

# %% [markdown]
# ## Will it fit?
# Per GPU, training with Adam needs the **model states** (16-bit weights and gradients, fp32 master weights and
# Adam's two moments: DeepSpeed's `estimate_zero2/zero3_model_states_mem_needs` say how ZeRO divides them), the
# **activations** kept for the backward pass (Korthikanti et al. 2022, eq. 1, counted for Qwen3's block), and the
# **logits**. `fit.estimate` adds them up, and a run fits when the total stays within <!--fig:verdict-share-->85%<!--/fig:verdict-share--> of the GPU's memory: the
# other <!--fig:headroom-->15%<!--/fig:headroom--> (`fit.HEADROOM`, the one margin of every verdict here, the preflight's and the micro-batch sizing's too)
# is for the CUDA context, the allocator's cache and fragmentation, and what the estimate leaves out.
#
# With offload, the optimizer states (and at stage 3 the parameters) move to the host's memory. When a run does not
# fit, `fit.explain` names the first change up the ladder that does: a smaller micro-batch, activation
# checkpointing, ZeRO-2 and ZeRO-3 on these GPUs and then on more, and only then offload; and, where that change
# takes more GPUs, what fits on the ones you have.
#
# The order is the course's own, the cheapest in speed first: every rung that keeps the model states on the GPU
# comes before offload, the slowest in the reference runs (on two H200s, Qwen3-8B with ZeRO-3 trained <!--fig:zero3-vs-offload-8b-->7.0x<!--/fig:zero3-vs-offload-8b--> faster
# than with ZeRO-3 + CPU offload, both with activation checkpointing; on one H100, Qwen3-4B with activation
# checkpointing alone <!--fig:checkpointing-vs-offload-4b-->4.5x<!--/fig:checkpointing-vs-offload-4b--> faster than with ZeRO-3 + CPU offload, its blocks compiled and offload's not). HF Transformers' DeepSpeed guide ("How to choose which ZeRO stage and offloads to use
# for best performance") also starts from batch size 1 and gradient checkpointing, but tries ZeRO-2 + CPU offload
# before ZeRO-3 and adds hardware only at its last step, beside NVMe offload (ZeRO-Infinity), which this course does
# not run (docs/guide.md says why).

# %%
display(large_models.configurations(BIG, GPU_MIB, HOST_MIB, CHOICE.max_tokens))
baseline_est = fit.estimate(BIG, None, "none", max_length=CHOICE.max_tokens, gpu=GPU_KEY, host_memory_mib=HOST_MIB)
print(fit.explain(baseline_est))

# %% [markdown]
# The explorer: change the model, ZeRO stage, offload, GPUs and micro-batch and watch the verdict. Every number
# comes from the same `fit.estimate` (in a notebook without a live kernel the widgets do not move).

# %%
display(large_models.explorer())

# %% [markdown]
# ## Out of memory, on purpose
# The baseline (the HF Trainer alone: <!--fig:trainer-bytes-->16<!--/fig:trainer-bytes--> bytes per parameter on the GPU) with `BIG`. On a GPU the run starts and
# fails in its first steps with the workshop's out-of-memory message; without one (or where the estimates are the
# reference machine's), `fit.check_fits` raises the same verdict from the estimate. This cell is expected to raise.

# %% tags=["raises-exception"]
if HERE:
    run_experiment(RunConfig("baseline", output_dir=f"{RUNS}/baseline", overwrite=True, **LARGE))
else:
    fit.check_fits(model=BIG, zero_stage=None, offload="none", max_length=CHOICE.max_tokens, gpu=GPU_KEY)

# %% [markdown]
# ZeRO-2 partitions nothing on one GPU, and keeps fp32 gradients too: the workshop refuses it before building the
# model where DeepSpeed's estimate of the model states alone passes <!--fig:verdict-share-->85%<!--/fig:verdict-share--> of the GPU (the <!--fig:headroom-->15%<!--/fig:headroom--> headroom every verdict
# here keeps, `fit.HEADROOM`), and otherwise it runs out of memory in its first step (expected to raise).

# %% tags=["raises-exception"]
if HERE:
    run_experiment(RunConfig("stage2", output_dir=f"{RUNS}/stage2", overwrite=True, **LARGE))
else:
    fit.check_fits(model=BIG, zero_stage=2, offload="none", max_length=CHOICE.max_tokens, gpu=GPU_KEY)

# %% [markdown]
# **Reading an out-of-memory message.** PyTorch's says how much one allocation asked for ("Tried to allocate"),
# the GPU's capacity, what is free, what this process holds, and how much of it PyTorch allocated or only
# reserved in its cache. A large request on a nearly full GPU: the model states and activations are too big;
# a small request that fails with much "reserved but unallocated": fragmentation
# (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` helps). PyTorch's caching allocator keeps the memory of
# freed tensors reserved for the next ones, so nvidia-smi (NVML) shows far more in use than the live tensors;
# before it reports out of memory it hands the cached blocks back and retries, so the cache alone fails no run,
# but blocks too fragmented to serve a request do. The reference machine's runs, and its ZeRO-3 + CPU offload
# run as the example:

# %%
reference = large_models.reference_runs(large_models.REFERENCES["one H100 80GB, 128 GiB host"])
pd.set_option("display.max_colwidth", 400)
display(
    reference[
        [
            "model",
            "experiment",
            "activation checkpointing",
            "outcome",
            "est. total GPU MiB",
            "torch peak alloc MiB",
            "torch peak reserved MiB",
            "GPU peak MiB",
        ]
    ]
)
cache = large_models.allocator_cache()  # None without the reference runs (workshop_lessons/reference)
if cache:
    print(
        f"{cache.model} {cache.experiment} trained, estimated at {cache.estimate_mib:,.0f} MiB: PyTorch's live "
        f"tensors peaked at {cache.allocated_mib:,.0f} MiB, its reserved memory at {cache.reserved_mib:,.0f} MiB, "
        f"NVML at {cache.nvml_mib:,.0f} MiB ({cache.nvml_vs_estimate.ratio:.2f}x the estimate, "
        f"{cache.nvml_mib / cache.gpu_mib:.0%} of the GPU's {cache.gpu_mib:,.0f} MiB). At least "
        f"{cache.cached_mib:,.0f} MiB of it was reserved but unallocated: cache, not tensors."
    )

# %% [markdown]
# ## The first rung that fits, and ZeRO-3 + CPU offload
# The estimate above names the smallest change. Where it is activation checkpointing, the model fits one GPU
# without any ZeRO: each layer's activations are recomputed in the backward pass (about a third more FLOPs)
# instead of kept. Both that rung and ZeRO-3 + CPU offload train here, a few steps each, with the same model and
# micro-batches, so that the ratio of their speeds is your machine's (on a CPU after a warm-up, as in 00_setup).

# %%
fix = fit.fix_on_these_gpus(baseline_est)
print(f"smallest change that fits {BIG} on one {GPU_KEY}: {fix['change'] if fix else 'none'}")
rung = large_models.checkpointing_rung(baseline_est)  # that change as a run; None where it offloads
lessons.warm_up(
    "03c_models_that_do_not_fit",
    RUNS,
    experiments=[rung.experiment, "stage3_offload"] if rung else ["stage3_offload"],
    **LARGE,
)  # only without a GPU
if rung:
    run_experiment(
        RunConfig(
            rung.experiment,
            output_dir=f"{RUNS}/{rung.name}",
            overwrite=True,
            **dict(LARGE, activation_checkpointing=True),
        )
    )

# %% [markdown]
# ZeRO-3 + CPU offload is the rung a model needs when checkpointing is not enough and no more GPUs are to be had
# (exercise 3 asks which rung Qwen3-8B needs). Parameters, gradients and optimizer states partitioned (stage 3) and
# offloaded: the GPU keeps the layer being computed and the activations; the host keeps the rest, and runs Adam. The
# host's memory after the first step (`host_states_rss_mib`) is what the offloaded states took.

# %%
offload_run = run_experiment(RunConfig("stage3_offload", output_dir=f"{RUNS}/stage3_offload", overwrite=True, **LARGE))
df = results.load_results([f"{RUNS}/stage3_offload"])
display(
    df[
        [
            "model",
            "num_params",
            "steady_train_tokens_per_second",
            "gpu_peak_mib",
            "host_states_rss_mib",
            "estimated_model_states_gpu_mib",
            "estimated_model_states_cpu_mib",
        ]
    ]
)

# %% [markdown]
# Your two rungs, and the reference machine's (its model on one H100): steady tokens/s of each, their ratio, and
# the verdict against the band of steady tokens/s on that machine.

# %%
mine = large_models.rung_against_offload(f"{RUNS}/{rung.name}", f"{RUNS}/stage3_offload") if rung else None
ref_rung = large_models.checkpointing_against_offload()  # None without the reference runs (workshop_lessons/reference)
display(large_models.rung_ratios(mine, ref_rung))

# %% [markdown]
# ## Your runs beside the reference
# Your ZeRO-3 + CPU offload run, followed by the H100 reference run of the same experiment
# (workshop_lessons/reference/h100/large-models: the largest model that trained with it, so another model than yours). Host RSS after
# step 1 is the process's memory once the optimizer states exist; DeepSpeed's estimate of the host's model
# states is <!--fig:host-bytes-->18<!--/fig:host-bytes--> bytes per parameter x its <!--fig:buffer-factor-->1.5<!--/fig:buffer-factor--> buffer factor.

# %%
host_table = large_models.exercise_table(offload_run)
display(host_table)

# %% [markdown] tags=["exercise"]
# ## Exercises
# 1. How many bytes per parameter did the host hold after the first step of your ZeRO-3 + CPU offload run, and
#    how does that compare with DeepSpeed's estimate (<!--fig:host-bytes-->18<!--/fig:host-bytes--> bytes per parameter, x <!--fig:buffer-factor-->1.5<!--/fig:buffer-factor--> buffer factor)?

# %% [markdown] tags=["exercise"]
# 2. How many times faster than ZeRO-3 + CPU offload did the rung with activation checkpointing train on your
#    machine, and on the reference H100? Is your ratio the reference's, within the noise?

# %% [markdown] tags=["exercise"]
# 3. With the explorer: what is the smallest change that lets Qwen3-8B train on your GPU, and on one <!--fig:reference-gpu-->H100<!--/fig:reference-gpu--> with
#    <!--fig:reference-host-gib-->128<!--/fig:reference-host-gib--> GiB of host memory? Compare with the reference runs in workshop_lessons/reference/h100/large-models and
#    workshop_lessons/reference/h200/large-models-x2.

# %% [markdown]
# ## Summary
# - Whether a run fits is arithmetic you can do before it starts: model states (DeepSpeed's estimators),
#   activations and logits against the GPU's memory, and the offloaded states against the host's.
# - ZeRO-3 with CPU offload moves almost all model states off one GPU; what remains there is what a step
#   computes with. The host then holds the states and DeepSpeed's buffers (exercise 1).
# - Try the cheap rungs first: a smaller micro-batch and activation checkpointing, then ZeRO stages and more
#   GPUs; offload when nothing else fits the GPUs you have. What offload costs against
#   checkpointing is a ratio you measured on your machine, beside the reference's.
# - An out-of-memory message says what was asked for, what the GPU held and what PyTorch only cached: enough to
#   tell a model too big from fragmentation. `03d_failure_drills` drills two more failures.
