# %% [markdown]
# # 3c. Models that do not fit: ZeRO-3, CPU and NVMe offload
#
# **Learning goals**
# - predict, before a run, whether a model fits a GPU: DeepSpeed's estimate of the model states, an estimate of
#   the activations, and the GPU's memory (`workshop_lib.fit`, and its explorer);
# - see a model that does not fit fail, through the workshop's own out-of-memory message, and read that message;
# - make the same model train with ZeRO-3 and CPU offload, and offload to NVMe (ZeRO-Infinity) where the host's
#   memory is too small, after checking that DeepSpeed's `async_io` op builds (libaio);
# - recognise three failures on sight: out of memory, a batch size that does not add up across ranks, and fp16
#   overflowing on a model pretrained in bf16.
#
# Notebooks 02 and 03 trained Qwen3-0.6B, which fits one GPU anyway: offload only cost speed there. Here the model
# is the largest Qwen3 whose ZeRO-3 + CPU offload estimate fits this GPU and its host while the baseline's does
# not (the next cell names it). Without a GPU the runs use the tiny model, the estimates are for the H100 reference
# machine, and its reference runs are shown beside yours.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import Markdown, display

from workshop_lib import env, fit, results
from workshop_lib import lessons
from workshop_lib.config import RunConfig
from workshop_lib.errors import WorkshopError
from workshop_lib.lessons import drills
from workshop_lib.lessons import large_models
from workshop_lib.train import run_experiment

display(Markdown(lessons.header("03c_models_that_do_not_fit")))
COMMON = env.notebook_run_options()
GPU = torch.cuda.is_available()
GPU_KEY, HOST_MIB = large_models.this_gpu()  # this GPU, or the H100 reference machine without one
BIG = large_models.pick_model(GPU_KEY, HOST_MIB)
RUNS = "runs/03c_models_that_do_not_fit"
# On a GPU: BIG with random weights (its real shape) and the reference runs' settings; without: the tiny model.
LARGE = (dict(large_models.LARGE, model=BIG, random_weights=True, max_steps=COMMON["max_steps"] or 10) if GPU
         else {"tiny": True, "save_model": False})
print(f"device: {env.device_name()}; estimates for one {GPU_KEY} with {HOST_MIB / 1024:,.0f} GiB of host memory; "
      f"the model that does not fit: {BIG}")

# %% [markdown]
# ## Will it fit?
# Per GPU, training with Adam needs the **model states** (16-bit weights and gradients, fp32 master weights and
# Adam's two moments: DeepSpeed's `estimate_zero2/zero3_model_states_mem_needs` say how ZeRO divides them), the
# **activations** kept for the backward pass (Korthikanti et al. 2022, eq. 1, counted for Qwen3's block), and the
# **logits**. `fit.estimate` adds them up; with offload, the optimizer states (and at stage 3 the parameters) move
# to the host's memory, or to an NVMe drive.

# %%
display(large_models.configurations(BIG, GPU_KEY, HOST_MIB))
print(fit.explain(fit.estimate(BIG, None, "none", max_length=8192, gpu=GPU_KEY, host_memory_mib=HOST_MIB)))

# %% [markdown]
# The explorer: change the model, ZeRO stage, offload, GPUs and micro-batch and watch the verdict. Every number
# comes from the same `fit.estimate` (in a notebook without a live kernel the widgets do not move).

# %%
display(fit.explorer())

# %% [markdown]
# ## Out of memory, on purpose
# The baseline (the HF Trainer alone: 16 bytes per parameter on the GPU) with `BIG`. On a GPU the run starts and
# fails in its first steps with the workshop's out-of-memory message; without one, `fit.check_fits` raises the
# same verdict from the estimate. This cell is expected to raise.

# %% tags=["raises-exception"]
if GPU:
    run_experiment(RunConfig("baseline", output_dir=f"{RUNS}/baseline", overwrite=True, **LARGE))
else:
    fit.check_fits(model=BIG, zero_stage=None, offload="none", max_length=8192, gpu=GPU_KEY)

# %% [markdown]
# ZeRO-2 partitions nothing on one GPU, and keeps fp32 gradients too: the workshop refuses it before building the
# model when DeepSpeed's estimate of the model states alone passes 90% of the GPU (expected to raise).

# %% tags=["raises-exception"]
if GPU:
    run_experiment(RunConfig("stage2", output_dir=f"{RUNS}/stage2", overwrite=True, **LARGE))
else:
    fit.check_fits(model=BIG, zero_stage=2, offload="none", max_length=8192, gpu=GPU_KEY)

# %% [markdown]
# **Reading an out-of-memory message.** PyTorch's says how much one allocation asked for ("Tried to allocate"),
# the GPU's capacity, what is free, what this process holds, and how much of it PyTorch allocated or only
# reserved in its cache. A large request on a nearly full GPU: the model states and activations are too big;
# a small request that fails with much "reserved but unallocated": fragmentation
# (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` helps). The reference machine's runs:

# %%
reference = large_models.reference_runs(large_models.REFERENCES["one H100 80GB, 128 GiB host"])
pd.set_option("display.max_colwidth", 400)
display(reference[["model", "experiment", "activation checkpointing", "outcome"]])

# %% [markdown]
# ## ZeRO-3 + CPU offload trains it
# Parameters, gradients and optimizer states partitioned (stage 3) and offloaded: the GPU keeps the layer being
# computed and the activations; the host keeps the rest, and runs Adam.

# %%
offload_run = run_experiment(RunConfig("stage3_offload", output_dir=f"{RUNS}/stage3_offload", overwrite=True, **LARGE))
df = results.load_results([f"{RUNS}/stage3_offload"])
display(df[["model", "steady_train_tokens_per_second", "gpu_peak_mib", "host_peak_rss_mib",
            "estimated_model_states_gpu_mib", "estimated_model_states_cpu_mib"]])

# %% [markdown]
# ## NVMe offload (ZeRO-Infinity)
# When the host's memory is too small for the offloaded states, ZeRO-3 can keep them on a local NVMe drive and
# stream them through pinned buffers (DeepSpeed swaps tensors of 1 MiB and more; smaller ones stay in host memory).
# DeepSpeed does the I/O with its `async_io` op, which needs libaio; `ds_report` says whether it can build
# (`[OKAY]`). Where it cannot, the workshop stops with the fix.

# %%
print("\n".join(line for line in env.ds_report() if "async_io" in line))
try:
    env.check_deepspeed_ops(["AsyncIOBuilder"])
    nvme_ok = True
except WorkshopError as e:
    print(e)
    nvme_ok = False

# %%
nvme_run = None
if nvme_ok:
    nvme = dict(LARGE, max_steps=4) if GPU else LARGE  # every step reads and writes the optimizer states
    try:  # NVMe offload is the least travelled path: a failure is shown, not hidden
        nvme_run = run_experiment(RunConfig("stage3_nvme", output_dir=f"{RUNS}/stage3_nvme", overwrite=True, **nvme))
    except (WorkshopError, AssertionError, RuntimeError) as e:
        print(f"stage3_nvme stopped: {e}")
if nvme_run:
    df = results.load_results([f"{RUNS}/stage3_offload", f"{RUNS}/stage3_nvme"])
    display(df[["experiment", "steady_train_tokens_per_second", "host_states_rss_mib", "host_peak_rss_mib"]])
    swap = nvme_run["nvme_swap_mib"]
    print(f"on the drive when training ended: {swap['params']:,.1f} MiB of parameters, "
          f"{swap['optimizer']:,.1f} MiB of optimizer states"
          + ("; no parameter reached the 1 MiB swap minimum, so all stayed in host memory" if not swap["params"] else ""))

# %% [markdown]
# On the reference machine (docs/h100/large-models/nvme-vs-cpu), CPU and NVMe offload of the same
# model in one call: what each step pays for reading and writing the states on the drive, what the host keeps
# anyway, and which models' swap files (`memory.estimate_nvme_swap`, which `workshop run` checks against the
# drive's free space before it builds the model) that drive could hold.

# %%
display(large_models.offload_comparison())
n = large_models.nvme_summary()
display(n.comparisons())
print(f"pinned host buffers of NVMe offload (ds_config.json's offload_param): {n.buffer_count} x "
      f"{n.buffer_elements:,} elements x 2 bytes = {n.pinned_mib:,.0f} MiB")
n.swap_table()

# %% [markdown]
# ## Two more failure drills
# **A batch size that does not add up across ranks.** DeepSpeed checks train_batch_size = micro-batch x
# accumulation x world_size. A config written for one GPU and launched on two fails on every rank, before training:

# %%
mismatch = drills.batch_size_mismatch()
print("\n".join(mismatch["error_lines"]))
print("arithmetic:", mismatch["arithmetic"])
fixed = drills.batch_size_mismatch(fixed=True)
print(f"with build_ds_config(world_size=2): train_batch_size {fixed['config']['train_batch_size']}, "
      f"exit {fixed['returncode']}")

# %% [markdown]
# **fp16 on a model pretrained in bf16.** bf16 has fp32's range; fp16 stops at 65,504. Models trained in bf16
# grow a few "massive activations" (Sun et al. 2024) far beyond that. In fp16 they become inf, every step
# overflows, DeepSpeed's loss scaler halves the scale after each skipped step until it gives up; in bf16 the same
# steps train. (The tiny model gets one such activation planted: `drills.plant_massive_activation`.)

# %%
fp16 = drills.fp16_overflow()
drills.plot_fp16_overflow(fp16)
plt.show()
display(fp16.groupby("precision", sort=False).agg(
    steps=("step", "count"), skipped=("skipped", "sum"), first_loss=("loss", "first"), last_loss=("loss", "last"),
    first_loss_scale=("loss_scale", "first"), last_loss_scale=("loss_scale", "last")))

# %% [markdown]
# ## Your runs beside the reference
# Your ZeRO-3 + CPU offload and NVMe offload runs, each followed by the H100 reference run of the same experiment
# (docs/h100/large-models: the largest model that trained with it, so another model than yours). Host RSS after
# step 1 is the process's memory once the optimizer states exist; DeepSpeed's estimate of the host's model
# states is 18 bytes per parameter x its 1.5 buffer factor.

# %%
large_models.exercise_table(offload_run, nvme_run)

# %% [markdown] tags=["exercise"]
# ## Exercises
# 1. How many bytes per parameter did the host hold after the first step of your ZeRO-3 + CPU offload run, and
#    how does that compare with DeepSpeed's estimate (18 bytes per parameter, x 1.5 buffer factor)?

# %% [markdown] tags=["exercise"]
# 2. What did NVMe offload change in host memory and in tokens/s, against CPU offload?

# %% [markdown] tags=["exercise"]
# 3. What arithmetic did DeepSpeed print for the mismatched batch, and what is the fix?

# %% [markdown] tags=["exercise"]
# 4. How many fp16 steps were skipped before DeepSpeed stopped, and what did bf16 do with the same steps?

# %% [markdown] tags=["exercise"]
# 5. With the explorer: what is the smallest change that lets Qwen3-8B train on your GPU, and on one H100 with
#    128 GiB of host memory? Compare with the reference runs in docs/h100/large-models and
#    docs/h200/large-models-x2.

# %% [markdown]
# ## Summary
# - Whether a run fits is arithmetic you can do before it starts: model states (DeepSpeed's estimators),
#   activations and logits against the GPU's memory, and the offloaded states against the host's.
# - ZeRO-3 with CPU offload moves almost all model states off one GPU; what remains there is what a step
#   computes with. The host then holds about 18 bytes per parameter or more, and NVMe takes over where it cannot.
# - Out-of-memory messages, DeepSpeed's batch assertion and a collapsing loss scale each say what went wrong and
#   what to change.
