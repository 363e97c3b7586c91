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
# # 1. Baseline: the Hugging Face Trainer without DeepSpeed
#
# **Learning goals**
# - fine-tune a causal LM on SQuAD with the plain HF `Trainer`, and read its loss and tokens/s;
# - measure GPU memory three ways, and see that model states are only part of it;
# - measure what the original workshop's recipe (`classic`: pad to 512 tokens, fp16, loss on all tokens) costs
#   against the default (pad per batch, bf16, loss on the answer).
#
# Every later notebook compares against these runs.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import json

from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import baseline as lesson
from workshop_lib import env, model, results
from workshop_lib.config import recipe_settings
from workshop_lib.train import run_experiment
from workshop_lib.units import MiB

display(Markdown(lessons.header("01_baseline")))
# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see lessons.notebook_run_options.
COMMON = lessons.notebook_run_options(size_micro_batches=True)  # prints the micro-batch size it chose, and why
print(f"device: {env.device_name()}, run options: {COMMON}")
NOTEBOOK, RUNS = "01_baseline", "runs/01_baseline"
print(f"The default recipe (config.RECIPES over each setting's base): {recipe_settings('default')}")
print(f"What this notebook's runs of it change on this machine ({env.device_name()}):")
display(Markdown(lesson.recipe_here(lessons.run_config(NOTEBOOK, "baseline", RUNS, **COMMON)).to_markdown(index=False)))

# %% [markdown]
# ## 1. One run
#
# A `RunConfig` names the experiment and the settings you change; the recipe gives the rest, as the table above
# changes it for this notebook and this machine.
# `lessons.run_config` gives this notebook's runs, those of the GPU reference. `run_experiment` checks the
# settings, trains with the HF `Trainer`, samples memory, and writes `results.json` (with the resolved
# configuration), `memory.csv` and `train_log.csv` (one row per optimizer step). `workshop run baseline` calls
# the same function.

# %%
# On a CPU a warm-up first, thrown away (`lessons.warm_up`; why: 00_setup, "How the numbers are measured")
lessons.warm_up(NOTEBOOK, RUNS, **COMMON)
base = run_experiment(lessons.run_config(NOTEBOOK, "baseline", RUNS, **COMMON))
print(
    f"{base['data_stats']['train']['used']} questions in micro-batches of up to "
    f"{base['config']['max_tokens_per_micro_batch']:,} tokens, {base['gradient_accumulation_steps']} per optimizer "
    f"step: {base['global_batch_size']} questions per step on average, {base['steps_per_epoch']} steps per epoch; "
    f"this run made {base['global_steps']} steps."
)
print(f"results: {RUNS}/baseline/results.json ({len(base)} keys)")

# %% [markdown]
# The loss per step from `train_log.csv`, the eval loss as a marker:

# %%
_ = results.plot_loss(results.load_results(f"{RUNS}/baseline"))  # shown once, by the backend
# %% [markdown]
# ## 2. The classic recipe
#
# The original workshop padded every prompt to 512 tokens, trained in fp16 and took the loss on every token. Run
# it, then compare.

# %%
classic = run_experiment(lessons.run_config(NOTEBOOK, "baseline_classic", RUNS, **COMMON))
df = results.load_results([f"{RUNS}/baseline", f"{RUNS}/baseline_classic"])
_ = results.plot_memory_over_time(df)  # shown once, by the backend
# %% [markdown]
# The memory figures (their phases: 00_setup, "How the numbers are measured"):
# - **GPU peak MiB** (NVML, as `nvidia-smi` shows): everything on the GPU, PyTorch's cache and the CUDA context
#   included. This is what runs out.
# - **torch peak reserved / allocated MiB**: what PyTorch's allocator holds, and the part in live tensors.
# - **model states MiB (measured)**: allocated memory right after the first optimizer step, when only what the run
#   keeps between steps is left.
# - **est. model states GPU MiB**: the estimate; for the baseline, the `Trainer`'s 16 bytes per parameter.
#
# The gap between model states and peak is mostly **activations**, saved for the backward pass, and **logits**:
# batch x sequence x vocabulary values, in the classic recipe:

# %%
c = recipe_settings("classic")
mb, length, vocab = c["train_micro_batch_size_per_gpu"], c["max_length"], model.count_params(c["model"])["vocab_size"]
print(
    f"{mb} x {length} x {vocab:,} logits of {c['model']}: {2 * mb * length * vocab / 1024 / MiB:.2f} GiB in "
    f"{c['precision']}, {4 * mb * length * vocab / 1024 / MiB:.2f} GiB more when the loss upcasts them to fp32"
)

# %% [markdown]
# ## 3. Tokens per micro-batch against gradient accumulation
#
# The default recipe fills each micro-batch with up to `max_tokens_per_micro_batch` tokens and steps the optimizer
# after each. `baseline_accum4` takes a quarter of the tokens per micro-batch and 4 micro-batches per step: about
# as many tokens per step, a quarter of them in each forward pass, so fewer activations held at once.

# %%
accum = run_experiment(lessons.run_config(NOTEBOOK, "baseline_accum4", RUNS, **COMMON))
df = results.load_results(RUNS)
_ = results.plot_memory_and_throughput(df)  # shown once, by the backend
# %% [markdown]
# ## 4. Your figures, beside the reference
#
# `lessons.table` (`workshop report` writes the same): each of your runs, with the GPU reference run of the same
# name and its band under it.
#
# **MFU** (model FLOPs utilisation): tokens/s x FLOPs per token / the GPU's peak 16-bit FLOP/s. FLOPs per token
# (`metrics.flops_per_token`) = 6N for the N parameters' matmuls, forward and backward, + 12·L·H·Q·T for attention
# (L layers, H·Q heads x head dimension, T tokens per sequence; PaLM, Chowdhery et al. 2022, appendix B).
# **HFU** (hardware FLOPs utilisation) also counts recomputed work: with activation checkpointing (notebook 2) MFU
# falls and HFU exceeds it by the recomputed forward pass. Both are "n/a" on a CPU.

# %%
display(Markdown(lessons.table(NOTEBOOK, RUNS).to_markdown(index=False)))
print(lessons.reference_note())
runs = {name: json.loads(open(f"{RUNS}/{name}/results.json").read()) for name in lessons.COURSE_RUNS[NOTEBOOK]}
f = lesson.figures(runs["baseline"], runs["baseline_classic"], runs["baseline_accum4"])

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Answer from the table above and your runs' `results.json` (`f` holds the figures computed from them:
# `f.padding_fraction`, `f.speed.ratio`, `f.accum_peak`, ...).
#
# 1. Why are the train losses of the two recipes not comparable?
# 2. The classic recipe computes on padding. Using `data_stats` in `results.json`, what fraction of the tokens it
#    processes are padding? How much faster could removing the padding alone make it?
# 3. Which recipe processes more *real* tokens per second (`steady_train_tokens_per_second`), and by how much?
#    Does the padding explain all of it?
# 4. A quarter of the tokens per micro-batch x 4 against the whole budget x 1: what happened to the loss, to
#    tokens/s and to the peak memory? Why?
#
# 5. How many bytes per parameter are the measured model states of the baseline? Is that the estimate's 16? Why
#    (not)?
# 6. What is in NVML's peak that is not in torch's peak reserved?

# %% [markdown]
# ## Summary
# - NVML's peak decides an out-of-memory error; the model states are only part of it, activations and logits the
#   rest.
# - Padding to a fixed length spends compute on nothing; per-batch padding and length grouping avoid it.
