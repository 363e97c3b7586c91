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
# # 3d. Failure drills: a batch that does not add up, fp16 overflow
#
# **Learning goals**
# - recognise DeepSpeed's batch assertion (train_batch_size = micro-batch x gradient_accumulation_steps x
#   world_size), know why a config written for one GPU fails on two, and build the config for the world that
#   runs it;
# - recognise fp16 overflow on a model pretrained in bf16: every step skipped, the loss scale halving until
#   DeepSpeed gives up; and why bf16 trains the same steps.
#
# Notebook 03c showed the third failure to recognise on sight, out of memory. Both drills here run on the tiny
# model, on any machine: each failure is produced for real by DeepSpeed and shown as data
# (`workshop_lessons.drills`).
#
# *Learner version: the interpretation is yours (the answers are in `solutions/`).*

# %%
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import drills

display(Markdown(lessons.header("03d_failure_drills")))

# %% [markdown]
# ## A batch size that does not add up across ranks
# DeepSpeed checks train_batch_size = micro-batch x accumulation x world_size. A config written for one GPU and
# launched on two fails on every rank, before training (the drill's two ranks run on the CPU whatever the machine:
# the failure is in the config, not the hardware):

# %%
mismatch = drills.batch_size_mismatch()
print("\n".join(mismatch["error_lines"]))
print("arithmetic:", mismatch["arithmetic"])
fixed = drills.batch_size_mismatch(fixed=True)
print(
    f"with build_ds_config(..., Settings(world_size=2)): train_batch_size {fixed['config']['train_batch_size']}, "
    f"exit {fixed['returncode']}"
)

# %% [markdown]
# ## fp16 on a model pretrained in bf16
# bf16 has fp32's range; fp16 stops at 65,504. Sun et al. 2024 ("Massive Activations in Large Language Models",
# COLM 2024) find in pretrained LLMs a few activations up to
# about 100,000 times the median one, in fixed feature dimensions at the first token, that the models use as
# biases. How large they are in absolute terms depends on the model (in LLaMA2-7B, their Figure 1, they stay in
# the thousands, below fp16's limit); where one passes 65,504, fp16 makes it inf, every step overflows, and
# DeepSpeed's loss scaler halves the scale after each skipped step until it gives up, while bf16 trains. The tiny
# model, never pretrained, has none: the drill plants one of 1e5 (`drills.plant_massive_activation`, one MLP
# neuron of the first block firing on the first token, every weight ordinary-sized), above fp16's limit on
# purpose, to show that failure.

# %%
fp16 = drills.fp16_overflow()
planted = fp16.attrs["massive_activation"]
print(
    f"planted: {planted['max_abs_hidden']:,.0f} in feature {planted['dim']} after block {planted['layer']}, "
    f"{planted['times_median']:,.0f}x the median |activation| ({planted['median_abs_hidden']:.3g}), at "
    f"{planted['positions_over_fp16_max']} first tokens above fp16's {planted['fp16_max']:,.0f}; the largest "
    f"|weight| {planted['max_abs_weight']:.1f}"
)
drills.plot_fp16_overflow(fp16)
plt.show()
summary = fp16.groupby("precision", sort=False).agg(
    steps=("step", "count"),
    skipped=("skipped", "sum"),
    first_loss=("loss", "first"),
    last_loss=("loss", "last"),
    first_loss_scale=("loss_scale", "first"),
    last_loss_scale=("loss_scale", "last"),
)
display(summary)

# %% [markdown] tags=["exercise"]
# 1. What arithmetic did DeepSpeed print for the mismatched batch, and what is the fix?

# %% [markdown] tags=["exercise"]
# 2. How many fp16 steps were skipped before DeepSpeed stopped, and what did bf16 do with the same steps?

# %% [markdown]
# ## Summary
# - DeepSpeed checks train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x world_size
#   on every rank before training: build the config for the world that runs it, or leave the batch sizes "auto"
#   for the HF Trainer to fill.
# - fp16 stops at 65,504. A model pretrained in bf16 can hold activations beyond it: fp16 then overflows every
#   step, and a collapsing loss scale is the sign. Train it in bf16.
