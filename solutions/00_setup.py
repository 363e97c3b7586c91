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
# # 0. Setup: the machine, the data, the model
#
# **Learning goals**
# - check that PyTorch, DeepSpeed and the GPU (if any) work together;
# - see one training example, and which of its tokens carry the loss;
# - estimate a 0.6B model's state memory before downloading it;
# - learn how the course measures its numbers (the last section).
#
# The library `workshop_lib` does the work; the notebooks call it. Without a GPU they run a *tiny* model of the
# same family on the CPU: smaller numbers, the same mechanisms.

# %%
import pandas as pd
import torch
from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lib import data, env, memory, model, units

display(Markdown(lessons.header("00_setup")))

# Without a GPU the tiny model runs on the CPU; WORKSHOP_TINY=1 or 0 forces either way.
TINY = lessons.notebook_run_options()["tiny"]
print(f"device: {env.device_name()}   tiny model: {TINY}")
print(env.versions())

# %% [markdown]
# ## 1. The machine
#
# `ds_report` lists DeepSpeed's compiled operations (fused Adam, the CPU Adam of offload): `[NO] ....... [OKAY]`
# means "not pre-built, but it can be compiled here". `scripts/setup.sh` compiled those the course uses.

# %%
print(
    "\n".join(
        line for line in env.ds_report() if "adam" in line or "torch version" in line or "accelerator" in line.lower()
    )
)

# %%
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(
        f"{p.name}: {p.total_memory / 2**30:.1f} GiB, compute capability {p.major}.{p.minor}, "
        f"bf16 supported: {torch.cuda.is_bf16_supported()}, peak 16-bit FLOP/s: {env.peak_flops()}"
    )
else:
    print("No GPU: the experiments will run the tiny model on the CPU, in fp32.")

# %% [markdown]
# ## 2. The data: SQuAD as a prompt
#
# SQuAD v1.1 (Rajpurkar et al. 2016; CC BY-SA 4.0) asks questions about Wikipedia paragraphs; each answer is a
# span of its paragraph. Each example becomes one text for a causal language model:
#
# `Question: {question} Context: {context} Answer: {answer}<eos>`
#
# `load_squad` reads SQuAD from the Hugging Face hub, else the same rows bundled with the package. On a cluster whose
# compute nodes have no internet, fill the cache once on a login node with Hugging Face's own tools:
# `hf download Qwen/Qwen3-0.6B` (and `hf download bigscience/bloom-560m` for the classic recipe), and
# `python -c "import datasets; datasets.load_dataset('rajpurkar/squad')"` for SQuAD; then
# `HF_HUB_OFFLINE=1 workshop run baseline --max-steps 1 --save-strategy no --output-dir /tmp/check` checks that a
# run starts offline.

# %%
train_raw = data.load_squad("train", num_samples=500)
ex = train_raw[0]
print(data.PROMPT.format(question=ex["question"], context=ex["context"][:200] + "...", answer=ex["answers"]["text"][0]))

# %% [markdown]
# ### Which tokens carry the loss?
#
# The loss can cover **all** tokens (the original workshop) or only the **answer** (the default,
# `loss_on="answer"`): the prompt tokens get the label -100, which `cross_entropy` ignores, so the model learns to
# answer rather than to copy the paragraph. The two losses are on different scales: compare runs only with the
# same `loss_on`.

# %%
_, tokenizer, _ = model.load_model_and_tokenizer(model.DEFAULT_MODEL, tiny=True)
enc = data.encode_example(ex, tokenizer, max_length=512, loss_on="answer")
graded = [t for t, label in zip(enc["input_ids"], enc["labels"]) if label != -100]
print(
    f"{len(enc['input_ids'])} tokens, {len(graded)} with a loss ({len(graded) / len(enc['input_ids']):.0%}): "
    f"{tokenizer.decode(graded)!r}"
)

# %% [markdown]
# ### Long examples
#
# Sequences are capped at 512 tokens. Cutting the end would cut the answer, so `tokenize_squad` shortens the
# *context* around the answer, and drops an example only if its question and answer alone do not fit:

# %%
tokenized, stats = data.tokenize_squad(train_raw, tokenizer, max_length=512)
pd.Series(stats.as_dict())

# %% [markdown]
# ## 3. Memory before training: model states
#
# Mixed-precision training with Adam keeps, per parameter, 2 bytes of 16-bit weights, 2 of 16-bit gradients and
# 12 of fp32 optimizer state (master weights, momentum, variance): **16 bytes per parameter**, the ZeRO paper's
# "16Ψ" (Rajbhandari et al. 2020). DeepSpeed's estimators give what each ZeRO stage leaves on each GPU.
#
# The HF `Trainer` without DeepSpeed (the baseline) splits its 16 bytes differently: fp32 weights (4), fp32
# gradients (4), Adam's two moments (8), and transient 16-bit copies under autocast (the "Trainer" rows). All from
# the architecture on the `meta` device: no download, no memory.

# %%
rows = []
for name in (model.DEFAULT_MODEL, model.CLASSIC_MODEL):
    n = model.count_params(name)
    for stage, off_opt, off_par in [
        (None, False, False),
        (0, False, False),
        (2, False, False),
        (3, False, False),
        (2, True, False),
        (3, True, True),
    ]:
        for gpus in (1, 4):
            est = memory.estimate_model_states(
                n["num_params"], n["largest_layer_params"], stage, off_opt, off_par, num_gpus_per_node=gpus
            )
            rows.append(
                {
                    "model": name,
                    "params (M)": n["num_params"] / 1e6,
                    "zero_stage": "Trainer" if stage is None else stage,
                    "offload": "opt+param" if off_par else ("opt" if off_opt else "-"),
                    "GPUs": gpus,
                    "GPU MiB per GPU": est["estimated_model_states_gpu_mib"],
                    "GPU bytes/param": est["estimated_model_states_gpu_mib"] * units.MiB / n["num_params"],
                    "CPU MiB per node": est["estimated_model_states_cpu_mib"],
                }
            )
estimates = pd.DataFrame(rows)
estimates

# %% [markdown]
# Why 20 bytes per parameter on one GPU, not 16? DeepSpeed's estimator (0.19.8) counts `2 * total_params + 18 *
# total_params / total_gpus`: its 18 adds **fp32 gradients** (4) to the paper's 2 + 12. It has no estimator for
# stages 0 and 1: `memory.estimate_model_states` uses stage 2's formula (a lower bound for stage 1).

# %% [markdown]
# The two models' sizes:

# %%
from workshop_lessons import setup

setup.params_table([model.DEFAULT_MODEL, model.CLASSIC_MODEL])

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# 1. How many parameters do Qwen3-0.6B and BLOOM-560m have? Which single tensor is the largest, and why
#    is it so large for BLOOM?

# %% tags=["solution"]
qwen, bloom = setup.param_counts(model.DEFAULT_MODEL), setup.param_counts(model.CLASSIC_MODEL)
for p in (qwen, bloom):
    what = (
        f"the {p.vocab_size:,} x {p.hidden_size} token embedding"
        if p.largest_is_embedding
        else "not the token embedding"
    )
    print(
        f"{p.model}: {p.num_params:,} parameters; largest tensor {p.largest_layer_params:,} parameters, {what}, "
        f"{p.largest_share:.0%} of the model."
    )
print(
    f"BLOOM's multilingual vocabulary of {bloom.vocab_size:,} tokens ({bloom.vocab_size / qwen.vocab_size:.1f}x "
    "Qwen3's) makes its embedding that large."
)

# %% [markdown] tags=["exercise"]
# 2. From the table: how many MiB of model states does ZeRO stage 0 need on one GPU for Qwen3-0.6B, and
#    how many per GPU with stage 3 on 4 GPUs? What fraction is that?

# %% tags=["solution"]
z = setup.zero_split(estimates, model.DEFAULT_MODEL)
print(
    f"stage 0, 1 GPU: {z.stage0_1gpu_mib:,.0f} MiB; stage 3 on 4 GPUs: {z.stage3_4gpu_mib:,.0f} MiB per GPU "
    f"({z.stage3_fraction:.0%})."
)

# %% [markdown] tags=["exercise"]
# 3. Why is the estimate for stages 0 and 2 the same on one GPU? Is that evidence that stage 2 saves nothing
#    on one GPU?

# %% tags=["solution"]
c = z.stage2_vs_stage0
print(f"stage 0: {c.other:,.0f} MiB, stage 2: {c.value:,.0f} MiB on one GPU ({c.verdict}).")
print(
    "Equal by construction, so no evidence: DeepSpeed has no stage-0 estimator, and the table's stage-0 row is "
    "stage 2's formula with one GPU (memory.estimate_model_states). The formula says why they would agree: "
    "stage 2 divides 18 of its 20 bytes per parameter by the number of data-parallel GPUs, and one GPU divides "
    "nothing (only offload moves memory off a single GPU). The evidence is a measurement: notebook 02 runs "
    "the baseline and stages 1-3 on one GPU and compares their memory."
)

# %% [markdown]
# ## How the numbers are measured
#
# Notebooks 01-04 rely on these rules.
#
# - **Length.** Every run stops after the same number of optimizer steps (`lessons.GPU_MAX_STEPS`), on a GPU and
#   a CPU alike.
# - **Steady state.** Speed (tokens/s, step time, MFU) is all steady steps' tokens over their time; the warm-up,
#   found from the run's log, is left out.
# - **Warm-up run.** On a CPU each run is faster than the one before (workshop_lessons/reference/cpu/run_order.md),
#   so each notebook first makes short runs it throws away (`lessons.warm_up`). A GPU needs none
#   (docs/h100/run-order).
#
# - **Bands.** Each of your figures stands beside the GPU reference run of the same name and its band: the largest
#   spread of that figure between two measurements of any reference run measured twice. A difference within the
#   band is noise, not a finding.
# - **Memory.** Peaks are over the training steps only. Without a GPU, memory is the whole process's RSS (Python,
#   torch, the data, earlier runs), which swamps a tiny model's states: the GPU reference rows show what ZeRO or
#   offload saves.

# %% [markdown]
# ## Summary
# - By default the loss is on the answer only: compare losses only between runs with the same `loss_on`.
# - Adam's model states cost 16 bytes per parameter (DeepSpeed budgets 20). ZeRO divides them across GPUs, offload
#   moves them to the CPU; activations come on top.
