# %% [markdown]
# # 2. ZeRO stages 1, 2 and 3 on one GPU
#
# **Learning goals**
# - read a DeepSpeed config and know what each ZeRO stage partitions;
# - run the same fine-tuning under ZeRO-1, -2 and -3 through the HF `Trainer`'s DeepSpeed integration;
# - measure what each stage saves in memory and costs in speed on **one** GPU, explain what you see, and
#   predict what changes with several GPUs (notebook 4);
# - trade compute for activation memory with activation checkpointing.

# %%
import json

from IPython.display import Markdown, display

from workshop_lib import env, lessons, results
from workshop_lib.ds_config import build_ds_config
from workshop_lib.lessons import zero_stages as lesson
from workshop_lib.train import run_experiment

display(Markdown(lessons.header("02_zero_stages")))
# Tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); see env.notebook_run_options.
COMMON = env.notebook_run_options()
print(f"device: {env.device_name()}, run options: {COMMON}")
NOTEBOOK, RUNS = "02_zero_stages", "runs/02_zero_stages"

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
# The baseline first, so that this notebook stands alone, then stages 1, 2, 3 (`lessons.COURSE_RUNS`, the
# same runs as the GPU reference). Each run writes its resolved `ds_config.json` beside its results.

# %%
ORDER = ["baseline", "stage1", "stage2", "stage3"]
for name in ORDER:
    run_experiment(lessons.run_config(NOTEBOOK, name, RUNS, **COMMON))
df = results.load_results([f"{RUNS}/{n}" for n in ORDER])
results.plot_memory_and_throughput(df);
results.plot_memory_over_time(df);

# %% [markdown]
# ## 3. Activation checkpointing
#
# ZeRO partitions model states; it does nothing for the activations that the forward pass saves for the
# backward pass. Activation (gradient) checkpointing keeps only each transformer block's input and
# recomputes the rest during the backward pass: less memory, one more forward pass of compute.
# `--activation-checkpointing true` on the command line, `activation_checkpointing=True` here.

# %%
run_experiment(lessons.run_config(NOTEBOOK, "baseline_ac", RUNS, **COMMON))
ac = results.load_results([f"{RUNS}/baseline", f"{RUNS}/baseline_ac"])
results.plot_memory_over_time(ac);

# %% [markdown]
# ## Your figures, beside the reference
#
# Each of your runs, and under it the GPU reference run of the same name with its band (`lessons.table`; MFU and
# HFU as introduced in notebook 1: activation checkpointing recomputes each block's forward pass, which HFU
# counts and MFU does not).

# %%
display(Markdown(lessons.table(NOTEBOOK, RUNS).to_markdown(index=False)))
print(lessons.reference_note())
runs = {name: json.loads(open(f"{RUNS}/{name}/results.json").read()) for name in ["baseline", "stage1", "stage2",
                                                                                    "stage3", "baseline_ac"]}
f = lesson.figures(runs)

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# Answer from the table above (`f`, computed from your runs, holds the figures: `f.stages["stage2"].speed`, ...).
#
# 1. How much GPU memory (peak allocated, and model states) does each stage save against the baseline on
#    one GPU? How does that compare with the estimate of the model states? Where the NVML peak and torch's
#    peak allocated disagree, what makes the difference?
# 2. Which stage is slowest, and why? Is every difference in speed larger than the band?
# 3. Do the losses agree across stages? Should they?
# 4. What did activation checkpointing save in memory, and what did it cost in tokens/s? What happened to MFU,
#    and to HFU?

# %% tags=["solution"]
def within(c) -> str:
    """A comparison's ratio and verdict, naming the band."""
    return (f"{c.ratio:.2f}x, within the band ({c.band_text}): the same within the noise" if c.verdict == "within the band"
            else f"{c.ratio:.2f}x ({c.verdict}; band {c.band_text})")


for s in lesson.STAGES:
    st = f.stages[s]
    measured = (f", model states measured {st.states_mib:,.0f} MiB against the baseline's {f.baseline_states_mib:,.0f}"
                if st.states_mib is not None else "")
    print(f"1. {s}: {f.peak_what} {st.peak.value:,.0f} MiB against the baseline's {st.peak.other:,.0f} "
          f"({st.peak.difference:+,.0f} MiB, {st.peak.verdict}){measured}; estimated model states "
          f"{st.estimated_states_mib:,.0f} MiB ({st.estimator}).")
if f.on_gpu:
    print("1. On one GPU no stage has a partner to share its states with: the differences are in what each keeps "
          "(the baseline's fp32 weights and Adam moments; DeepSpeed's 16-bit weights beside fp32 master weights, "
          "gradient buckets), not partitions.")
    parts = [f"{s} {n.nvml_mib:,.0f} = {n.allocated_mib:,.0f} + {n.cached_mib:,.0f} + {n.outside_mib:,.0f}"
             for s, n in [("baseline", f.baseline_nvml), *((s, f.stages[s].nvml) for s in lesson.STAGES)]]
    print("1. NVML peak = torch peak allocated + the allocator's free cached blocks + memory outside PyTorch: "
          + "; ".join(parts) + " MiB.")
    odd = [s for s in lesson.STAGES if f.stages[s].cache_inflated]
    if odd:
        print(f"1. {', '.join(odd)}: lower peak allocated but higher NVML peak than the baseline: the extra is cache "
              "the allocator reserved, not tensors the stage needs.")
else:
    print("1. No GPU: the peaks above are the whole process's host memory (weights, optimizer, activations and "
          "Python together), so the stages' model states cannot be read apart here; the reference rows show them.")
ratios = ", ".join(f"{s} {within(f.stages[s].speed)}" for s in lesson.STAGES)
line = f"2. slowest: {f.slowest} ({f.speed_kind}); against the baseline: {ratios}."
if f.slowest == "stage3" and f.slowest_apart:
    line += (" Stage 3 gathers every layer's parameters before its forward and again before its backward, and "
             "frees them after: extra copies and synchronisation that buy nothing on one GPU.")
    if f.stage3_uncompiled:
        line += (" Part of its gap is not ZeRO: under stage 3 the transformer blocks are not compiled (torch_compile "
                 "is off in its config, on in the baseline's), so the comparison is confounded: it launches more "
                 "kernels and keeps more intermediate tensors for the backward pass.")
elif not f.slowest_apart:
    line += " The slowest is not slower than every other run by more than the band: no stage is clearly slowest here."
else:
    line += (" Not stage 3, which the GPU reference is slowest at: on a CPU with the tiny model the gathers are small "
             "memory copies, while fixed per-step costs and the few steps (warm-up included) decide.")
print(line)
head = f"3. ZeRO stages' train losses span {f.loss_spread:.4f} nats (baseline {f.losses['baseline']:.4f})"
print(head + (": the same data, order and Adam maths, so the stages agree up to rounding; the baseline's torch "
              "AdamW and DeepSpeed's Adam round differently." if f.losses_agree else
              f", more than {lesson.LOSS_AGREE:.0%}: the stages should agree up to rounding; over a few steps of a tiny "
              "model, rounding differences in the first updates can grow. Compare their train_log.csv step by step."))
p, v = f.ac_peak, f.ac_speed
print(f"4. activation checkpointing: {f.peak_what} {p.value:,.0f} MiB against {p.other:,.0f} ({p.difference:+,.0f} MiB, "
      f"{p.verdict}); tokens/s {within(v)}. "
      + ("It saved memory; the recomputed forward pass adds work ("
         + (f"{f.ac_hfu_over_mfu - 1:.0%} more FLOPs" if f.ac_hfu_over_mfu else "one more forward pass")
         + "), yet the speed moved within the noise: the steps are not bound by arithmetic alone."
         if p.verdict == "lower" and
         v.verdict == "within the band" else
         "It saved memory and paid for it in speed." if p.verdict == "lower" and v.verdict == "lower" else
         "It saved no memory here: with a tiny model the activations are a small part of the memory, and the "
         "measure (host RSS on a CPU) also counts what earlier runs in this process left." if p.verdict != "lower"
         else "It saved memory and ran faster: compare the GPU utilisation column.")
      + (f" MFU {within(f.ac_mfu)}: the useful work per second; HFU is {f.ac_hfu_over_mfu:.2f}x its MFU, the "
         "recomputed forward pass counted as work the hardware did." if f.ac_mfu else
         " MFU and HFU need a GPU's peak FLOP/s: see the reference rows."))

# %% [markdown]
# ## Summary
# - ZeRO partitions model states *across data-parallel GPUs*. With N = 1 there is no partner to share with:
#   what does each stage still save, and what do its buckets and gathers cost? Your answers above say, for your run.
# - ZeRO does not touch activations and logits; activation checkpointing trades compute for them.
# - Two ways out for model states on one GPU: move them to the CPU (notebook 3), or add GPUs (notebook 4).
