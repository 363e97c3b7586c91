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

# %% tags=["solution"]
t = results.exercise_table(df)
display(Markdown(t[["experiment", "train loss", "eval loss per epoch", "samples/s", "steps/epoch", "GPU peak MiB",
                    "GPU mean MiB", "GPU min MiB", "host peak RSS MiB"]].to_markdown(index=False)))
r = df.set_index("experiment")
gpu = r["gpu_peak_mib"].notna().all()
for s in ("stage2", "stage3"):
    o = f"{s}_offload"
    saved = f"{r.gpu_peak_mib[s] - r.gpu_peak_mib[o]:,.0f} MiB of GPU peak" if gpu else "(no GPU here: nothing to save)"
    print(f"1. {s}: offload saves {saved} and runs at "
          f"{r.train_samples_per_second[o] / r.train_samples_per_second[s]:.2f}x the samples/s.")
    print(f"2. {s}: host peak RSS {r.host_peak_rss_mib[s]:,.0f} -> {r.host_peak_rss_mib[o]:,.0f} MiB "
          f"(DeepSpeed estimates {r.estimated_model_states_cpu_mib[o]:,.0f} MiB of CPU model states).")
print("3. When the model states do not fit on the GPUs you have (fine-tuning a model several times larger "
      "than GPU memory allows, on few GPUs), or to free GPU memory for a larger micro-batch or longer "
      "sequences. Not when it fits: the CPU Adam step and PCIe traffic make every step slower.")

# %% [markdown]
# ## Summary
# - Offload moves the optimizer states (and at stage 3 the parameters) to CPU memory: GPU memory falls by
#   about 12 (or 14) bytes per parameter, host memory rises by as much, each step waits for the CPU.
# - On one GPU, offload, not the ZeRO stage, is what frees GPU memory.
