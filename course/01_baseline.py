# %% [markdown]
# # 1. Baseline: the Hugging Face Trainer without DeepSpeed
#
# **Learning goals**
# - fine-tune a causal LM on SQuAD with the plain HF `Trainer`, and read its loss, eval loss and throughput;
# - measure GPU memory three ways (NVML over time, PyTorch's peak allocation, DeepSpeed's estimate of the
#   model states) and see that model states are only part of it;
# - see what the original workshop's recipe (`classic`: pad to 512 tokens, fp16, loss on all tokens) costs
#   against the default one (pad per batch, bf16, loss on the answer).
#
# Every later notebook compares against the numbers you measure here.
#
# *Learner version: fill the exercise tables from your own runs; the answers are in `solutions/`.*

# %%
from IPython.display import Markdown, display

from workshop_lib import env, results
from workshop_lib.config import RECIPES, RunConfig
from workshop_lib.train import run_experiment

# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see env.notebook_run_options.
COMMON = env.notebook_run_options()
print(f"device: {env.device_name()}, run options: {COMMON}")
RUNS = "runs/01_baseline"
RECIPES["default"]

# %% [markdown]
# ## 1. One run
#
# A run is described by a `RunConfig`: the experiment's name and the settings you change; every field left
# out comes from the recipe shown above (`workshop run --help` lists the same fields, with their units).
# `run_experiment` checks every setting before it writes anything, loads the data and the model, trains
# with the HF `Trainer`, evaluates after every epoch, samples memory in a background thread, and writes
# `results.json` (with the whole resolved configuration under `config`), `memory.csv` (the time series) and
# `train_log.csv` (one row per optimizer step) into its output directory. The same function is behind
# `workshop run baseline` on the command line.

# %%
base = run_experiment(RunConfig("baseline", output_dir=f"{RUNS}/baseline", **COMMON))
{k: base[k] for k in ("train_loss", "eval_loss", "train_samples_per_second", "train_tokens_per_second",
                      "steps_per_epoch", "gpu_peak_mib", "gpu_mean_mib", "gpu_min_mib", "host_peak_rss_mib")}

# %% [markdown]
# Global batch = micro-batch x gradient accumulation x GPUs = 4 x 4 x 1 = 16 sequences per optimizer step,
# so 500 questions give ceil(500 / 4) = 125 micro-batches, 32 optimizer steps per epoch (the last one
# short). The loss per step, from `train_log.csv`:

# %%
import pandas as pd

log = pd.read_csv(f"{RUNS}/baseline/train_log.csv")
ax = log.dropna(subset=["loss"]).plot(x="step", y="loss", figsize=(7, 3), title="training loss per step")
log.dropna(subset=["eval_loss"]).plot(x="step", y="eval_loss", ax=ax, marker="o", ls="");

# %% [markdown]
# ## 2. The classic recipe
#
# The original workshop padded every prompt to 512 tokens, trained in fp16 and took the loss on every
# token. Run it, then compare.

# %%
classic = run_experiment(RunConfig("baseline", recipe="classic", output_dir=f"{RUNS}/baseline_classic", **COMMON))
df = results.load_results([f"{RUNS}/baseline", f"{RUNS}/baseline_classic"])
display(Markdown(results.exercise_table(df).to_markdown(index=False)))
results.plot_memory_over_time(df);

# %% [markdown]
# Three measures of GPU memory:
# - **GPU peak/mean/min MiB** (NVML, what `nvidia-smi` shows): everything on the GPU, including PyTorch's
#   cache of freed blocks and the CUDA context (~500 MiB). This is what runs out.
# - **torch peak alloc MiB** (`torch.cuda.max_memory_allocated`): live tensors at their peak.
# - **DS est. model states** (DeepSpeed's estimator): parameters, gradients and optimizer states only.
#
# The gap between the estimate and the peak is mostly **activations**, saved for the backward pass, and the
# **logits**: batch x sequence x vocabulary numbers (4 x 512 x 250,880 for BLOOM in the classic recipe,
# 514M values, 1 GiB in fp16 and 2 GiB more when the loss upcasts them to fp32).

# %% [markdown]
# ## 3. Micro-batch against gradient accumulation
#
# The global batch is micro-batch x accumulation. 4 x 4 and 16 x 1 give the same optimizer steps on the
# same data, so the same loss; they differ in how much work each forward pass hands the GPU and how many
# activations it must hold at once.

# %%
big = run_experiment(RunConfig("baseline", train_micro_batch_size_per_gpu=16, gradient_accumulation_steps=1,
                               output_dir=f"{RUNS}/baseline_mb16", **COMMON))
print(f"4 x 4: loss {base['train_loss']}, {base['train_samples_per_second']} samples/s, peak "
      f"{base['gpu_peak_mib']} MiB;  16 x 1: loss {big['train_loss']}, {big['train_samples_per_second']} "
      f"samples/s, peak {big['gpu_peak_mib']} MiB")

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Fill the table from your own runs (the `results.json` files under `runs/01_baseline/`).
#
# | recipe | train loss | eval loss per epoch | samples/s | steps per epoch | GPU peak MiB | GPU mean MiB | GPU min MiB |
# | --- | --- | --- | --- | --- | --- | --- | --- |
# | default | | | | | | | |
# | classic | | | | | | | |
#
# 1. Why are the train losses of the two recipes not comparable?
# 2. The classic recipe computes on padding. Using `data_stats` in `results.json`, what fraction of the
#    tokens it processes are padding?
# 3. Which recipe processes more *real* tokens per second (`train_tokens_per_second`), and by how much?
# 4. Micro-batch 16 x accumulation 1 against 4 x 4: what happened to the loss, to samples/s and to the GPU
#    peak? Why?

# %% [markdown]
# ## Summary
# - The baseline is the HF `Trainer` alone: all model states, activations and logits live on one GPU.
# - NVML's peak is what decides an out-of-memory error; the model states (16 bytes per parameter) are a
#   fraction of it, activations and logits the rest.
# - Padding to a fixed length spends compute on nothing; per-batch padding and length grouping avoid it.
