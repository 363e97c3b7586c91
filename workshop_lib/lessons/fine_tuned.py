"""Notebook 03b's answers, computed from its runs: the checkpoint's files, the uninterrupted ZeRO-3 + offload
run and the run killed and resumed (results.json dicts)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

MiB = 2**20
# what each file of a Trainer + DeepSpeed checkpoint holds, by a part of its name
HOLDS = {"optim_states": "the optimizer's partition: fp32 master weights and Adam's two moments",
         "model_states": "the module's states and DeepSpeed's bookkeeping (under ZeRO-3 no weights)",
         "model.safetensors": "the model's own copy, in the training precision",
         "optimizer.pt": "the optimizer's state"}


def holds(file: str) -> str:
    """What a checkpoint file holds, from its name ("a file the table above does not explain" if unknown)."""
    return next((v for k, v in HOLDS.items() if k in file), "a file the table above does not explain")


def checkpoint_files(ckpt: str | Path) -> pd.DataFrame:
    """Every file of a checkpoint directory: columns file (path relative to `ckpt`) and MiB, in path order."""
    ckpt = Path(ckpt)
    return pd.DataFrame([(str(f.relative_to(ckpt)), f.stat().st_size / MiB) for f in sorted(ckpt.rglob("*"))
                         if f.is_file()], columns=["file", "MiB"])


def answers(files: pd.DataFrame, num_params: int, resume_step: int, resumed: dict, uninterrupted: dict) -> list[str]:
    """Answers to 03b's exercises 1 and 2: `files` (columns file, MiB: the last checkpoint's files), the
    checkpoint `resume_step` the killed run resumed from, and the resumed and uninterrupted runs' results."""
    total = files["MiB"].sum()
    big = files.sort_values("MiB", ascending=False).iloc[0]
    out = [f"1. {total:,.1f} MiB for {num_params:,} parameters: {total * MiB / num_params:.1f} bytes per parameter. "
           f"The largest file is {big.file} ({big.MiB * MiB / num_params:.1f} bytes per parameter): {holds(big.file)}."]
    steps = resumed["global_steps"]
    redone = steps - resume_step
    a, b = resumed["eval_loss"][-1], uninterrupted["eval_loss"][-1]
    agree = abs(a - b) <= 1e-3 * abs(b)
    out.append(f"2. From step {resume_step} of {steps}: the resumed run trained the {redone} step(s) after that "
               "checkpoint, not the whole run; with a checkpoint every step, the kill cost at most the step in "
               f"progress. Its last eval loss, {a:.4f}, " + (
                   f"is the uninterrupted run's ({b:.4f}): resuming restored the weights, the optimizer, the "
                   "schedule and the data order." if agree else
                   f"differs from the uninterrupted run's {b:.4f}: something was not restored as saved (the data "
                   "order, the RNG states or the optimizer's partitions); compare train_log.csv step by step."))
    return out
