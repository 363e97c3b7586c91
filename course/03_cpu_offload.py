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
# # 3. CPU offload: trading speed for GPU memory
#
# **Learning goals**
# - offload the optimizer (ZeRO-2 and ZeRO-3) and the parameters (ZeRO-3) to CPU memory;
# - measure what moves: GPU memory, host memory and tokens/s;
# - decide when offload is worth it.
#
# ZeRO-Offload (Ren et al. 2021) keeps the fp32 optimizer states on the CPU and runs the Adam step there
# (DeepSpeed's vectorised CPU Adam); the GPU keeps the 16-bit parameters and computes forward and backward. Every
# step, gradients go to the CPU and updated parameters come back over PCIe. ZeRO-3 can also keep the 16-bit
# parameters on the CPU and stream them in layer by layer.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import json
from pathlib import Path

import torch
from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import offload as lesson
from workshop_lib import ds_config, env, results
from workshop_lib.train import run_experiment

display(Markdown(lessons.header("03_cpu_offload")))
# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see lessons.notebook_run_options.
COMMON = lessons.notebook_run_options(size_micro_batches=True)  # prints the micro-batch size it chose, and why
print(f"device: {env.device_name()}, run options: {COMMON}")
NOTEBOOK, RUNS = "03_cpu_offload", "runs/03_cpu_offload"
# stage2, stage2_offload, stage3, stage3_offload (not the reference-only run of the own-key exercise)
ORDER = [n for n in lessons.COURSE_RUNS[NOTEBOOK] if n not in lesson.OWN_KEYS.values()]

# %% [markdown] tags=["exercise"]
# **Predict first.** How many bytes per parameter of model states will each run leave on the GPU? Write them in
# `MY_BYTES_PER_PARAM`.

# %%
MY_BYTES_PER_PARAM = {name: None for name in ORDER}

# %%
# On a CPU a warm-up first, thrown away (`lessons.warm_up`; why: 00_setup, "How the numbers are measured")
lessons.warm_up(NOTEBOOK, RUNS, **COMMON)
for name in ORDER:
    run_experiment(lessons.run_config(NOTEBOOK, name, RUNS, **COMMON))
df = results.load_results([f"{RUNS}/{n}" for n in ORDER])
_ = results.plot_memory_and_throughput(df)  # shown once, by the backend
_ = results.plot_memory_over_time(df)  # shown once, by the backend
measured, source = lessons.states_per_param(NOTEBOOK, RUNS, ORDER)
print(f"Model states on the GPU per parameter after the first step, measured in {source}:")
display(Markdown(lessons.beside_prediction(MY_BYTES_PER_PARAM, measured, "bytes").to_markdown(index=False)))

# %% [markdown]
# Host memory matters now: the offloaded optimizer states (at least 12 bytes per parameter) live in the process's
# RAM; on a shared node the ranks add up. `host_states_rss_mib` (`results.json`) is the process's RSS after
# the first optimizer step, once they exist.

# %% [markdown]
# ## Your figures, beside the reference
#
# As in notebooks 1 and 2 (`lessons.table`). "est. model states CPU MiB" is DeepSpeed's budget for the states'
# host memory (`estimate_zero2_model_states_mem_needs` / `estimate_zero3_...`, with its 1.5x buffer factor).

# %%
display(Markdown(lessons.table(NOTEBOOK, RUNS).to_markdown(index=False)))
print(lessons.reference_note())
runs = {name: json.loads(open(f"{RUNS}/{name}/results.json").read()) for name in ORDER}
# exercise 3 parts compilation from ZeRO with notebook 02's runs (yours on a GPU, else the reference)
f = lesson.figures(runs, lesson.reference_runs(lessons.reference(NOTEBOOK)), lesson.compile_runs("runs/02_zero_stages"))

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Answer from the table (`f` holds the figures from your runs: `f.stage2.speed`, ...).
#
# 1. How many MiB of GPU memory (model states, and peak) does offloading save at stage 2 and at stage 3, and what
#    does each cost in tokens/s (as a ratio)?
# 2. Where did the memory go? How many bytes per parameter did the host's RSS after step 1 grow by, and how does
#    that compare with DeepSpeed's budget (est. model states CPU MiB)?
# 3. Compare what ZeRO-3's offload (parameters and optimizer) and ZeRO-2's (optimizer) freed of the peak. Explain
#    from each offload run's model states and its peak (without a GPU: the reference's).
# 4. When would you use offload in practice?

# %% [markdown] tags=["exercise"]
# **Exercise: a key of your own.** As in 02, on `stage2_offload`: pick a key of its `offload_optimizer` section
# (`ds_config.explain`; the next cell shows a GPU reference run of `pin_memory=false` if on file), write it in
# `MY_OVERRIDE`, your prediction in `MY_PREDICTION`, and run that cell.

# %%
MY_OVERRIDE = None  # "KEY=VALUE", as after workshop run stage2_offload --ds-config
MY_PREDICTION = ""

# %%
MINE = lessons.run_own_key(NOTEBOOK, "stage2_offload", MY_OVERRIDE, RUNS, **COMMON)  # runs/stage2_offload_mine
if MINE:
    cols = ["steady_train_tokens_per_second", "host_peak_rss_mib"]
    display(Markdown(lessons.table(NOTEBOOK, RUNS, cols, runs=MINE).to_markdown(index=False)))
    print(f"Your prediction: {MY_PREDICTION or '(none written)'}")
# The GPU reference's stage2_offload with the suggested key, made after a stage2_offload in one process
cols = ["steady_train_tokens_per_second", "host_states_rss_mib", "host_peak_rss_mib", "gpu_peak_allocated_mib"]
lessons.show_own_key_references(NOTEBOOK, "stage2_offload", lesson.OWN_KEYS, cols)

# %% [markdown]
# ## Summary
# - Offload frees the model states on the GPU, not what the steps add; the host holds at least 12 more bytes per
#   parameter, and each step waits for the CPU.
# - Use it when the model states do not fit otherwise.
