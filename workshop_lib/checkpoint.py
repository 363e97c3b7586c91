"""Checkpoints: which one a run resumes from, whether a resume trains the same run, and their export to a
Hugging Face model directory (introduced in `03b_the_fine_tuned_model`; `run_experiment`, `workshop run
--resume` and `workshop export` use it).

A run writes OUTPUT_DIR/checkpoints/checkpoint-N/ (N: optimizer steps) through the HF Trainer's own saving
(`save_strategy`, `save_steps`, `save_total_limit`). With DeepSpeed it holds the engine's format: global_stepN/
with every rank's ZeRO partition of the fp32 master weights and Adam states (zero_pp_rank_R_mp_rank_00_optim_states.pt)
and the module states, `latest` and DeepSpeed's zero_to_fp32.py; beside it the learning-rate schedule, every
rank's RNG states, trainer_state.json (step, epoch, log history: the data position) and the model itself
(model.safetensors, under ZeRO-3 gathered on save), its config and tokenizer.

Complete or not: the Trainer (transformers 5.2x, `Trainer._save_checkpoint`) writes trainer_state.json last,
after the model, the optimizer (DeepSpeed's `save_checkpoint` ends with a barrier: every rank's shards are on
disk), the schedule and the RNG states, and deletes older checkpoints (save_total_limit) only after it. A
checkpoint whose trainer_state.json does not read as the state of its own step was interrupted while being
written: it is never loaded.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .errors import WorkshopError, read_json_object

CHECKPOINTS = "checkpoints"  # OUTPUT_DIR/checkpoints/checkpoint-N
RUN_CONFIG = "run_config.json"  # the settings a run started with (RunConfig + world_size), for --resume
# Settings a resume may change: where and how often to write, and what happens after training.
MAY_CHANGE = {"output_dir", "overwrite", "resume", "save_strategy", "save_steps", "save_total_limit",
              "score_questions", "save_model", "dataloader_num_workers", "nvme_path", "allow_cpu"}


def step_of(ckpt: str | os.PathLike) -> int | None:
    """The optimizer step N of a complete checkpoint-N directory; None for one interrupted while written."""
    ckpt = Path(ckpt)
    try:
        n = int(ckpt.name.rsplit("-", 1)[1])
        state = json.loads((ckpt / "trainer_state.json").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return n if state.get("global_step") == n else None


def find_checkpoints(run_dir: str | os.PathLike) -> tuple[list[Path], list[Path]]:
    """(complete checkpoints, oldest first; incomplete ones) in run_dir/checkpoints."""
    found = [p for p in (Path(run_dir) / CHECKPOINTS).glob("checkpoint-*") if p.is_dir() and p.name[11:].isdigit()]
    found.sort(key=lambda p: int(p.name[11:]))
    complete = [p for p in found if step_of(p) is not None]
    return complete, [p for p in found if p not in complete]


def last_checkpoint(path: str | os.PathLike) -> Path:
    """`path` itself when it is a complete checkpoint, else the last complete one of the run directory `path`.

    Raises:
        WorkshopError: `path` does not exist, is an incomplete checkpoint, or holds no complete checkpoint.
    """
    path = Path(path)
    if not path.is_dir():
        raise WorkshopError(f"{path} does not exist or is not a directory.",
                            "give a run directory (runs/...) or one of its checkpoints/checkpoint-N.")
    if path.name.startswith("checkpoint-"):
        if step_of(path) is None:
            raise WorkshopError(f"{path} is incomplete (no readable trainer_state.json of its step): it was "
                                "interrupted while being written.", "use an earlier checkpoint of the run.")
        return path
    complete, _ = find_checkpoints(path)
    if not complete:
        raise WorkshopError(f"{path} holds no complete checkpoint in {CHECKPOINTS}/.",
                            "run with --save-strategy steps or epoch (the default), or give a checkpoint directory.")
    return complete[-1]


def write_run_config(out: str | os.PathLike, config: dict, world_size: int) -> None:
    """Record the settings a run trains with (OUTPUT_DIR/run_config.json), for `check_same_run`."""
    from .rundir import write_json_atomic

    write_json_atomic(Path(out) / RUN_CONFIG, config | {"world_size": world_size})


def check_same_run(out: str | os.PathLike, config: dict, world_size: int) -> None:
    """Refuse to resume the run in `out` with settings other than those it started with: a checkpoint's
    Adam states, schedule and data position belong to one experiment, recipe, batch arithmetic and world
    size. Only `MAY_CHANGE` may differ. Nothing to compare (no run_config.json) passes.

    Raises:
        WorkshopError: naming each differing setting with both values.
    """
    path = Path(out) / RUN_CONFIG
    if not path.is_file():
        return
    before = read_json_object(path, "is damaged: the settings this run started with cannot be compared",
                              "pass --overwrite to start the run again, or another --output-dir.")
    now = config | {"world_size": world_size}
    diff = [f"{k} {before.get(k)!r} then, {now.get(k)!r} now" for k in sorted(set(before) | set(now))
            if k not in MAY_CHANGE and before.get(k) != now.get(k)]
    if diff:
        raise WorkshopError(f"{out} holds a run started with other settings ({'; '.join(diff)}); a resume must "
                            "continue the same run. Nothing was changed.",
                            f"resume with the settings in {path}, or pass another --output-dir, or --overwrite "
                            "to start again.")


def export(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write a Hugging Face model directory `out` (model.safetensors in fp32, config.json,
    generation_config.json, tokenizer) from a ZeRO checkpoint, through DeepSpeed's own consolidation
    (`deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint`, what the checkpoint's
    zero_to_fp32.py runs): every rank's partition of the fp32 master weights merged, for ZeRO stage 1, 2 or 3
    and any world size. The weights are loaded into the checkpoint's architecture and written by
    `save_pretrained`, which stores tied weights (Qwen3's embedding and LM head) once: DeepSpeed's own
    safetensors writer refuses them. Needs host memory for the fp32 model twice (8 bytes/param). Written
    to a temporary directory and renamed, so `out` is whole or absent. Returns `out`.

    Args:
        source: a checkpoint-N directory, or a run directory (its last complete checkpoint).
        out: a directory that does not exist yet, or is empty.

    Raises:
        WorkshopError: no complete checkpoint at `source`; a checkpoint without ZeRO partitions (baseline,
            ZeRO-0: its model.safetensors is the model already); `out` exists and is not empty.
    """
    import torch
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from transformers import AutoConfig, AutoModelForCausalLM

    ckpt, out = last_checkpoint(source), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise WorkshopError(f"{out} exists and is not an empty directory; nothing was written.",
                            "give a new directory to export into.")
    tag = (ckpt / "latest").read_text().strip() if (ckpt / "latest").is_file() else ""
    if not tag or not any((ckpt / tag).glob("*optim_states.pt")):
        raise WorkshopError(f"{ckpt} holds no ZeRO partitions (a run without DeepSpeed, or ZeRO-0).",
                            f"its model.safetensors is the whole model: load {ckpt} with from_pretrained.")
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ckpt), dtype=torch.float32)
    net.load_state_dict(get_fp32_state_dict_from_zero_checkpoint(str(ckpt)), strict=True)
    net.tie_weights()
    net.save_pretrained(tmp)
    for f in ckpt.iterdir():  # what the Trainer saved beside the weights: config, generation config, tokenizer
        if (f.is_file() and f.suffix in (".json", ".txt", ".model", ".jinja")
                and f.name != "trainer_state.json" and not f.name.endswith(".index.json")):
            shutil.copy2(f, tmp / f.name)
    if out.exists():
        out.rmdir()
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
    return out
