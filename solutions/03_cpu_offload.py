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

# %% tags=["solution"]
from workshop_lib.ds_config import EXPERIMENTS
from workshop_lib.memory import zero_bytes_per_param

# The 16Ψ arithmetic on one GPU, without what each run offloads
MY_BYTES_PER_PARAM = {
    n: zero_bytes_per_param(
        EXPERIMENTS[n].zero_stage, 1, EXPERIMENTS[n].offload_optimizer != "none", EXPERIMENTS[n].offload_param != "none"
    )
    for n in ORDER
}

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

# %% tags=["solution"]
for o in (f.stage2, f.stage3):
    speed = f"at {o.speed.ratio_text} the tokens/s" + (
        ""
        if o.speed.verdict == "lower"
        else ": offload was expected to be slower (the CPU Adam step and the PCIe copies every step); over a few steps, "
        "or on a CPU where both sides are the same memory, that cost can hide"
    )
    if o.gpu_states:
        print(
            f"1. {o.stage}: offload changes the model states kept on the GPU by {o.gpu_states.difference:+,.0f} MiB "
            f"and the peak allocated by {o.gpu_peak.difference:+,.0f} MiB ({o.gpu_peak.other:,.0f} -> "
            f"{o.gpu_peak.value:,.0f}), {speed}."
            + (
                ""
                if o.gpu_states.verdict == "lower"
                else " The model states did not fall: what DeepSpeed keeps on the GPU for offload (gradient buckets, "
                "staging buffers) outweighed what left"
                + (
                    f", after subtracting the {o.held_at_start_mib:,.0f} MiB the process held before the run began"
                    if o.held_at_start_mib is not None
                    else ""
                )
                + "."
            )
        )
    else:
        print(f"1. {o.stage}: no GPU here, so no GPU memory to save; offload runs {speed}.")
    print(
        f"2. {o.stage}: the host's RSS after the first step grew by {o.host_states_bytes_per_param:.1f} bytes per "
        f"parameter (its peak over the steps by {o.host_peak_bytes_per_param:.1f}), against DeepSpeed's budget of "
        f"{o.estimated_host_bytes_per_param:.1f} for the offload run's host side. "
        + (
            f"On a CPU with the tiny model that budget is {o.estimated_host_mib:,.1f} MiB and the RSS changed by "
            f"{o.host_states_mib:+,.1f} MiB: RSS is the whole process's, and what else changed between the two runs "
            "is not measured apart; the reference rows show a real model."
            if not f.on_gpu
            else f"{o.host_states_mib - o.estimated_host_mib:,.0f} MiB more than DeepSpeed budgets: RSS is the whole "
            "process's, and what holds that memory (pinned or pageable, which buffers) is not measured here."
            if o.host_states_mib > o.estimated_host_mib
            else "Within DeepSpeed's budget."
        )
    )
if f.peaks:
    where = "" if f.peaks_from == "yours" else "No GPU here; on the GPU of the reference runs: "
    s2, s3 = f.peaks["stage2"], f.peaks["stage3"]
    print(
        f"3. {where}ZeRO-2's offload (optimizer) changed the peak allocated by {s2.gpu_peak.difference:+,.0f} MiB, "
        f"ZeRO-3's (parameters and optimizer) by {s3.gpu_peak.difference:+,.0f} MiB; the model states left by "
        f"{-s2.gpu_states.difference:,.0f} and {-s3.gpu_states.difference:,.0f} MiB. What the offload runs' peaks "
        f"hold beyond their model states: {s2.peak_beyond_states_mib:,.0f} MiB (ZeRO-2) and "
        f"{s3.peak_beyond_states_mib:,.0f} MiB (ZeRO-3): activations and logits, and under ZeRO-3 the layers "
        f"gathered for forward and backward and the prefetch and reduce buckets. ZeRO-3 without offload peaked "
        f"{f.stage3_over_stage2_peak.difference:+,.0f} MiB from ZeRO-2's, with offload "
        f"{f.offload_peaks.difference:+,.0f} MiB: offload frees the model states, not what the steps add."
    )
    c = f.compilation
    yes, no = ([n for n in lesson.RUNS if c.compiled[n] == v] for v in (True, False))
    print(
        f"3. {'Not ZeRO alone: ' if c.differs else ''}{' and '.join(yes) or 'no run'} compiled their transformer "
        f"blocks, {' and '.join(no) or 'no run'} did not (torch_compile in each run's config; under ZeRO-3 the "
        f"recipe compiles only with torch_compile_zero3, default {c.zero3_default}). "
        + (
            "The ZeRO-2 and ZeRO-3 runs compiled alike: compilation is not in the gap."
            if not c.differs
            else f"In {c.runs_from}, stage 3 peaked {c.gap.difference:+,.0f} MiB over stage 2 = "
            f"{c.without.difference:+,.0f} MiB of compilation (the baseline without it against with it, "
            f"{c.without.value:,.1f} against {c.without.other:,.1f} MiB; model states {c.states.value:,.1f} against "
            f"{c.states.other:,.1f} MiB"
            + (
                ": the steps of uncompiled blocks add the difference"
                if c.states.verdict in ("equal", "within the band")
                else ""
            )
            + f") and {c.zero_mib:+,.0f} MiB of ZeRO (stage 3 against the uncompiled baseline, "
            f"{c.stage3.difference:+,.0f}, less stage 2 against the compiled one, {c.stage2.difference:+,.0f})."
            if c.runs_from
            else "The ZeRO-2 and ZeRO-3 runs differ in compilation too, and notebook 02's runs that part the two "
            "are not on file: the gap mixes them."
        )
    )
else:
    print("3. No GPU here, so no GPU memory was freed, and no GPU reference runs are on file to compare.")
print(
    f"4. When the model states do not fit on the GPUs you have (a model several times larger than GPU memory "
    f"allows, on few GPUs), or to free GPU memory for a larger micro-batch or longer sequences; not when it fits: "
    f"here offload ran at {f.stage2.speed.ratio:.2f}x (ZeRO-2) and {f.stage3.speed.ratio:.2f}x (ZeRO-3) the "
    f"tokens/s of the same stage without it."
)

# %% [markdown] tags=["exercise"]
# **Exercise: a key of your own.** As in 02, on `stage2_offload`: pick a key of its `offload_optimizer` section
# (`ds_config.explain`; the next cell shows a GPU reference run of `pin_memory=false` if on file), write it in
# `MY_OVERRIDE`, your prediction in `MY_PREDICTION`, and run that cell.

# %%
MY_OVERRIDE = None  # "KEY=VALUE", as after workshop run stage2_offload --ds-config
MY_PREDICTION = ""

# %% tags=["solution"]
MY_OVERRIDE = "zero_optimization.offload_optimizer.pin_memory=false"  # pageable host buffers instead of pinned
MY_PREDICTION = (
    "copies to and from the host slow down (pageable memory is staged through a pinned buffer), so tokens/s falls; "
    "host memory does not fall (the same buffers, only not page-locked)"
)

# %%
MINE = lessons.run_own_key(NOTEBOOK, "stage2_offload", MY_OVERRIDE, RUNS, **COMMON)  # runs/stage2_offload_mine
if MINE:
    cols = ["steady_train_tokens_per_second", "host_peak_rss_mib"]
    display(Markdown(lessons.table(NOTEBOOK, RUNS, cols, runs=MINE).to_markdown(index=False)))
    print(f"Your prediction: {MY_PREDICTION or '(none written)'}")
# The GPU reference's stage2_offload with the suggested key, made after a stage2_offload in one process
cols = ["steady_train_tokens_per_second", "host_states_rss_mib", "host_peak_rss_mib", "gpu_peak_allocated_mib"]
lessons.show_own_key_references(NOTEBOOK, "stage2_offload", lesson.OWN_KEYS, cols)

# %% tags=["solution"]
pair = {n: json.loads(Path(f"{RUNS}/{n}/results.json").read_text()) for n in MINE}
fast = lessons.compare(
    "steady_train_tokens_per_second",
    pair["stage2_offload_mine"]["steady_train_tokens_per_second"],
    pair["stage2_offload"]["steady_train_tokens_per_second"],
)
host = lessons.compare(
    "host_peak_rss_mib", pair["stage2_offload_mine"]["host_peak_rss_mib"], pair["stage2_offload"]["host_peak_rss_mib"]
)
print(f"Tokens/s against stage2_offload's: {fast.ratio_text}. Host peak: {host.difference_text}.")
if torch.cuda.is_available() and ds_config.parse_override(MY_OVERRIDE) == lesson.PIN_MEMORY:
    p = lesson.pinning(runs["stage2"], pair["stage2_offload"], pair["stage2_offload_mine"])
    print(
        f"Host RSS after the first step, over stage2's: {p.pinned_mib:,.0f} MiB pinned, {p.pageable_mib:,.0f} MiB "
        f"pageable, DeepSpeed's budget {p.budget_mib:,.0f} MiB. Pinning itself changed it by "
        f"{p.pinning.difference_text}"
        + (
            f"; the {p.pageable_mib - p.budget_mib:,.0f} MiB above the budget with pageable buffers is not measured "
            "apart."
            if p.pageable_mib > p.budget_mib
            else "."
        )
    )
if not torch.cuda.is_available():
    print("Without a GPU nothing crosses PCIe: pinning has nothing to speed up, and the CPU's figures show the noise.")

# %% [markdown]
# ## Summary
# - Offload frees the model states on the GPU, not what the steps add; the host holds at least 12 more bytes per
#   parameter, and each step waits for the CPU.
# - Use it when the model states do not fit otherwise.
