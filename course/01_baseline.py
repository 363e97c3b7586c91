# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 1. Baseline: the Hugging Face Trainer without DeepSpeed
#
# **Learning goals**
# - fine-tune a causal LM on SQuAD with the plain HF `Trainer`, and read its loss, eval loss and throughput;
# - measure GPU memory three ways (NVML over time, PyTorch's peak allocation, the model states measured
#   after the first step beside their estimate) and see that model states are only part of it;
# - see what the original workshop's recipe (`classic`: pad to 512 tokens, fp16, loss on all tokens) costs
#   against the default one (pad per batch, bf16, loss on the answer).
#
# Every later notebook compares against the numbers you measure here.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import json

from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import baseline as lesson
from workshop_lib import env, results
from workshop_lib.config import recipe_settings
from workshop_lib.train import run_experiment

display(Markdown(lessons.header("01_baseline")))
# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see lessons.notebook_run_options.
COMMON = lessons.notebook_run_options(size_micro_batches=True)  # prints the micro-batch size it chose, and why
print(f"device: {env.device_name()}, run options: {COMMON}")
NOTEBOOK, RUNS = "01_baseline", "runs/01_baseline"
recipe_settings("default")  # the default recipe: its overlay (config.RECIPES) over each setting's base

# %% [markdown]
# ## 1. One run
#
# A run is described by a `RunConfig`: the experiment's name and the settings you change; every field left
# out comes from the recipe shown above (`workshop run --help` lists the same fields, with their units).
# `lessons.run_config` gives the runs of this notebook (`lessons.COURSE_RUNS`), the same ones the GPU
# reference ran. `run_experiment` checks every setting before it writes anything, loads the data and the
# model, trains with the HF `Trainer`, evaluates after every epoch, samples memory in a background thread,
# and writes `results.json` (with the whole resolved configuration under `config`), `memory.csv` (the time
# series) and `train_log.csv` (one row per optimizer step) into its output directory. The same function is
# behind `workshop run baseline` on the command line.

# %%
# A warm-up run first, thrown away (`lessons.warm_up`): a kernel's first run is slower than the same run later
# (on a GPU about half as fast, unless a run as long comes first; lab/findings/h100/first-run), and would be compared so
print(f"warm-up: {lessons.warm_up(NOTEBOOK, RUNS, **COMMON):.0f} s, not measured")
base = run_experiment(lessons.run_config(NOTEBOOK, "baseline", RUNS, **COMMON))
print(f"{base['data_stats']['train']['used']} questions in micro-batches of up to "
      f"{base['config']['max_tokens_per_micro_batch']:,} tokens, {base['gradient_accumulation_steps']} per optimizer "
      f"step: {base['global_batch_size']} questions per step on average, {base['steps_per_epoch']} steps per epoch; "
      f"this run made {base['global_steps']} steps.")
print(f"results: {RUNS}/baseline/results.json ({len(base)} keys)")

# %% [markdown]
# The loss per step, from `train_log.csv` (the eval loss after each epoch, or at the end, as a marker):

# %%
results.plot_loss(results.load_results(f"{RUNS}/baseline"));

# %% [markdown]
# ## 2. The classic recipe
#
# The original workshop padded every prompt to 512 tokens, trained in fp16 and took the loss on every
# token. Run it, then compare.

# %%
classic = run_experiment(lessons.run_config(NOTEBOOK, "baseline_classic", RUNS, **COMMON))
df = results.load_results([f"{RUNS}/baseline", f"{RUNS}/baseline_classic"])
results.plot_memory_over_time(df);

# %% [markdown]
# Memory, measured in phases that mean the same in every run (`workshop_lib.memory`): the clock starts
# before the Trainer is built, time 0 is the first training step, peaks are over the training steps only.
# - **GPU peak MiB** (NVML, what `nvidia-smi` shows): everything on the GPU: PyTorch's tensors, its cache
#   of freed blocks, the CUDA context and library workspaces. This is what runs out.
# - **torch peak reserved / allocated MiB**: what PyTorch's caching allocator holds, and the part of it in
#   live tensors at their peak.
# - **model states MiB (measured)**: allocated memory right after the first optimizer step, when what the
#   run keeps between steps (weights, optimizer states) is all that is left.
# - **est. model states GPU MiB**: the estimate; for the baseline, what the Trainer holds with torch AdamW
#   (16 bytes per parameter: fp32 weights, fp32 gradients, Adam's two moments); DeepSpeed's estimators for
#   the ZeRO runs of the next notebooks.
#
# The gap between the model states and the peak is mostly **activations**, saved for the backward pass, and
# the **logits**: batch x sequence x vocabulary numbers (4 x 512 x 250,880 for BLOOM in the classic recipe,
# 514M values: 1 GiB in fp16, 2 GiB more when the loss upcasts them to fp32).

# %% [markdown]
# ## 3. Tokens per micro-batch against gradient accumulation
#
# The default recipe fills each micro-batch with up to `max_tokens_per_micro_batch` tokens of similar-length
# questions and takes one optimizer step per micro-batch. A quarter of the tokens per micro-batch and 4
# micro-batches per step (`baseline_accum4`) trains on about as many tokens per optimizer step; the two
# differ in how much work each forward pass hands the GPU and how many activations it must hold at once.

# %%
accum = run_experiment(lessons.run_config(NOTEBOOK, "baseline_accum4", RUNS, **COMMON))
df = results.load_results(RUNS)
results.plot_memory_and_throughput(df);

# %% [markdown]
# ## 4. Your figures, beside the reference
#
# One table of everything the exercises need (`lessons.table`, over `results.exercise_table`, which
# `workshop report` also writes): each of your runs, and under it the GPU reference run of the same name with
# its band, the largest spread between two measurements of that run (a difference smaller than the band is
# noise, not a finding).
#
# **MFU** (model FLOPs utilisation) is the share of the GPU's peak 16-bit FLOP/s that the model's own arithmetic
# uses: tokens/s x FLOPs per token / peak FLOP/s. FLOPs per token (`metrics.flops_per_token`) = 6N for the
# forward and backward matmuls of the N parameters + 12·L·H·Q·T for attention (L layers, H·Q heads x head
# dimension, T tokens per sequence; PaLM, Chowdhery et al. 2022, appendix B), with the LM head counted only at
# the positions whose logits the run computes. **HFU** (hardware FLOPs utilisation) also counts work the
# hardware repeats: with activation checkpointing (notebook 2) the forward pass of every block runs twice, so HFU
# rises while MFU, the useful work, does not. Both are "n/a" on a CPU (no peak FLOP/s to divide by).

# %%
display(Markdown(lessons.table(NOTEBOOK, RUNS).to_markdown(index=False)))
print(lessons.reference_note())
runs = {name: json.loads(open(f"{RUNS}/{name}/results.json").read()) for name in lessons.COURSE_RUNS[NOTEBOOK]}
f = lesson.figures(runs["baseline"], runs["baseline_classic"], runs["baseline_accum4"])

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Answer from the table above and your runs' `results.json` (`f`, computed from them, holds the figures:
# `f.padding_fraction`, `f.speed.ratio`, `f.accum_peak`, ...).
#
# 1. Why are the train losses of the two recipes not comparable?
# 2. The classic recipe computes on padding. Using `data_stats` in `results.json`, what fraction of the
#    tokens it processes are padding? How much faster could removing the padding alone make it?
# 3. Which recipe processes more *real* tokens per second (`steady_train_tokens_per_second`), and by how much?
#    Does the padding explain all of it?
# 4. A quarter of the tokens per micro-batch x 4 against the whole budget x 1: what happened to the loss, to
#    tokens/s and to the peak memory? Why?
# 5. How many bytes per parameter are the measured model states of the baseline? Is that the estimate's 16?
#    Why (not)?
# 6. What is in NVML's peak that is not in torch's peak reserved?

# %% [markdown]
# ## Summary
# - The baseline is the HF `Trainer` alone: all model states, activations and logits live on one GPU.
# - NVML's peak is what decides an out-of-memory error; the measured model states are one part of it, the
#   activations and logits of the training steps the rest (exercise 5 asks for the split in your run).
# - Padding to a fixed length spends compute on nothing; per-batch padding and length grouping avoid it.
