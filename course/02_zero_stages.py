# %% [markdown]
# # 2. ZeRO stages 1, 2 and 3 on one GPU
#
# **Learning goals**
# - read a DeepSpeed config and know what each ZeRO stage partitions;
# - run the same fine-tuning under ZeRO-1, -2 and -3 through the HF `Trainer`'s DeepSpeed integration;
# - measure what each stage saves in memory and costs in speed on **one** GPU, explain what you see, and
#   predict what changes with several GPUs (notebook 4);
# - trade compute for activation memory with activation checkpointing.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import json

from IPython.display import Markdown, display

from workshop_lib import env, lessons, results
from workshop_lib.ds_config import build_ds_config
from workshop_lib.lessons import zero_stages as lesson
from workshop_lib.train import run_experiment

display(Markdown(lessons.header("02_zero_stages")))
# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see env.notebook_run_options.
COMMON = env.notebook_run_options()
print(f"device: {env.device_name()}, run options: {COMMON}")
NOTEBOOK, RUNS = "02_zero_stages", "runs/02_zero_stages"

# %% [markdown]
# ## 1. The config
#
# ZeRO (Rajbhandari et al. 2020) removes the redundancy of data parallelism: instead of every GPU holding
# all model states, each of N GPUs keeps 1/N of
# - stage 1: the optimizer states (fp32 master weights, Adam's momentum and variance: 12 of the 16 bytes/param);
# - stage 2: also the gradients;
# - stage 3: also the 16-bit parameters, gathered layer by layer just before they are used.
#
# One function builds every config; `"auto"` values are filled by the HF Trainer from its own arguments
# (learning rate, warmup, ...), so the two never disagree.

# %%
print(json.dumps(build_ds_config(zero_stage=3, precision="bf16", train_micro_batch_size_per_gpu=4,
                                 gradient_accumulation_steps=4, world_size=1), indent=2))

# %% [markdown]
# ## 2. Run the stages
#
# The baseline first, so that this notebook stands alone, then stages 1, 2, 3 (`lessons.COURSE_RUNS`, the
# same runs as the GPU reference). Each run writes its resolved `ds_config.json` beside its results.

# %%
ORDER = ["baseline", "stage1", "stage2", "stage3"]
for name in ORDER:
    run_experiment(lessons.run_config(NOTEBOOK, name, RUNS, **COMMON))
df = results.load_results([f"{RUNS}/{n}" for n in ORDER])
results.plot_memory_and_throughput(df);
results.plot_memory_over_time(df);

# %% [markdown]
# ## 3. Activation checkpointing
#
# ZeRO partitions model states; it does nothing for the activations that the forward pass saves for the
# backward pass. Activation (gradient) checkpointing keeps only each transformer block's input and
# recomputes the rest during the backward pass: less memory, one more forward pass of compute.
# `--activation-checkpointing true` on the command line, `activation_checkpointing=True` here.

# %%
run_experiment(lessons.run_config(NOTEBOOK, "baseline_ac", RUNS, **COMMON))
ac = results.load_results([f"{RUNS}/baseline", f"{RUNS}/baseline_ac"])
results.plot_memory_over_time(ac);

# %% [markdown]
# ## Your figures, beside the reference
#
# Each of your runs, and under it the GPU reference run of the same name with its band (`lessons.table`; MFU and
# HFU as introduced in notebook 1: activation checkpointing recomputes each block's forward pass, which HFU
# counts and MFU does not).

# %%
display(Markdown(lessons.table(NOTEBOOK, RUNS).to_markdown(index=False)))
print(lessons.reference_note())
runs = {name: json.loads(open(f"{RUNS}/{name}/results.json").read()) for name in ["baseline", "stage1", "stage2",
                                                                                    "stage3", "baseline_ac"]}
f = lesson.figures(runs)

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Answer from the table above (`f`, computed from your runs, holds the figures: `f.stages["stage2"].speed`, ...).
#
# 1. How much GPU memory (peak allocated, and model states) does each stage save against the baseline on
#    one GPU? How does that compare with the estimate of the model states? Where the NVML peak and torch's
#    peak allocated disagree, what makes the difference?
# 2. Which stage is slowest, and why? Is every difference in speed larger than the band?
# 3. Do the losses agree across stages? Should they?
# 4. What did activation checkpointing save in memory, and what did it cost in tokens/s? What happened to MFU,
#    and to HFU?

# %% [markdown]
# ## Summary
# - ZeRO partitions model states *across data-parallel GPUs*. With N = 1 there is no partner to share with:
#   what does each stage still save, and what do its buckets and gathers cost? Your answers above say, for your run.
# - ZeRO does not touch activations and logits; activation checkpointing trades compute for them.
# - Two ways out for model states on one GPU: move them to the CPU (notebook 3), or add GPUs (notebook 4).
