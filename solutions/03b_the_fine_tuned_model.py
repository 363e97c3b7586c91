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
# # 3b. The fine-tuned model: saved, resumed, exported, scored
#
# **Learning goals**
# - find the model a run saves, reload it with `from_pretrained`, and check it is the model that was trained;
# - read a DeepSpeed checkpoint: what each ZeRO shard holds, and why a ZeRO-3 checkpoint is about <!--fig:checkpoint-bytes-->14<!--/fig:checkpoint-bytes--> bytes per parameter
#   on a bf16 GPU run (16 in the CPU's fp32);
# - kill a run with `kill -9` and resume it from its last checkpoint, to the same losses, on as many ranks;
# - turn ZeRO-3 shards into a Hugging Face model (`zero_to_fp32`);
# - generate answers before and after fine-tuning and score them with SQuAD's exact match and F1.
#
# Every run writes `OUTPUT_DIR/model/` when it ends and `OUTPUT_DIR/checkpoints/checkpoint-N/` while it
# trains (the HF Trainer's `save_strategy`, `save_steps`, `save_total_limit`; with DeepSpeed, the engine's own
# checkpoint format). `workshop_lib.checkpoint` finds, checks and exports checkpoints; `workshop_lib.evaluation`
# reloads, generates and scores.

# %%
import json
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
from IPython.display import Markdown, display

import workshop_lessons as lessons
from workshop_lessons import fine_tuned
from workshop_lib import checkpoint, config, env, evaluation, model
from workshop_lib.config import RunConfig
from workshop_lib.data import load_squad
from workshop_lib.train import run_experiment

display(Markdown(lessons.header("03b_the_fine_tuned_model")))
# The tiny model on the CPU when there is no GPU (WORKSHOP_TINY=1/0 forces it); on a GPU, micro-batches sized for
# it as in 01-03 (the line printed says why)
COMMON = lessons.notebook_run_options(size_micro_batches=True)
print(f"device: {env.device_name()}, run options: {COMMON}")
RUNS = Path("runs/03b_the_fine_tuned_model")

# %% [markdown]
# **Disk first.** A checkpoint holds what training needs to continue: Adam's states and the fp32 master weights
# (<!--fig:optimizer-bytes-->12<!--/fig:optimizer-bytes--> bytes per parameter) and the model in its training precision. So each run here writes few
# (`fine_tuned.SAVES` per run, at evenly spaced steps, here its last; `save_total_limit` keeps the newest <!--fig:save-total-limit-->2<!--/fig:save-total-limit-->), and
# this is what the notebook will write, computed from the parameter count before anything is written:

# %%
planned = config.resolve(RunConfig("stage3_offload", **COMMON))
SAVE = fine_tuned.save_settings(planned.max_steps)  # save_strategy and save_steps of every run below
plan = fine_tuned.checkpoint_plan(
    model.count_params(planned.model, tiny=planned.tiny)["num_params"],
    env.pick_precision(planned.precision),
    planned.max_steps,
    planned.epochs,
)
print(
    f"{planned.model}{' (tiny)' * planned.tiny}: {plan.num_params:,} parameters x {plan.bytes_per_param} bytes = {plan.checkpoint_mib:,.1f} "
    f"MiB per checkpoint; up to {plan.written} checkpoints written ({plan.written_mib / 1024:,.2f} GiB), "
    f"{plan.kept_mib / 1024:,.2f} GiB on disk at the end with the model directories, under {RUNS}/. "
    f"Checkpoints: {SAVE}."
)

# %% [markdown]
# ## 1. The saved model
#
# ZeRO-3 with the optimizer and the parameters offloaded: the hardest case to save, since no rank holds the
# whole model. On save, DeepSpeed gathers the partitioned weights (`stage3_gather_16bit_weights_on_model_save`
# in the config it gets). Checkpoints as planned above (`SAVE`).

# %%
zero3 = run_experiment(RunConfig("stage3_offload", output_dir=str(RUNS / "zero3"), **SAVE, **COMMON))
print(sorted(p.name for p in (RUNS / "zero3" / "model").iterdir()))

# %% [markdown]
# Reload it as anyone would, without DeepSpeed, and evaluate it on the run's own eval questions with the
# run's own batching: the eval loss must be the run's last.

# %%
net, tok = evaluation.load_model(RUNS / "zero3")  # AutoModelForCausalLM / AutoTokenizer.from_pretrained
log = pd.read_csv(RUNS / "zero3" / "train_log.csv")
run_last = log["eval_loss"].dropna().iloc[-1]
reloaded = evaluation.eval_loss(net, tok, zero3["config"])
print(f"eval loss: the run's last {run_last:.6f}, the reloaded model's {reloaded:.6f}")

# %% [markdown]
# ## 2. What a checkpoint holds
#
# `global_stepN/` is DeepSpeed's format: for each rank, its ZeRO partition of the optimizer
# (`*_optim_states.pt`: fp32 master weights, Adam's two moments) and the module's states; beside it the
# learning-rate schedule, each rank's RNG states and `trainer_state.json` (step, epoch, log history). When the
# Trainer has written all of it, the workshop adds `workshop_manifest.json`, every file's size (and SHA-256 up
# to <!--fig:checksum-mib-->16<!--/fig:checksum-mib--> MiB): a checkpoint without it, or whose files do not match it, was interrupted or damaged; `--resume`
# moves it to `damaged-checkpoints/` and continues from the older complete one.
#
# Per parameter, the optimizer's partitions are <!--fig:optimizer-bytes-->12<!--/fig:optimizer-bytes--> bytes (fp32 master weights 4, Adam's momentum 4 and variance
# 4: the ZeRO paper's K = 12, Rajbhandari et al. 2020, section 3.1) and `model.safetensors`, the model's own
# copy, 2 more in bf16 (4 in the CPU's fp32); gradients are not saved. About <!--fig:checkpoint-bytes-->14<!--/fig:checkpoint-bytes--> bytes per parameter for a bf16
# ZeRO-3 run on a GPU, as this notebook's; at stages 0-2 the model_states file holds the module's weights too, 2 more.

# %%
complete, incomplete = checkpoint.find_checkpoints(RUNS / "zero3")
last = complete[-1]
print("kept:", [p.name for p in complete], "incomplete:", [p.name for p in incomplete])
files = fine_tuned.checkpoint_files(last, zero3["num_params"])  # every file: MiB, bytes per parameter
size = fine_tuned.checkpoint_size(files, zero3["num_params"], zero3["precision"])
print(
    f"all {len(files)} files: {size.total_mib:,.1f} MiB for {size.num_params:,} parameters, "
    f"{size.bytes_per_param:.1f} bytes/param; expected for a {size.precision} run: "
    f"{size.expected_bytes_per_param} (12 of optimizer states + the weights in {size.precision})"
)
files

# %% [markdown]
# ## 3. Kill a run, resume it
#
# The same run again in a separate process, started as `workshop run` with the same settings
# (`config.cli_args` writes a `RunConfig` as its command line), a checkpoint after every step, killed with
# SIGKILL (nothing runs on the way out, as when a node dies) once its second checkpoint is written. Then
# `--resume` (here `resume=True`) continues from its last complete checkpoint: with the same settings, which a
# resume checks, except where and how often to write (`checkpoint.MAY_CHANGE`), so it goes back to the plan's
# few checkpoints.

# %%
killed = RUNS / "killed"
kill_cfg = RunConfig("stage3_offload", output_dir=str(killed), save_strategy="steps", save_steps=1, **COMMON)
cmd = [sys.executable, "-m", "workshop_lib.cli", "run", *config.cli_args(kill_cfg)]
print(" ".join(cmd[1:]))
# a world of its own: the kernel's runs left no rank variables behind (`teardown.restored_world`)
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
last_save = killed / "checkpoints" / f"checkpoint-{fine_tuned.KILL_AFTER}"
while proc.poll() is None and checkpoint.step_of(last_save) is None:
    time.sleep(0.05)
proc.kill()
err = proc.communicate()[1]
assert proc.returncode == -9, f"the run ended by itself before it was killed: {err[-2000:]}"
kept = checkpoint.find_checkpoints(killed)[0]
resume_step = checkpoint.step_of(kept[-1])
print(
    f"killed (exit {proc.returncode}); complete checkpoints: {[p.name for p in kept]}; results.json: "
    f"{(killed / 'results.json').exists()}"
)

# %%
resumed = run_experiment(replace(kill_cfg, resume=True, overwrite=False, **SAVE))
both = pd.DataFrame(
    {
        "uninterrupted": [zero3["train_loss"], zero3["eval_loss"][-1]],
        "killed + resumed": [resumed["train_loss"], resumed["eval_loss"][-1]],
    },
    index=["train loss", "last eval loss"],
)
both

# %% [markdown]
# **On as many ranks.** ZeRO keeps each rank's partition of Adam's states in a file of its own, which DeepSpeed
# loads only on as many ranks, and the global batch and data position belong to that world size: `--resume` on
# another number of GPUs is refused before anything is written. A requeued SLURM job keeps its node count.

# %% [markdown]
# ## 4. From ZeRO shards to a Hugging Face model
#
# `workshop export CHECKPOINT_OR_RUN_DIR OUT` runs DeepSpeed's own consolidation (`zero_to_fp32`, also saved
# into every checkpoint as `zero_to_fp32.py`): it merges every rank's partition of the fp32 master weights,
# whatever the ZeRO stage and the number of GPUs that wrote them.

# %%
shutil.rmtree(RUNS / "exported", ignore_errors=True)  # a previous execution's
exported = checkpoint.export(last, RUNS / "exported")
net2, _ = evaluation.load_model(exported)
a, b = net.state_dict(), net2.state_dict()
print(f"{exported}: {sorted(p.name for p in exported.iterdir())}")
print(
    f"largest difference to model/: {max((a[k] - b[k]).abs().max().item() for k in a):.2e} "
    f"(model/ holds the training precision's copy, the export the fp32 master weights)"
)

# %% [markdown]
# ## 5. Does it answer? Exact match and F1
#
# Loss says little to someone who asks a question. `evaluation.generate_answers` gives the model each
# question's prompt without its answer ("Question: ... Context: ... Answer:") and lets it write greedily until
# the end of the line; SQuAD's exact match and F1 (v1.1's official normalisation: lower case, no punctuation,
# no articles; the max over the gold answers) score what it wrote, through torchmetrics' `SQuAD`.
#
# With a GPU and the hub, Qwen3-0.6B is scored on dev questions before and after a fine-tuning epoch. The
# tiny model (or random weights) cannot learn SQuAD in minutes, so it shows the pipeline by overfitting a
# handful of training questions, asked again after training: `score_questions` scores the model before and
# after (`em_before`, `em` in results.json; the answers in predictions.jsonl).

# %%
real = not COMMON["tiny"] and not COMMON["random_weights"]  # Qwen3-0.6B's own weights
if real:
    cfg = RunConfig(
        "stage2", output_dir=str(RUNS / "scored"), epochs=1, score_questions=200, save_strategy="no", **COMMON
    )
else:
    rows = load_squad("train", 8, verbose=False)
    handful = RUNS / "handful.json"  # the 8 questions as a SQuAD v1.1 file, for training and for the questions
    handful.write_text(
        json.dumps(
            {
                "data": [
                    {
                        "title": "handful",
                        "paragraphs": [
                            {
                                "context": r["context"],
                                "qas": [
                                    {
                                        "id": r["id"],
                                        "question": r["question"],
                                        "answers": [
                                            {"text": t, "answer_start": s}
                                            for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"])
                                        ],
                                    }
                                ],
                            }
                            for r in rows
                        ],
                    }
                ]
            }
        )
    )
    cfg = RunConfig(
        "stage2",
        output_dir=str(RUNS / "scored"),
        train_file=str(handful),
        eval_file=str(handful),
        num_train_samples=8,
        num_eval_samples=8,
        epochs=60,
        learning_rate=1e-2,
        save_strategy="no",
        score_questions=8,
        **(COMMON | {"max_steps": None}),
    )  # all 60 epochs: until it memorised them
scored = run_experiment(cfg)
print(
    f"exact match {scored['em_before']:.1f} -> {scored['em']:.1f}, F1 {scored['f1_before']:.1f} -> {scored['f1']:.1f}"
)
pd.read_json(RUNS / "scored" / "predictions.jsonl", lines=True)[["question", "prediction", "answers"]].head(8)

# %% [markdown]
# One question of your own, answered as `generate_answers` answers every one:

# %%
row = load_squad("validation" if real else "train", 1, verbose=False)[0]
net, tok = evaluation.load_model(RUNS / "scored")
print(
    row["question"], "->", evaluation.generate_answers(net, tok, [row["question"]], [row["context"]], progress=False)[0]
)

# %% [markdown]
# ## Your runs
#
# The losses (nats per answer token) and SQuAD scores (%) of this notebook's runs, blank where a figure was
# not measured. No reference runs are on file for this notebook: the losses to compare are your own.

# %%
fine_tuned.runs_table(zero3, resumed, reloaded, scored)

# %% [markdown] tags=["exercise"]
# ## Exercises
#
# 1. How many bytes per parameter does the last checkpoint take on disk, all files together? Which files hold
#    most of it, and why?

# %% tags=["solution"]
print(
    f"{size.total_mib:,.1f} MiB for {size.num_params:,} parameters: {size.bytes_per_param:.1f} bytes per "
    f"parameter. The largest file is {size.largest_file} ({size.largest_bytes_per_param:.1f} bytes per "
    f"parameter): {size.largest_holds}."
)
per_param = files.groupby(files["file"].map(fine_tuned.holds))["bytes/param"].sum().sort_values(ascending=False)
print(
    f"Expected for this {size.precision} run: {size.expected_bytes_per_param} bytes per parameter (12 of optimizer "
    f"states + the weights in {size.precision}). Measured, by what the files hold: "
    + "; ".join(f"{b:.2f} in {what}" for what, b in per_param.items())
    + "."
)
display(files.assign(holds=files["file"].map(fine_tuned.holds)))

# %% [markdown] tags=["exercise"]
# 2. The killed run was resumed from which step? How many steps did the kill cost?

# %% tags=["solution"]
r = fine_tuned.resume(resume_step, resumed, zero3)
print(
    f"From step {r.resume_step} of {r.global_steps}: the resumed run trained the {r.steps_redone} step(s) "
    "after that checkpoint, not the whole run; with a checkpoint every step, the kill cost at most the step "
    "in progress."
)
c = r.eval_loss
if r.verdict == "restored":
    print(
        f"Its last eval loss, {c.value:.4f}, is the uninterrupted run's ({c.other:.4f}; the difference "
        f"{c.difference:+.1e} nats is within the tolerance {c.band_text}): resuming restored the weights, the "
        "optimizer, the schedule and the data order."
    )
else:
    print(
        f"Its last eval loss, {c.value:.4f}, differs from the uninterrupted run's {c.other:.4f} by "
        f"{c.spread:.2%}, beyond the tolerance {c.band_text}: something was not restored as saved (the data "
        "order, the RNG states or the optimizer's partitions); compare train_log.csv step by step."
    )

# %% [markdown] tags=["exercise"]
# 3. Why is a checkpoint without its manifest never loaded, and what would go wrong if it were?

# %% tags=["solution"]
print(
    "The manifest is written last, after the Trainer's save (DeepSpeed's shards, whose save ends with a "
    "barrier of all ranks, the schedule, the RNG states, trainer_state.json) and a barrier of every rank. "
    "Without it, or with a file of another size, some shard may be missing or half written: loading it would "
    "fail, or worse, silently mix the weights of two steps."
)

# %% [markdown] tags=["exercise"]
# 4. Which do you keep after training: `model/`, the last checkpoint, or the export? For what use each?

# %% tags=["solution"]
print(
    "model/ to use or share the model (from_pretrained, 16-bit on a GPU); the last checkpoint to train on "
    "(resume, or a later fine-tuning with the optimizer's state); the export for fp32 master weights from "
    "a ZeRO run whose model/ is missing (a run killed before its end) or for the full precision."
)

# %% [markdown]
# ## Summary
# - Every run writes `model/` (safetensors, config, generation config, tokenizer) that `from_pretrained`
#   loads, for every ZeRO stage; under ZeRO-3 the weights are gathered on save.
# - Checkpoints hold all a run needs to continue exactly; `--resume` takes the last complete one, refuses a
#   changed configuration or another number of ranks, and the batch scripts resume by themselves after SLURM's
#   warning signal.
# - `workshop export` turns ZeRO shards into a model directory; `workshop eval` scores what the model writes.
