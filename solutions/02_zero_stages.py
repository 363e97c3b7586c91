# %% [markdown]
# # 2. ZeRO stages 1, 2 and 3 on one GPU
#
# **Learning goals**
# - read a DeepSpeed config and know what each ZeRO stage partitions;
# - run the same fine-tuning under ZeRO-1, -2 and -3 through the HF `Trainer`'s DeepSpeed integration;
# - explain why, on **one** GPU, ZeRO saves almost no memory and costs speed, and why that changes with
#   several GPUs (notebook 4).

# %%
import json

from IPython.display import Markdown, display

from workshop_lib import env, results
from workshop_lib.ds_config import build_ds_config
from workshop_lib.config import RunConfig
from workshop_lib.train import run_experiment

# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see env.notebook_run_options.
COMMON = env.notebook_run_options()
print(f"device: {env.device_name()}, run options: {COMMON}")
RUNS = "runs/02_zero_stages"

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
# The baseline first, so that this notebook stands alone, then stages 1, 2, 3. Each run writes its
# resolved `ds_config.json` beside its results.

# %%
for experiment in ["baseline", "stage1", "stage2", "stage3"]:
    run_experiment(RunConfig(experiment, output_dir=f"{RUNS}/{experiment}", **COMMON))
df = results.load_results(RUNS).set_index("experiment").loc[["baseline", "stage1", "stage2", "stage3"]].reset_index()
display(Markdown(results.exercise_table(df).to_markdown(index=False)))

# %%
results.plot_memory_and_throughput(df);
results.plot_memory_over_time(df);

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# | experiment | train loss | eval loss per epoch | samples/s | steps per epoch | GPU peak MiB | GPU mean MiB | GPU min MiB |
# | --- | --- | --- | --- | --- | --- | --- | --- |
# | baseline | | | | | | | |
# | stage1 | | | | | | | |
# | stage2 | | | | | | | |
# | stage3 | | | | | | | |
#
# 1. How much GPU memory (peak) does each stage save against the baseline? How does that compare with
#    DeepSpeed's estimate of the model states?
# 2. Which stage is slowest, and why?
# 3. Do the losses agree across stages? Should they?

# %% tags=["solution"]
t = results.exercise_table(df)
display(Markdown(t[["experiment", "train loss", "eval loss per epoch", "samples/s", "steps/epoch", "GPU peak MiB",
                    "GPU mean MiB", "GPU min MiB"]].to_markdown(index=False)))
mem = "gpu_peak_mib" if df["gpu_peak_mib"].notna().all() else "host_peak_rss_mib"
b = df.iloc[0]
for _, r in df.iloc[1:].iterrows():
    print(f"1. {r.experiment}: peak {r[mem]:,.0f} MiB vs baseline {b[mem]:,.0f} ({r[mem] - b[mem]:+,.0f} MiB); "
          f"estimated model states {r.estimated_model_states_gpu_mib:,.0f} MiB")
slow = df.loc[df.train_samples_per_second.idxmin()]
print(f"2. slowest: {slow.experiment} ({slow.train_samples_per_second} samples/s vs baseline "
      f"{b.train_samples_per_second}). Stage 3 gathers every layer's parameters before its forward and "
      "again before its backward, and re-partitions them after: extra copies and synchronisation that buy "
      "nothing on a single GPU.")
spread = df.train_loss.max() - df.train_loss.min()
print(f"3. train losses span {spread:.4f}. Same data, same order, same optimizer maths: they should agree up "
      "to rounding (DeepSpeed's fused Adam and the Trainer's torch AdamW round differently).")

# %% [markdown]
# ## Summary
# - ZeRO partitions model states *across data-parallel GPUs*. With N = 1 each stage still holds everything,
#   so memory barely moves, and the bookkeeping (buckets, gathers) costs time; stage 3 the most.
# - The measured peak is dominated by activations and logits, which ZeRO does not touch.
# - Two ways out on one GPU: move states to the CPU (notebook 3), or add GPUs (notebook 4).
