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
# # 3e. Appendix: ZenFlow, and a DeepSpeed defect it shows
#
# **Learning goals**
# - know what ZenFlow is meant to do: CPU offload without the GPU waiting for the CPU;
# - check that two runs trained the same model before comparing their losses, and find that DeepSpeed 0.19.8's
#   ZenFlow does not;
# - reproduce the defect in a few lines, to report it upstream.
#
# Optional, after notebook 03. Plain offload makes every step wait for the CPU's Adam step and the PCIe copies.
# ZenFlow (DeepSpeed's tutorial "ZenFlow", an extension of ZeRO-Offload) is meant to remove that stall: every step
# the GPU updates the `topk_ratio` share of gradient columns with the largest norms, the important ones, their
# Adam states kept on the GPU. The other columns' gradients accumulate and go to the CPU's Adam every
# `update_interval` steps, asynchronously: with `overlap_step` (CUDA only) in a process of its own while the GPU
# goes on. The price: most weights are updated a few steps late, not exact Adam.
#
# *Learner version: the tables show your own runs beside the GPU reference; the interpretation is yours (the answers are in `solutions/`).*

# %%
import inspect
import json

from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import zenflow as lesson
from workshop_lib import env
from workshop_lib.train import run_experiment

display(Markdown(lessons.header("03e_zenflow")))
# the settings notebook 03 runs with (tiny model without a GPU; micro-batches sized for this GPU)
COMMON = lessons.notebook_run_options(size_micro_batches=True)
print(f"device: {env.device_name()}, run options: {COMMON}")
NOTEBOOK, RUNS = "03e_zenflow", "runs/03e_zenflow"
ORDER = list(lessons.COURSE_RUNS[NOTEBOOK])  # stage2_offload, stage2_zenflow

# %%
lessons.warm_up(NOTEBOOK, RUNS, **COMMON)
with lesson.without_state_clears():  # DeepSpeed prints a line at each clear of ZenFlow's states
    for name in ORDER:
        run_experiment(lessons.run_config(NOTEBOOK, name, RUNS, **COMMON))
print(
    "ZenFlow's settings (ds_config.json):",
    json.loads(open(f"{RUNS}/stage2_zenflow/ds_config.json").read())["zero_optimization"]["zenflow"],
)
display(Markdown(lessons.table(NOTEBOOK, RUNS).to_markdown(index=False)))
print(lessons.reference_note())
z = lesson.zenflow(f"{RUNS}/stage2_offload", f"{RUNS}/stage2_zenflow")
lesson.plot_loss(
    {"stage2_offload (plain offload)": f"{RUNS}/stage2_offload", "stage2_zenflow (ZenFlow)": f"{RUNS}/stage2_zenflow"},
    z,
)
# %% [markdown]
# ## First: did both runs train the same model?
#
# Step 1's loss comes from the same batch before any update, so it must agree between the two runs. It does not
# with DeepSpeed 0.19.7 and 0.19.8. ZenFlow flattens each 2-D weight W column-major (transposed first:
# `zenflow_utils._flatten_dense_tensors`), and `_update_model_bit16_weights`
# (`deepspeed/runtime/zero/stage_1_and_2.py`, line 894 in 0.19.8) points each weight at its slice with
# `narrow(0, offset, n).view(shape)` instead of ZenFlow's transposing `unflatten`. Each weight becomes `W.T.reshape(shape)`, its values scrambled, at
# `deepspeed.initialize` and after every step. The line came with DeepSpeed PR #8277 (parameter alignment for
# grouped_mm); 0.19.6 read the buffer through `unflatten`. The function as your DeepSpeed has it, then the check:

# %%
from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

source, first_line = inspect.getsourcelines(DeepSpeedZeroOptimizer._update_model_bit16_weights)
print(f"deepspeed/runtime/zero/stage_1_and_2.py, line {first_line}:\n{''.join(source)}")
mine = z.start
print(
    f"Your runs (DeepSpeed {mine.deepspeed}): step 1's loss, before any update: ZenFlow {mine.zenflow:.4f}, plain "
    f"offload {mine.offload:.4f}: {'the same model' if mine.same_start else 'not the same model'} "
    f"(tolerance {lesson.START_TOLERANCE} nats)"
)
ref_dir = lessons.REFERENCE_DIR / "runs"
if (ref_dir / "stage2_zenflow").is_dir():
    ref = lesson.first_loss_check(ref_dir / "stage2_offload", ref_dir / "stage2_zenflow")
    print(
        f"The reference runs (DeepSpeed {ref.deepspeed}): ZenFlow {ref.zenflow:.4f}, plain offload "
        f"{ref.offload:.4f}: {'the same model' if ref.same_start else 'not the same model'}"
    )

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# 1. Does your DeepSpeed still have the defect? Answer from the step-1 losses above and the function's source.
# 2. What did ZenFlow buy here, and what did it cost? Answer from the figures above: speed, loss, and memory; say
#    what the loss difference measures.

# %% [markdown]
# ## Reporting it upstream
#
# `scripts/zenflow_init_check.py` is the reproducer: about 10 s on a CPU, no GPU, no download. It passes the tiny
# Qwen3 through `deepspeed.initialize` without and with ZenFlow and prints, before any step, the DeepSpeed and
# torch versions, how many weights changed, the loss of one batch, and for each changed weight W whether it now
# equals `W.T.reshape(shape)`. From the repository's root: `python scripts/zenflow_init_check.py`. To report it,
# open an issue at github.com/deepspeedai/DeepSpeed with its output, the source line above and the fix it points
# to (the 2-D slice viewed as the transposed shape and transposed back, as ZenFlow's `unflatten` does); search
# the tracker for `_update_model_bit16_weights` first.

# %% [markdown]
# ## Summary
# - ZenFlow updates the important gradient columns on the GPU every step and the rest on the CPU every few steps,
#   asynchronously: less waiting on the CPU, bought with stale updates.
# - Compare two runs' losses only from the same starting model: step 1's loss, before any update, must agree.
# - DeepSpeed 0.19.7 and 0.19.8 scramble each 2-D weight under ZenFlow (`_update_model_bit16_weights`);
#   `scripts/zenflow_init_check.py` reproduces it for an upstream report.
