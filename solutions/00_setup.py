# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 0. Setup: the machine, the data, the model
#
# **Learning goals**
# - check that PyTorch, DeepSpeed and the GPU (if any) work together, and know what `ds_report` tells you;
# - see what one training example looks like: the SQuAD prompt, its tokens, and which tokens carry the loss;
# - estimate, before downloading anything, how much memory the model states of a 0.6B model need, and
#   how ZeRO divides them.
#
# Everything here is done by the small library `workshop_lib`; the notebooks call it and show its code
# where it matters. Without a GPU (a laptop, or CI), the notebooks run a *tiny* model of the same family on
# the CPU: every number is smaller, every mechanism is the same.

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
# DeepSpeed compiles some of its operations (the fused Adam optimizer, the vectorised Adam on the CPU used by
# offload) the first time they are used. `ds_report` lists them and whether they can be built here. A line
# `[NO] ....... [OKAY]` means "not pre-built, but compatible: it can be compiled on first use"; `scripts/setup.sh`
# compiled those the course uses into this environment's cache already (each took one to several minutes,
# printed by the set-up), so no notebook waits for one.

# %%
print("\n".join(line for line in env.ds_report() if "adam" in line or "torch version" in line
                or "accelerator" in line.lower()))

# %%
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"{p.name}: {p.total_memory / 2**30:.1f} GiB, compute capability {p.major}.{p.minor}, "
          f"bf16 supported: {torch.cuda.is_bf16_supported()}, peak 16-bit FLOP/s: {env.peak_flops()}")
else:
    print("No GPU: the experiments will run the tiny model on the CPU, in fp32.")

# %% [markdown]
# ## 2. The data: SQuAD as a prompt
#
# SQuAD v1.1 (Rajpurkar et al. 2016; CC BY-SA 4.0) has questions about Wikipedia paragraphs whose answer is a
# span of the paragraph. We turn each one into a single text for a causal language model:
#
# `Question: {question} Context: {context} Answer: {answer}<eos>`
#
# `load_squad` takes SQuAD from the Hugging Face hub when it can reach it, else the real subset bundled with
# the package (the same rows in the same order), and says which.

# %%
train_raw = data.load_squad("train", num_samples=500)
ex = train_raw[0]
print(data.PROMPT.format(question=ex["question"], context=ex["context"][:200] + "...", answer=ex["answers"]["text"][0]))

# %% [markdown]
# ### Which tokens carry the loss?
#
# A causal LM predicts every next token. We can grade it on **all** tokens (the original workshop) or only
# on the **answer** (the default here). With `loss_on="all"` most of the gradient goes to reproducing
# the question and the Wikipedia paragraph, most of the tokens (the cell below counts them for one example);
# with `loss_on="answer"` the prompt
# tokens get the label -100, which `torch.nn.functional.cross_entropy` ignores, so the model is trained to
# answer. The two losses are therefore on different scales: compare runs only with the same `loss_on`.

# %%
_, tokenizer, _ = model.load_model_and_tokenizer(model.DEFAULT_MODEL, tiny=True)
enc = data.encode_example(ex, tokenizer, max_length=512, loss_on="answer")
graded = [t for t, label in zip(enc["input_ids"], enc["labels"]) if label != -100]
print(f"{len(enc['input_ids'])} tokens, {len(graded)} with a loss ({len(graded) / len(enc['input_ids']):.0%}): "
      f"{tokenizer.decode(graded)!r}")

# %% [markdown]
# ### Long examples
#
# Sequences are capped at 512 tokens. Cutting the end of a long example would cut the answer, the one part
# we train on. `tokenize_squad` instead shortens the *context* to a window around the answer, and drops an
# example only if even the question and answer do not fit. It reports the counts:

# %%
tokenized, stats = data.tokenize_squad(train_raw, tokenizer, max_length=512)
pd.Series(stats.as_dict())

# %% [markdown]
# ## 3. Memory before training: model states
#
# Mixed-precision training with Adam keeps, per parameter: 2 bytes of 16-bit weights, 2 of 16-bit gradients,
# and 12 of fp32 optimizer state (master weights, momentum, variance): **16 bytes per parameter**, the ZeRO
# paper's "16Ψ" (Rajbhandari et al. 2020). DeepSpeed's estimators tell us what each ZeRO stage leaves on each
# GPU; they count 4 bytes more, the fp32 gradients (below).
#
# The HF `Trainer` without DeepSpeed (the baseline) splits its 16 bytes differently: with bf16/fp16
# autocast it keeps fp32 weights (4), fp32 gradients (4) and Adam's two fp32 moments (8), plus 16-bit
# copies of the weights made during each forward pass. `estimate_model_states` with `zero_stage=None` gives
# that (the rows "Trainer" below); notebook 01 measures what it really holds. We can compute them from the architecture alone, built on the
# `meta` device: no download, no memory.

# %%
rows = []
for name in (model.DEFAULT_MODEL, model.CLASSIC_MODEL):
    n = model.count_params(name)
    for stage, off_opt, off_par in [(None, False, False), (0, False, False), (2, False, False), (3, False, False),
                                    (2, True, False), (3, True, True)]:
        for gpus in (1, 4):
            est = memory.estimate_model_states(n["num_params"], n["largest_layer_params"], stage, off_opt,
                                               off_par, num_gpus_per_node=gpus)
            rows.append({"model": name, "params (M)": n["num_params"] / 1e6,
                         "zero_stage": "Trainer" if stage is None else stage,
                         "offload": "opt+param" if off_par else ("opt" if off_opt else "-"), "GPUs": gpus,
                         "GPU MiB per GPU": est["estimated_model_states_gpu_mib"],
                         "GPU bytes/param": est["estimated_model_states_gpu_mib"] * units.MiB / n["num_params"],
                         "CPU MiB per node": est["estimated_model_states_cpu_mib"]})
estimates = pd.DataFrame(rows)
estimates

# %% [markdown]
# Why 20 bytes per parameter for stage 0 or 2 on one GPU, not 16? DeepSpeed's
# `estimate_zero2_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py, 0.19.8) budgets, without
# offload, `2 * total_params + 18 * total_params / total_gpus`, and its comment gives the 18: 16-bit gradients
# 2, **fp32 gradients 4**, fp32 master weights 4, Adam's momentum and variance 8. The ZeRO paper's 2 + 2 + 12
# leaves out the fp32 copy of the gradients that DeepSpeed's optimizer step works on: 2 + 18 = 20 on one GPU,
# 2 + 18/4 = 6.5 per GPU on four. DeepSpeed has no estimator for stage 0 (nor 1): `memory.estimate_model_states`
# uses stage 2's formula with one GPU for stage 0 (it partitions nothing), and stage 2's for stage 1 (a lower
# bound: stage 1 keeps whole gradients).

# %% [markdown]
# The two models' sizes, counted on the `meta` device as above:

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
    what = (f"the {p.vocab_size:,} x {p.hidden_size} token embedding" if p.largest_is_embedding
            else "not the token embedding")
    print(f"{p.model}: {p.num_params:,} parameters; largest tensor {p.largest_layer_params:,} parameters, {what}, "
          f"{p.largest_share:.0%} of the model.")
print(f"BLOOM's multilingual vocabulary of {bloom.vocab_size:,} tokens ({bloom.vocab_size / qwen.vocab_size:.1f}x "
      "Qwen3's) makes its embedding that large.")

# %% [markdown] tags=["exercise"]
# 2. From the table: how many MiB of model states does ZeRO stage 0 need on one GPU for Qwen3-0.6B, and
#    how many per GPU with stage 3 on 4 GPUs? What fraction is that?

# %% tags=["solution"]
z = setup.zero_split(estimates, model.DEFAULT_MODEL)
print(f"stage 0, 1 GPU: {z.stage0_1gpu_mib:,.0f} MiB; stage 3 on 4 GPUs: {z.stage3_4gpu_mib:,.0f} MiB per GPU "
      f"({z.stage3_fraction:.0%}).")

# %% [markdown] tags=["exercise"]
# 3. Why is the estimate for stages 0 and 2 the same on one GPU? Is that evidence that stage 2 saves nothing
#    on one GPU?

# %% tags=["solution"]
c = z.stage2_vs_stage0
print(f"stage 0: {c.other:,.0f} MiB, stage 2: {c.value:,.0f} MiB on one GPU ({c.verdict}).")
print("Equal by construction, so no evidence: DeepSpeed has no stage-0 estimator, and the table's stage-0 row is "
      "stage 2's formula with one GPU (memory.estimate_model_states). The formula says why they would agree: "
      "stage 2 divides 18 of its 20 bytes per parameter by the number of data-parallel GPUs, and one GPU divides "
      "nothing (only offload moves memory off a single GPU). The evidence is a measurement: notebook 02 runs "
      "the baseline and stages 1-3 on one GPU and compares their memory.")

# %% [markdown]
# ## Summary
# - `workshop_lib` loads SQuAD (hub or bundled), builds the prompts and the loss mask, and builds models
#   from the hub, with random weights, or tiny.
# - Model states with Adam cost about 16 bytes per parameter: 2 + 2 + 12 in the ZeRO paper's mixed precision
#   (DeepSpeed's estimator budgets 20: it adds 4 bytes of fp32 gradients), 4 + 4 + 8 in the `Trainer` with
#   autocast (plus transient 16-bit copies); ZeRO divides DeepSpeed's across GPUs, offload moves them to the
#   CPU. Activations come on top: the next notebooks measure them.
