# %% [markdown]
# # 3. CPU offload: trading speed for GPU memory
#
# **Learning goals**
# - offload the optimizer (ZeRO-2 and ZeRO-3) and the parameters (ZeRO-3) to CPU memory;
# - measure what moves: GPU memory down, host memory up, samples/s down;
# - decide when offload is worth it.
#
# ZeRO-Offload (Ren et al. 2021) keeps the fp32 optimizer states on the CPU and runs the Adam step there
# with DeepSpeed's vectorised CPU Adam; the GPU keeps the 16-bit parameters and computes forward and
# backward. Gradients travel to the CPU and updated parameters back over PCIe every step. ZeRO-3 can also
# keep the 16-bit parameters on the CPU and stream them in layer by layer.
#
# *Learner version: fill the exercise tables from your own runs; the answers are in `solutions/`.*

# %%
from IPython.display import Markdown, display

from workshop_lib import env, results
from workshop_lib.config import RunConfig
from workshop_lib.train import run_experiment

# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see env.notebook_run_options.
COMMON = env.notebook_run_options()
print(f"device: {env.device_name()}, run options: {COMMON}")
RUNS = "runs/03_cpu_offload"
ORDER = ["stage2", "stage2_offload", "stage3", "stage3_offload"]

# %%
for experiment in ORDER:
    run_experiment(RunConfig(experiment, output_dir=f"{RUNS}/{experiment}", **COMMON))
df = results.load_results(RUNS).set_index("experiment").loc[ORDER].reset_index()
display(Markdown(results.exercise_table(df).to_markdown(index=False)))
results.plot_memory_and_throughput(df);

# %% [markdown]
# Host memory matters now: the offloaded optimizer states (12 bytes per parameter, plus pinned buffers)
# live in the process's RAM, and on a shared node several ranks add up.

# %%
df[["experiment", "host_peak_rss_mib", "estimated_model_states_cpu_mib", "gpu_peak_mib",
    "estimated_model_states_gpu_mib"]]

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# | experiment | train loss | eval loss per epoch | samples/s | steps per epoch | GPU peak MiB | GPU mean MiB | GPU min MiB | host peak RSS MiB |
# | --- | --- | --- | --- | --- | --- | --- | --- | --- |
# | stage2 | | | | | | | | |
# | stage2_offload | | | | | | | | |
# | stage3 | | | | | | | | |
# | stage3_offload | | | | | | | | |
#
# 1. How many MiB of GPU memory does offloading save at stage 2 and at stage 3, and what does each cost in
#    samples/s (as a ratio)?
# 2. Where did the memory go? Compare host peak RSS.
# 3. When would you use offload in practice?

# %% [markdown]
# ## Summary
# - Offload moves the optimizer states (and at stage 3 the parameters) to CPU memory: GPU memory falls by
#   about 12 (or 14) bytes per parameter, host memory rises by as much, each step waits for the CPU.
# - On one GPU, offload, not the ZeRO stage, is what frees GPU memory.
