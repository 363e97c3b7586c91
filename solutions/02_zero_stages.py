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
# # 2. ZeRO stages 1, 2 and 3 on one GPU
#
# **Learning goals**
# - read a DeepSpeed config and know what each ZeRO stage partitions;
# - run ZeRO-1, -2 and -3 through the HF `Trainer`'s DeepSpeed integration;
# - measure what each stage saves in memory and costs in speed on **one** GPU, and explain it;
# - trade compute for activation memory with activation checkpointing.

# %%
import inspect
import json
from pathlib import Path

import torch
from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import zero_stages as lesson
from workshop_lib import ds_config, env, launch, results
from workshop_lib.ds_config import build_ds_config
from workshop_lib.train import build_trainer, run_experiment

display(Markdown(lessons.header("02_zero_stages")))
# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see lessons.notebook_run_options.
COMMON = lessons.notebook_run_options(size_micro_batches=True)  # prints the micro-batch size it chose, and why
print(f"device: {env.device_name()}, run options: {COMMON}")
NOTEBOOK, RUNS = "02_zero_stages", "runs/02_zero_stages"

# %% [markdown]
# ## 1. The config
#
# ZeRO (Rajbhandari et al. 2020) removes the redundancy of data parallelism: instead of every GPU holding all
# model states, each of N GPUs keeps 1/N of
# - stage 1: the optimizer states (fp32 master weights, Adam's momentum and variance: 12 of the 16 bytes/param);
# - stage 2: also the gradients;
# - stage 3: also the 16-bit parameters, gathered layer by layer just before use.
#
# Below is the stage-3 config of `build_ds_config` (`configs/ds_zero3.json`). The Trainer fills each `"auto"`; a
# key left out takes DeepSpeed's default. Bucket sizes count **elements**, not bytes.

# %%
print(json.dumps(build_ds_config("stage3"), indent=2))
display(Markdown(ds_config.explain(build_ds_config("stage3")).to_markdown(index=False)))

# %% [markdown]
# ## 2. Run the stages
#
# The baseline, then stages 1, 2 and 3 (on a CPU after a warm-up: 00_setup, "How the numbers are measured"). Each
# run writes its resolved `ds_config.json` beside its results.

# %% [markdown] tags=["exercise"]
# **Predict first.** On one GPU, how many bytes per parameter of model states will each run keep? Write them in
# `MY_BYTES_PER_PARAM`, then run the stages.

# %%
MY_BYTES_PER_PARAM = {"baseline": None, "stage1": None, "stage2": None, "stage3": None}

# %% tags=["solution"]
# One GPU: nothing to partition across. What stays between steps, in bf16: as 01 measured, the baseline keeps its
# fp32 weights and Adam's two moments (4 + 8; its gradients are freed after the step); DeepSpeed keeps its 16-bit
# weights beside fp32 master weights and the moments (2 + 4 + 8) and frees its gradients too, but stage 3 keeps a
# 16-bit gradient partition for every parameter, all of them on one GPU (+ 2)
W16, MASTER, MOMENTS, GRAD16 = 2, lesson.FP32_WEIGHTS, lesson.ADAM_MOMENTS, 2
MY_BYTES_PER_PARAM = {
    "baseline": MASTER + MOMENTS,
    "stage1": W16 + MASTER + MOMENTS,
    "stage2": W16 + MASTER + MOMENTS,
    "stage3": W16 + MASTER + MOMENTS + GRAD16,
}

# %%
lessons.warm_up(NOTEBOOK, RUNS, **COMMON)
ORDER = ["baseline", "stage1", "stage2", "stage3"]
for name in ORDER:
    run_experiment(lessons.run_config(NOTEBOOK, name, RUNS, **COMMON))
df = results.load_results([f"{RUNS}/{n}" for n in ORDER])
_ = results.plot_memory_and_throughput(df)  # shown once, by the backend
_ = results.plot_memory_over_time(df)  # shown once, by the backend
measured, source = lessons.states_per_param(NOTEBOOK, RUNS, ORDER)
print(f"Model states per parameter after the first step, measured in {source}:")
display(Markdown(lessons.beside_prediction(MY_BYTES_PER_PARAM, measured, "bytes").to_markdown(index=False)))
rows, _ = lessons.gpu_results(NOTEBOOK, RUNS, ORDER)  # the table's runs, by the buffers each keeps after its step
print(lesson.explain_states(rows))

# %% [markdown]
# Without a GPU the memory above cannot show what a stage keeps (00_setup): the GPU reference runs below do.

# %%
if results.cpu_memory_note(df):
    ref_runs = lessons.reference(NOTEBOOK)
    results.plot_memory_and_throughput(ref_runs.loc[[n for n in ORDER if n in ref_runs.index]])

# %% [markdown]
# **Stage 3 runs without torch.compile** (DeepSpeed's parameter hooks split every compiled block, which measured
# slower). The baseline without compilation differs from stage 3 in ZeRO only and shows what compiling does. On a
# CPU nothing compiles: skipped.

# %%
if torch.cuda.is_available():  # torch.compile runs on a GPU only (preflight.check_machine)
    run_experiment(lessons.run_config(NOTEBOOK, "baseline_no_compile", RUNS, **COMMON))

# %% [markdown]
# ## 3. Activation checkpointing
#
# ZeRO partitions model states, not the activations that the forward pass saves for the backward pass. Activation
# checkpointing keeps only each transformer block's input and recomputes the rest during the backward pass: less
# memory, one more forward pass of compute (`--activation-checkpointing true`).

# %% [markdown] tags=["exercise"]
# **Predict first.** What fraction of the baseline's peak memory and of its tokens/s will remain? Write them in
# `MY_AC`.

# %%
MY_AC = {"peak": None, "tokens/s": None}  # fractions of the baseline's

# %% tags=["solution"]
# Activations are most of the peak beside the model states; the backward pass costs about two forward passes, so
# one more forward pass makes 4 units of compute out of 3
MY_AC = {"peak": 0.6, "tokens/s": 0.75}

# %%
run_experiment(lessons.run_config(NOTEBOOK, "baseline_ac", RUNS, **COMMON))
ac = results.load_results([f"{RUNS}/baseline", f"{RUNS}/baseline_ac"])
_ = results.plot_memory_over_time(ac)  # shown once, by the backend
rows, where = lessons.gpu_results(NOTEBOOK, RUNS, ["baseline", "baseline_ac"])
ratio = {
    k: rows["baseline_ac"][c] / rows["baseline"][c]
    for k, c in [("peak", "gpu_peak_allocated_mib"), ("tokens/s", "steady_train_tokens_per_second")]
}
print(f"baseline_ac as a fraction of the baseline, in {where}:")
display(Markdown(lessons.beside_prediction(MY_AC, ratio, "fraction").to_markdown(index=False)))

# %% [markdown]
# ## 4. The config your runs used, and one key changed
#
# Each DeepSpeed run wrote the config it handed to DeepSpeed, batch and bucket sizes filled in, to its
# `ds_config.json`. The keys where stage 2 and stage 3 differ, then what the Trainer filled in stage 3's (the
# rest is section 1's table):

# %%
ds = {n: json.loads(Path(f"{RUNS}/{n}/ds_config.json").read_text()) for n in ("stage2", "stage3")}
display(Markdown(ds_config.diff(ds["stage2"], ds["stage3"], ("stage2", "stage3")).to_markdown(index=False)))
built = ("as built (section 1)", "as your run used it")
display(Markdown(ds_config.diff(build_ds_config("stage3"), ds["stage3"], built).to_markdown(index=False)))

# %% [markdown]
# **How the config reaches the Trainer.** The library passes the dict to `TrainingArguments(deepspeed=...)`; the
# Trainer fills the `"auto"` values and starts DeepSpeed's engine. From `workshop_lib/train.py`:

# %%
lines, first = inspect.getsourcelines(build_trainer)
print("".join(f"{first + i:4d} {line}" for i, line in enumerate(lines) if "ds_config" in line or "deepspeed=" in line))

# %% [markdown]
# A plain HF script passes a file, `--deepspeed ds_config.json`, under either launcher, one process per GPU:
#
# ```bash
# deepspeed --num_gpus 1 train.py --deepspeed ds_config.json --bf16 ...
# torchrun --nproc_per_node 1 train.py --deepspeed ds_config.json --bf16 ...
# ```
#
# `workshop run` needs no file: each rank builds its config. Its launchers (`launch.run_local`; `_launch` in
# `slurm/common.sh`, notebook 4):

# %%
lines, first = inspect.getsourcelines(launch.run_local)
print(
    "".join(
        f"{first + i:4d} {line}" for i, line in enumerate(lines) if "cmd = " in line or '"workshop_lib.cli"' in line
    )
)
common_sh = (lessons.BATCH_SCRIPTS / "common.sh").read_text()  # slurm/common.sh, as the package ships it
print(common_sh[common_sh.index("\n_launch() {") + 1 : common_sh.index("  esac\n}") + 7])

# %% [markdown]
# **One key changed.** `--ds-config KEY=VALUE` (here `RunConfig(ds_config=[...])`) sets one key, checked against
# DeepSpeed's config classes: a typo stops with the nearest valid key, and a key an option sets (stage, batch
# sizes, precision) is refused with that option's name.
#
# Stage 2 again with `zero_optimization.overlap_comm=false`: a full bucket is still reduced during the backward
# pass, but on the compute stream, not on a side stream while a second bucket fills: one bucket instead of two
# (DeepSpeed's lines: `lesson.OVERLAP_COMM`).

# %%
run_experiment(lessons.run_config(NOTEBOOK, "stage2_no_overlap", RUNS, **COMMON))
ds["stage2_no_overlap"] = json.loads(Path(f"{RUNS}/stage2_no_overlap/ds_config.json").read_text())
display(
    Markdown(
        ds_config.diff(ds["stage2"], ds["stage2_no_overlap"], ("stage2", "stage2_no_overlap")).to_markdown(index=False)
    )
)
buckets = {n: ds_config.gradient_bucket_mib(ds[n]) for n in ("stage2", "stage2_no_overlap")}
print("gradient buckets, MiB (reduce_bucket_size elements x bytes per element x buffers):", buckets)
PAIR = ["stage2", "stage2_no_overlap"]
cols = [
    "steady_train_tokens_per_second",
    "steady_step_time_s",
    "gpu_peak_allocated_mib",
    "gpu_peak_reserved_mib",
    "gpu_peak_mib",
    "host_peak_rss_mib",
]
ref = lessons.reference(NOTEBOOK)
display(
    Markdown(
        results.exercise_table(
            results.load_results([f"{RUNS}/{n}" for n in PAIR]), cols, ref, {m: lessons.band(m) for m in cols}
        ).to_markdown(index=False)
    )
)
if missing := [n for n in PAIR if n not in ref.index]:
    print("No GPU reference on file yet for: " + ", ".join(missing))

# %% [markdown] tags=["exercise"]
# **Exercise.** From the two configs, predict how much memory `overlap_comm=false` saves (the bucket's size is
# in elements: how many bytes is an element in this run?). Does the measured peak agree? And the speed: what
# did overlapping the reduction with the backward pass buy on one GPU, and what would it buy on several?

# %% tags=["solution"]
pair = {n: json.loads(Path(f"{RUNS}/{n}/results.json").read_text()) for n in PAIR}
metric = "gpu_peak_allocated_mib" if pair["stage2"]["gpu_peak_allocated_mib"] is not None else "host_peak_rss_mib"
mem = lessons.compare(metric, pair["stage2_no_overlap"][metric], pair["stage2"][metric])
fast = lesson.compare_speed(pair["stage2_no_overlap"], pair["stage2"])  # the band exercise 2 uses on this machine
saved = buckets["stage2"] - buckets["stage2_no_overlap"]
elements = ds["stage2"]["zero_optimization"]["reduce_bucket_size"]
print(
    f"Predicted from the two configs: one gradient bucket of {elements:,} elements instead of two, {saved:,.1f} "
    f"MiB less ({saved * 2**20 / elements:.0f} bytes per element)."
)
print(
    f"Measured {metric}: {mem.value:,.1f} MiB against stage2's {mem.other:,.1f} ({mem.difference:+,.1f} MiB): "
    f"{mem.verdict} ({mem.band_text})."
)
if metric == "host_peak_rss_mib":
    print(
        "Without a GPU the peak is the whole process's host memory, where a bucket this small is lost among the "
        "allocations of Python, the data and the allocator: the GPU reference is where the prediction is checked."
    )
elif saved:
    print(f"The measured saving is {-mem.difference / saved:.2f}x the predicted one.")
print(
    f"Speed: {fast.value:,.0f} against stage2's {fast.other:,.0f} tokens/s, {fast.ratio:.2f}x: {fast.verdict} "
    f"({fast.band_text})."
)
if metric == "host_peak_rss_mib":
    print("Without a GPU the tiny runs' speeds follow the machine's load (its cores are shared) more than this key.")
print(
    "With one GPU the reduction has no partner to exchange gradients with, so there is little communication for "
    "the overlap to hide; with N GPUs the reduction crosses the links, and overlapping it with the backward pass "
    "hides that time, at the price of the second bucket."
)

# %% [markdown] tags=["exercise"]
# **Exercise: a key of your own.** Change one key of stage 3's config that acts on one GPU, e.g.
# `zero_optimization.contiguous_gradients=false` (no gradient bucket) or `zero_optimization.overlap_comm=false`
# (the bucket reduced on the compute stream); keys about gathering do nothing on one GPU. Write `KEY=VALUE` in
# `MY_OVERRIDE` and your prediction (which figure, which way, how much, from the config above) in `MY_PREDICTION`,
# then run the two cells after it; the GPU reference's run of each suggested key stands below. A misspelt key
# stops with the nearest valid one.

# %%
MY_OVERRIDE = None  # "KEY=VALUE", as after workshop run stage3 --ds-config
MY_PREDICTION = ""

# %% tags=["solution"]
MY_OVERRIDE = "zero_optimization.contiguous_gradients=false"
# stage 3 keeps one bucket from its start (section 2's account): reduce_bucket_size elements of the training dtype
bucket, elements = ds_config.gradient_bucket_mib(ds["stage3"]), ds["stage3"]["zero_optimization"]["reduce_bucket_size"]
MY_PREDICTION = (
    f"no reduce bucket: the model states fall by {bucket:,.1f} MiB ({elements:,} elements), the peak by about as "
    "much; the speed within the band"
)

# %%
MINE = lessons.run_own_key(NOTEBOOK, "stage3", MY_OVERRIDE, RUNS, **COMMON)  # runs/stage3_mine
if MINE:
    cols = ["steady_train_tokens_per_second", "gpu_states_allocated_mib", "gpu_peak_allocated_mib", "host_peak_rss_mib"]
    display(Markdown(lessons.table(NOTEBOOK, RUNS, cols, runs=MINE).to_markdown(index=False)))
    print(f"Your prediction: {MY_PREDICTION or '(none written)'}")
# The GPU reference's stage 3 with each suggested key (made by scripts/make_references.py, as its README says)
cols = ["steady_train_tokens_per_second", "gpu_states_allocated_mib", "gpu_peak_allocated_mib"]
lessons.show_own_key_references(NOTEBOOK, "stage3", lesson.OWN_KEYS, cols)

# %% tags=["solution"]
pair = {n: json.loads(Path(f"{RUNS}/{n}/results.json").read_text()) for n in MINE}
states = "gpu_states_allocated_mib" if pair["stage3"]["gpu_states_allocated_mib"] is not None else "host_peak_rss_mib"
grew = lessons.compare(states, pair["stage3_mine"][states], pair["stage3"][states])
fast = lesson.compare_speed(pair["stage3_mine"], pair["stage3"])
predicted = lesson.states_change_mib(pair["stage3_mine"], pair["stage3"])  # from the two runs' configs
print(
    f"Predicted from the configs: model states {predicted:+,.1f} MiB. Measured {states}: {grew.value:,.1f} MiB "
    f"against stage 3's {grew.other:,.1f} ({grew.difference:+,.1f}): {grew.verdict} ({grew.band_text}). Speed: "
    f"{fast.ratio:.2f}x stage 3's tokens/s: {fast.verdict} ({fast.band_text})."
)
if states == "host_peak_rss_mib":
    print(
        "Without a GPU the memory is the whole process's host memory, where a bucket of this tiny model is lost: "
        "the GPU reference's rows above are where the prediction is checked."
    )

# %% [markdown]
# ## 5. Your figures, beside the reference
#
# As in notebook 1: each of your runs, with the GPU reference run of the same name and its band (`lessons.table`).

# %%
display(Markdown(lessons.table(NOTEBOOK, RUNS).to_markdown(index=False)))
print(lessons.reference_note())
names = ["baseline", "stage1", "stage2", "stage3", "baseline_ac", "baseline_no_compile"]
runs = {
    n: json.loads(Path(f"{RUNS}/{n}/results.json").read_text())
    for n in names
    if Path(f"{RUNS}/{n}/results.json").is_file()
}  # baseline_no_compile: on a GPU only
f = lesson.figures(runs)
ref = lessons.reference(NOTEBOOK)
ref_f = lesson.figures({n: row.to_dict() for n, row in ref.iterrows()}) if set(names[:5]) <= set(ref.index) else None

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Answer from the table above (`f` holds the figures computed from your runs: `f.stages["stage2"].speed`, ...).
#
# 1. How much GPU memory (peak allocated, model states) does each stage save against the baseline, and how does
#    that compare with the estimated model states? Where NVML's peak and torch's peak allocated disagree, why? How
#    close did stage 3's NVML peak come to the GPU's memory, in yours and in the reference?
# 2. Which stage is slowest, and why? Is every difference in speed larger than the band? On a GPU, how does
#    stage 3 compare with the baseline without compilation, and what did compilation alone change?
#
# 3. Do the losses agree across stages? Should they?
# 4. What did activation checkpointing save in memory, and what did it cost in tokens/s? What happened to MFU,
#    and to HFU?

# %% tags=["solution"]
for s in lesson.STAGES:
    st = f.stages[s]
    measured = (
        f", model states measured {st.states_mib:,.0f} MiB against the baseline's {f.baseline_states_mib:,.0f}"
        if st.states_mib is not None
        else ""
    )
    print(
        f"1. {s}: {f.peak_what} {st.peak.value:,.0f} MiB against the baseline's {st.peak.other:,.0f} "
        f"({st.peak.difference:+,.0f} MiB, {st.peak.verdict}){measured}; estimated model states "
        f"{st.estimated_states_mib:,.0f} MiB ({st.estimator})."
    )
if f.stage3_uncompiled:  # the baseline compiled its blocks, stage 3 did not: its activations are uncompiled ones
    p3 = f.stage3_like_peak
    print(
        "1. stage3 did not compile its blocks and the baseline did: "
        + (
            f"against {f.stage3_like}, which did not either, {p3.value:,.0f} MiB against {p3.other:,.0f} "
            f"({p3.difference:+,.0f} MiB, {p3.verdict}); the rest of the difference above is compilation's."
            if p3
            else "part of the difference above is compilation's, not ZeRO's (the baseline without compilation "
            "did not run)."
        )
    )
if f.on_gpu:
    print(
        "1. On one GPU no stage has a partner to share its states with: the differences are in what each keeps "
        "(the baseline's fp32 weights and Adam moments; DeepSpeed's 16-bit weights beside fp32 master weights, "
        "gradient buckets), not partitions."
    )
    parts = [
        f"{s} {n.nvml_mib:,.0f} = {n.allocated_mib:,.0f} + {n.cached_mib:,.0f} + {n.outside_mib:,.0f}"
        for s, n in [("baseline", f.baseline_nvml), *((s, f.stages[s].nvml) for s in lesson.STAGES)]
    ]
    print(
        "1. NVML peak = torch peak allocated + the allocator's free cached blocks + memory outside PyTorch: "
        + "; ".join(parts)
        + " MiB."
    )
    for who, g in (("yours", f), ("the reference", ref_f)):
        if g is not None and g.stage3_gpu_share is not None:
            n3 = g.stages["stage3"].nvml
            print(
                f"1. stage3 ({who}): NVML peak {n3.nvml_mib:,.0f} MiB, {g.stage3_gpu_share:.1%} of the "
                f"{g.stage3_gpu_total_mib:,.0f} MiB it could use"
                + (
                    ": at the GPU's limit; a GPU with a little less memory, or anything else on it, and this run "
                    "runs out of memory."
                    if g.stage3_gpu_share > lesson.NEAR_LIMIT
                    else "."
                )
            )
    odd = [s for s in lesson.STAGES if f.stages[s].cache_inflated]
    if odd:
        print(
            f"1. {', '.join(odd)}: lower peak allocated but higher NVML peak than the baseline: the extra is cache "
            "the allocator reserved, not tensors the stage needs."
        )
else:
    print(
        "1. No GPU: the peaks above are the whole process's host memory (weights, optimizer, activations and "
        "Python together), so the stages' model states cannot be read apart here; the reference rows show them."
    )
ratios = ", ".join(f"{s} {f.stages[s].speed.ratio_text}" for s in lesson.STAGES)
line = f"2. slowest: {f.slowest} ({f.speed_kind}); against the baseline: {ratios}."
if f.slowest == "stage3" and f.slowest_apart:
    line += (
        " On one GPU stage 3 gathers nothing: with a partition world of one its parameters are views of the "
        "rank's own partition, no collective and no copy (`_no_gather_coalesced`, the lesson module's "
        "docstring). Its cost is host work, hooks that fetch and release every module's parameters around its "
        "forward and backward, and, without torch.compile, many small elementwise kernels "
        "(lab/findings/h100/bench-zero3-offload profiles both)."
    )

elif not f.slowest_apart:
    line += " The slowest is not slower than every other run by more than the band: no stage is clearly slowest here."
else:
    line += (
        " Not stage 3, which the GPU reference is slowest at: with the tiny model its per-module hooks are few "
        "beside the fixed per-step costs that decide on a CPU."
    )
if not f.on_gpu:
    line += (
        f" On a CPU the band ({f.stages['stage1'].speed.band_text}) is how much a run's speed over its kernel's "
        "baseline varied between processes of a shared 2-core machine after the warm-up (workshop_lessons/reference/cpu/run_order.md); "
        "the GPU reference shows the sizes of these costs."
    )
print(line)
if f.stage3_like and f.stage3_uncompiled:  # stage 3 against the baseline that did not compile either
    print(
        f"2. stage3 against {f.stage3_like} (neither compiled): tokens/s {f.stage3_like_speed.ratio_text}: ZeRO-3's "
        "own cost on one GPU."
    )
if f.compile_speed:
    c, m = f.compile_speed, f.compile_peak
    print(
        f"2. torch.compile alone (baseline against baseline_no_compile): tokens/s {c.ratio_text}; {f.peak_what} "
        f"{m.difference:+,.0f} MiB ({m.verdict}): the part of stage 3's gap against the compiled baseline that "
        "is compilation, not ZeRO."
    )
elif f.stage3_uncompiled:
    print(
        "2. stage 3 ran without compilation and the baseline with it, and the baseline without compilation is "
        "missing: the gap mixes ZeRO-3's cost with compilation's."
    )
head = f"3. ZeRO stages' train losses span {f.loss_spread:.4f} nats (baseline {f.losses['baseline']:.4f})"
print(
    head
    + (
        ": the same data, order and Adam maths, so the stages agree up to rounding; the baseline's torch "
        "AdamW and DeepSpeed's Adam round differently."
        if f.losses_agree
        else f", more than {lesson.LOSS_AGREE:.0%}: the stages should agree up to rounding; over a few steps of a tiny "
        "model, rounding differences in the first updates can grow. Compare their train_log.csv step by step."
    )
)
p, v = f.ac_peak, f.ac_speed
print(
    f"4. activation checkpointing: {f.peak_what} {p.value:,.0f} MiB against {p.other:,.0f} ({p.difference:+,.0f} MiB, "
    f"{p.verdict}); tokens/s {v.ratio_text}. "
    + (
        "It saved memory; the recomputed forward pass adds work ("
        + (f"{f.ac_hfu_over_mfu - 1:.0%} more FLOPs" if f.ac_hfu_over_mfu else "one more forward pass")
        + "), yet the speed moved within the noise: the steps are not bound by arithmetic alone."
        if p.verdict == "lower" and v.verdict == "within the band"
        else "It saved memory and paid for it in speed."
        if p.verdict == "lower" and v.verdict == "lower"
        else "It saved no memory here: with a tiny model the activations are a small part of the memory, and the "
        "measure (host RSS on a CPU) also counts what earlier runs in this process left."
        if p.verdict != "lower"
        else "It saved memory and ran faster: compare the GPU utilisation column."
    )
    + (
        f" MFU {f.ac_mfu.ratio_text}: the useful work per second; HFU is {f.ac_hfu_over_mfu:.2f}x its MFU, the "
        "recomputed forward pass counted as work the hardware did."
        if f.ac_mfu
        else " MFU and HFU need a GPU's peak FLOP/s: see the reference rows."
    )
)

# %% [markdown]
# ## Summary
# - ZeRO partitions model states *across data-parallel GPUs*; one GPU has no one to share them with.
# - Activation checkpointing trades compute for activation memory, which ZeRO does not touch.
# - For model states on one GPU: offload them to the CPU (notebook 3), or add GPUs (notebook 4).
