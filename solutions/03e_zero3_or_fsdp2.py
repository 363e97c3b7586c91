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
# # 3e. ZeRO-3 or FSDP2 (optional)
#
# **Learning goals**
# - know what DeepSpeed's ZeRO-3 and PyTorch's FSDP2 (`fully_shard`) each shard, gather and free, and when;
# - predict, then measure, both on one GPU and on two: memory per GPU by phase, steady tokens/s, with and without
#   torch.compile, and the collectives each makes per optimizer step;
# - decide, from your runs or the reference and its band, when to pick DeepSpeed and when FSDP2.
#
# Read notebooks 02 and 04 first: this one uses their tables (memory by phase, the band) and their counting of
# collectives (Ψ-sized transfers per step).

# %%
from pathlib import Path

import torch
from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import fsdp as lesson
from workshop_lib import ds_config, env, results
from workshop_lib.ds_config import EXPERIMENTS

display(Markdown(lessons.header("03e_zero3_or_fsdp2")))
COMMON = lessons.notebook_run_options()
GPUS = torch.cuda.device_count()
print(f"device: {env.device_name()}, GPUs: {GPUS}, run options: {COMMON}")
RUNS = Path("runs/03e_zero3_or_fsdp2")

# %% [markdown]
# ## 1. Two ways to shard the same model states
#
# Both keep 1/N of the parameters, gradients and optimizer states on each of N GPUs: 16Ψ/N bytes of model states
# (notebook 04's table, stage 3). They differ in how a layer's parameters come back when it runs:
#
# | | ZeRO-3 (DeepSpeed) | FSDP2 (PyTorch) |
# | --- | --- | --- |
# | shards | flat fp32 partitions, the engine's own buffers | each parameter a `DTensor` sharded on dim 0 |
# | gathers | per submodule, by hooks, in prefetch buckets (`stage3_prefetch_bucket_size`) | per unit (here one decoder layer), one all-gather each |
# | frees | after use, unless reused soon (`stage3_max_reuse_distance`) or small (`stage3_param_persistence_threshold`) | after the unit's forward (`reshard_after_forward`), gathered again for its backward |
# | gradients | reduce-scattered in buckets (`reduce_bucket_size`) | reduce-scattered per unit |
# | torch.compile | hooks split each compiled block: off here unless `--torch-compile-zero3 true` | compiles each block |
# | offload | CPU and NVMe (ZeRO-Infinity) | CPU (`CPUOffloadPolicy`) |
#
# ZeRO-3's keys (the workshop's stage-3 config) beside FSDP2's: the Trainer takes FSDP2's through `fsdp_config`
# (written to each fsdp2 run's `fsdp_config.json`).

# %%
display(Markdown(ds_config.explain(ds_config.build_ds_config("stage3")).to_markdown(index=False)))

# %% [markdown] tags=["exercise"]
# **Predict first.** FSDP2 against ZeRO-3, as a ratio (FSDP2 / ZeRO-3; 1.0: the same): peak memory per GPU on one
# GPU, steady tokens/s on one GPU without and with torch.compile, and the collectives' volume per optimizer step
# on two ranks. Write them in `MY_RATIOS`.

# %%
MY_RATIOS = {
    "peak memory per GPU, 1 GPU": None,
    "steady tokens/s, 1 GPU": None,
    "steady tokens/s, 1 GPU, compiled": None,
    "collectives' volume per optimizer step, 2 ranks": None,
}

# %% tags=["solution"]
# The same 16Ψ/N of model states, FSDP2 without DeepSpeed's buckets; its hooks are fewer (one per layer) and do
# not break the compiled blocks; both gather the parameters twice and reduce-scatter the gradients once: 3Ψ
MY_RATIOS = {
    "peak memory per GPU, 1 GPU": 0.9,
    "steady tokens/s, 1 GPU": 1.3,
    "steady tokens/s, 1 GPU, compiled": 2.0,
    "collectives' volume per optimizer step, 2 ranks": 1.0,
}

# %% [markdown]
# ## 2. The runs
#
# ZeRO-3 and FSDP2 on one rank and on two, each in fresh `torchrun` processes with notebook 04's options; on a
# GPU also each compiled (one GPU). On a CPU: two gloo ranks of the tiny model, nothing compiled; they count the
# collectives (the comms logger) but their memory and speed are a CPU process's, so the decision table takes
# those from the reference. With two or more GPUs, two short runs count the collectives apart from the timed runs.

# %%
print("runs here:", ", ".join(lesson.runs_here(GPUS)))
if "fsdp2" in EXPERIMENTS:
    lesson.make_runs(RUNS, GPUS, COMMON)
else:
    print("This engine has no fsdp2 experiment: your runs are skipped, the tables below show the reference.")
REF = lessons.median_runs(lesson.REFERENCE_RUNS)  # of each run's rounds, the median one (the protocol's figure)
if REF is None:
    print(f"No reference yet ({lesson.REFERENCE_RUNS} holds no runs): only your own figures are shown.")
BANDS = {m: lessons.band(m, lesson.REFERENCE_RUNS) for m in lesson.PHASES + lesson.SPEED}
MINE = [RUNS / n for n in lesson.RUNS if (RUNS / n / "results.json").is_file()]
df = results.load_results(MINE) if MINE else None

# %% [markdown]
# ## 3. Memory per GPU by phase
#
# Rank 0's: what the process held before the run, the model states after the first optimizer step, the peaks
# over the training steps (torch's allocated and reserved, NVML's), and the host's RSS. Yours beside the
# reference's, with its band.

# %%
if df is not None:
    display(Markdown(results.exercise_table(df, lesson.PHASES, REF, BANDS).to_markdown(index=False)))
    results.plot_memory_over_time(df)
    print(results.cpu_memory_note(df) or "")
elif REF is not None:
    display(Markdown(results.exercise_table(REF.reset_index(), lesson.PHASES).to_markdown(index=False)))

# %% [markdown]
# ## 4. Speed
#
# Steady tokens/s after each run's warm-up (notebook 01), with and without torch.compile.

# %%
if df is not None:
    display(Markdown(results.exercise_table(df, lesson.SPEED, REF, BANDS).to_markdown(index=False)))
elif REF is not None:
    display(Markdown(results.exercise_table(REF.reset_index(), lesson.SPEED).to_markdown(index=False)))

# %% [markdown]
# ## 5. What each gathers, and when
#
# The two-rank runs' collectives on rank 0, per optimizer step: DeepSpeed's comms logger for ZeRO-3 (notebook
# 04), the engine's record of torch's c10d collectives for FSDP2, in DeepSpeed's names. Volume in Ψ-sized
# transfers: an all-gather moves N times the shard it is handed, a reduce-scatter its input (notebook 04).

# %%
for source, root in (("your runs", RUNS), ("the reference", lesson.REFERENCE_RUNS / "runs")):
    t = lesson.collective_table(root)
    print(f"{source}:" + ("" if len(t) else " no comms.json on file"))
    if len(t):
        display(Markdown(t.to_markdown(index=False, floatfmt=",.3f")))

# %% [markdown]
# ## 6. The decision table
#
# Each question from your runs where they measure it (memory and speed on a GPU, collectives anywhere), else from
# the reference; FSDP2 against ZeRO-3 with the reference's band: inside it, "within the noise".

# %%
ROWS = lesson.decision(RUNS)
table = lesson.decision_table(ROWS)
display(Markdown(table.to_markdown(index=False)))
RUNS.mkdir(parents=True, exist_ok=True)
table.to_csv(RUNS / "decision.csv", index=False)  # the table as data, beside the runs it came from
measured = {r.question: r.comparison.ratio for r in ROWS if r.comparison}
display(Markdown(lessons.beside_prediction(MY_RATIOS, measured, "FSDP2 / ZeRO-3").to_markdown(index=False)))

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# 1. On one GPU, which kept less memory per GPU, in model states and at the peak, and by more than the band?
#    What in section 1 explains it?
# 2. Which was faster without torch.compile, and with it? What did compiling buy each?
# 3. On two ranks, how many collectives did each make per step, and what volume (Ψ)? How does that compare with
#    ZeRO-3's 3Ψ of notebook 04?
# 4. Fill in "when DeepSpeed, when FSDP2" from the table: for which questions does the answer depend on your
#    machine, and which are within the noise?

# %% tags=["solution"]
by = {r.question: r for r in ROWS}


def said(q: str) -> str:
    r = by[q]
    if r.comparison is None:
        return f"{q}: not measured (no run here and no reference yet)"
    c = r.comparison
    return (
        f"{q}: FSDP2 {c.figure(c.value)} against ZeRO-3's {c.figure(c.other)}, {c.ratio_text}, from {r.source}; "
        f"better: {r.better}"
    )


print("1. " + "; ".join(said(q) for q in by if "memory" in q or "states" in q) + ".")
print("2. " + "; ".join(said(q) for q in by if "tokens/s" in q) + ".")
print(
    "3. "
    + said("collectives' volume per optimizer step, 2 ranks")
    + ". Both reduce-scatter every gradient once a step (Ψ). FSDP2 gathers each decoder layer twice (its forward,"
    " then its backward: reshard_after_forward) but its root unit (embeddings, final norm, LM head) once, kept"
    " gathered from its forward to its backward; ZeRO-3 keeps small parameters whole"
    " (stage3_param_persistence_threshold) and a gathered one it will reuse soon (stage3_max_reuse_distance): both"
    " stay under the paper's 3Ψ, by how much depends on the model's share of embeddings and small tensors."
)
wins = {b: [r.question for r in ROWS if r.better == b] for b in ("FSDP2", "ZeRO-3", "within the noise")}
print(
    "4. FSDP2 where it measured better: "
    + ("; ".join(wins["FSDP2"]) or "nowhere")
    + ". ZeRO-3 where it measured better: "
    + ("; ".join(wins["ZeRO-3"]) or "nowhere")
    + ". Within the noise: "
    + ("; ".join(wins["within the noise"]) or "none")
    + ". Beyond the table: DeepSpeed where the states must go to NVMe or its engine's features are needed "
    "(ZeRO++, its optimizers); FSDP2 where the model is compiled or combined with other PyTorch parallelisms."
)

# %% [markdown]
# ## Summary
# - ZeRO-3 and FSDP2 shard the same model states; they differ in how and when they gather and free them.
# - Both gather the parameters twice and reduce-scatter the gradients once per step: about 3Ψ.
# - Decide from measurements with their band: a difference inside it is no reason to switch.
