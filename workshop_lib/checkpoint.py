"""Checkpoints: which one a run resumes from, whether a resume trains the same run, whether a checkpoint is
whole, and their export to a Hugging Face model directory (introduced in `03b_the_fine_tuned_model`;
`run_experiment`, `workshop run --resume` and `workshop export` use it).

A run writes OUTPUT_DIR/checkpoints/checkpoint-N/ (N: optimizer steps) through the HF Trainer's own saving. With
DeepSpeed it holds the engine's format: global_stepN/ with every rank's ZeRO partition of the fp32 master weights
and Adam states, `latest` and zero_to_fp32.py; beside it the schedule, every rank's RNG states, trainer_state.json
(step, epoch: the data position) and the model (model.safetensors, gathered on save under ZeRO-3) with its tokenizer.

A checkpoint is complete when its MANIFEST (workshop_manifest.json, written last by `Manifest` in `on_save`) is there
and every file it lists has the size it had when written, and the same SHA-256 for files of at most
CHECKSUM_MAX_BYTES (a bit flipped inside a larger file goes unseen; a file deleted or cut short never does). Any
other is never loaded: one interrupted while being written (no manifest, no trainer_state.json), or damaged (files
missing or changed, or no manifest though the Trainer finished it). `--resume` moves it aside into
OUTPUT_DIR/damaged-checkpoints/ (never deleted; outside the Trainer's rotation) and continues from the newest
complete one, or refuses when none is; `workshop export` refuses it and names the run's last complete one.

A resume runs on as many ranks as the run started with (`check_same_run` refuses another number): a ZeRO checkpoint
holds one partition of the optimizer states per rank, which DeepSpeed loads on that many ranks only, and the global
batch, the data position and the schedule belong to that world size."""

from __future__ import annotations

import enum
import hashlib
import importlib
import json
import logging
import os
import pickle
import re
import shlex
import shutil
import traceback
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from . import env, rundir
from .config import BASE, REQUIRED, cli_args
from .errors import WorkshopError, read_json_object
from .model import check_no_custom_code
from .units import MiB

CHECKPOINTS = "checkpoints"  # OUTPUT_DIR/checkpoints/checkpoint-N
RUN_CONFIG = "run_config.json"  # the settings a run started with (RunConfig + world_size), for --resume
# Settings a resume may change: where and how often to write, and what happens after training.
MAY_CHANGE = {
    "output_dir",
    "overwrite",
    "resume",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "score_questions",
    "save_model",
    "dataloader_num_workers",
    "allow_cpu",
    "logging_steps",
}
MANIFEST = "workshop_manifest.json"  # in each checkpoint-N/, written last: every file's bytes (and SHA-256)
CHECKSUM_MAX_BYTES = 16 * MiB  # files up to 16 MiB get a SHA-256 (JSON, RNG states, schedule, tokenizer)
# What DeepSpeed 0.19.8 and the Trainer pickle beyond torch's weights_only allowlist, and runs no code
SAFE_GLOBALS = {
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
    "numpy.dtype",
    "numpy.ndarray",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray._reconstruct",
    "numpy.dtypes.UInt32DType",
}


def _sha256(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _name_step(ckpt: Path) -> int | None:
    """N of a directory named checkpoint-N; None for any other name."""
    n = ckpt.name.removeprefix("checkpoint-")
    return int(n) if ckpt.name.startswith("checkpoint-") and n.isdigit() else None


# Bytes per parameter of a checkpoint: fp32 master weights and Adam's two fp32 moments, 4 + 4 + 4 = 12 (the ZeRO
# paper's K = 12: Rajbhandari et al. 2020, section 3.1), and the weights in the training precision (`WEIGHT_BYTES`).
OPTIMIZER_BYTES = 12
WEIGHT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def bytes_per_param(precision: str) -> int:
    """Bytes per parameter one checkpoint of a DeepSpeed ZeRO-3 run holds (the model and Adam's states; the RNG and
    trainer state are a few KiB): `OPTIMIZER_BYTES` (the zero_pp_rank_*_optim_states.pt files) and the model's weights
    in the training precision (model.safetensors): 14 in bf16/fp16, 16 in fp32 (the CPU). At stages 0-2
    mp_rank_00_model_states.pt holds the module's weights too, `WEIGHT_BYTES` more. Raises KeyError for a precision
    other than bf16, fp16 or fp32."""
    return OPTIMIZER_BYTES + WEIGHT_BYTES[precision]


def write_manifest(ckpt: str | os.PathLike) -> Path:
    """Write ckpt/MANIFEST (atomically): every other file under `ckpt`, by path relative to it, with its size
    in bytes and, up to CHECKSUM_MAX_BYTES, its SHA-256. Call once the checkpoint is written whole
    (`Manifest`). Returns the manifest's path."""
    ckpt, files = Path(ckpt), {}
    for f in sorted(ckpt.rglob("*")):
        if f.is_file() and f.name != MANIFEST and not f.name.startswith(f".{MANIFEST}.tmp"):
            size = f.stat().st_size
            files[f.relative_to(ckpt).as_posix()] = {"bytes": size} | (
                {"sha256": _sha256(f)} if size <= CHECKSUM_MAX_BYTES else {}
            )
    rundir.write_json_atomic(ckpt / MANIFEST, {"step": _name_step(ckpt), "files": files})
    return ckpt / MANIFEST


def why_incomplete(ckpt: str | os.PathLike) -> str | None:
    """None when `ckpt` is a complete checkpoint (its MANIFEST there, every file in it of its size and
    checksum); else what is wrong, in a few words naming the first bad file."""
    ckpt = Path(ckpt)
    try:
        manifest = json.loads((ckpt / MANIFEST).read_text())
        files, step = manifest["files"], manifest["step"]
    except FileNotFoundError:
        if _trainer_step(ckpt) is None:
            return "interrupted while being written (no trainer_state.json of its step, no manifest)"
        return f"no {MANIFEST} (written before checkpoints had one, or killed in the instant before it)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"its {MANIFEST} is unreadable ({type(e).__name__}: {e})"
    if step != _name_step(ckpt):
        return f"its {MANIFEST} is of step {step}"
    try:
        for rel, want in files.items():
            f = ckpt / rel
            if not f.is_file():
                return f"{rel} is missing"
            if (size := f.stat().st_size) != want["bytes"]:
                return f"{rel} holds {size:,} bytes, {want['bytes']:,} when written"
            if "sha256" in want and _sha256(f) != want["sha256"]:
                return f"{rel} changed since it was written (another SHA-256)"
    except (OSError, AttributeError, KeyError, TypeError) as e:
        return f"its files cannot be checked against its {MANIFEST} ({type(e).__name__}: {e})"
    named = (ckpt / "latest").read_text().strip() if (ckpt / "latest").is_file() else ""
    if named and (ckpt / named).resolve().parent != ckpt.resolve():  # DeepSpeed loads what it names, unverified
        return f"latest names {named!r}, a folder outside the checkpoint"
    return None


def _enum_member(cls, name):
    """`builtins.getattr` as a checkpoint may use it: a member, by name, of an enum in SAFE_GLOBALS (Python 3.11's
    early releases pickle enum members as getattr(class, name)). Anything else is refused.

    Raises:
        pickle.UnpicklingError: not such a member."""
    if (
        isinstance(cls, type)
        and issubclass(cls, enum.Enum)
        and isinstance(name, str)
        and name in cls.__members__
        and f"{cls.__module__}.{cls.__qualname__}" in SAFE_GLOBALS
    ):
        return cls[name]
    raise pickle.UnpicklingError(f"getattr({cls!r}, {name!r}) is no member of an allowed enum")


@contextmanager
def weights_only_loads():
    """Within the block every torch.load is weights_only=True, by torch's own switch: TORCH_FORCE_WEIGHTS_ONLY_LOAD=1
    (torch >= 2.6 lets it override an explicit weights_only=False, which DeepSpeed 0.19.8 passes in its checkpoint
    engine and zero_to_fp32), with SAFE_GLOBALS allowed (torch.serialization.safe_globals) and
    getattr only as `_enum_member`. A load of a file naming other code raises pickle.UnpicklingError (torch names
    the global) and runs none of it; torch.load itself is never replaced. A TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD of the
    user's is set aside meanwhile.

    Raises:
        WorkshopError: an UnpicklingError left the block (`_refused`: the file and the global)."""
    allowed = [(_enum_member, "builtins.getattr")]
    for name in SAFE_GLOBALS:
        module, _, attr = name.rpartition(".")
        try:
            allowed.append(getattr(importlib.import_module(module), attr))
        except (ImportError, AttributeError):  # numpy's other spelling, a DeepSpeed without the class
            continue
    allowed = [g for g in allowed if g not in torch.serialization.get_safe_globals()]  # in a block: the outer's stay
    saved = {name: os.environ.pop(name, None) for name in SWITCHES}  # the user's, back after the block
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with torch.serialization.safe_globals(allowed):
            yield
    except pickle.UnpicklingError as e:
        raise _refused(e) from e
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def _refused(e: pickle.UnpicklingError) -> WorkshopError:
    """One message for a load `weights_only_loads` refused: the file (torch.load's argument `f`, from the traceback)
    and the global torch names ("GLOBAL posix.system"; `_enum_member`'s refusal is builtins.getattr's)."""
    files = [fr.f_locals.get("f") for fr, _ in traceback.walk_tb(e.__traceback__) if fr.f_code is _TORCH_LOAD]
    found = re.search(r"GLOBAL ([\w.]+)", str(e))
    name = found[1] if found else "builtins.getattr" if "getattr(" in str(e) else str(e).splitlines()[0]
    return WorkshopError(
        f"{files[-1] if files else 'a checkpoint file'} names code that loading it would run ({name}); torch's "
        "weights-only loader refused it, so none of it ran, and nothing was deleted.",
        "the workshop never loads code from a checkpoint: use one written by the workshop's own runs (another "
        "checkpoint of the run, or a copy from its author).",
    )


_TORCH_LOAD = torch.serialization.load.__code__  # the frame whose `f` is the file refused


# torch's weights-only switches, read by torch.load at each call (torch/serialization.py); both set is an error there
SWITCHES = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")


def _trainer_step(ckpt: Path) -> int | None:
    """N when ckpt/trainer_state.json reads as the state of step N of checkpoint-N: the Trainer finished it."""
    try:
        state = json.loads((ckpt / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None
    n = _name_step(ckpt)
    return n if isinstance(state, dict) and state.get("global_step") == n else None


def step_of(ckpt: str | os.PathLike) -> int | None:
    """The optimizer step N of a complete checkpoint-N directory (`why_incomplete`); None for any other."""
    return _name_step(Path(ckpt)) if why_incomplete(ckpt) is None else None


def find_checkpoints(run_dir: str | os.PathLike) -> tuple[list[Path], list[Path]]:
    """(complete checkpoints, oldest first; incomplete ones, oldest first) in run_dir/checkpoints."""
    found = [p for p in (Path(run_dir) / CHECKPOINTS).glob("checkpoint-*") if p.is_dir() and _name_step(p) is not None]
    found.sort(key=_name_step)
    complete = [p for p in found if why_incomplete(p) is None]
    return complete, [p for p in found if p not in complete]


def set_aside(ckpt: str | os.PathLike) -> Path:
    """Move the checkpoint directory `ckpt` to OUTPUT_DIR/damaged-checkpoints/ (checkpoint-N, or
    checkpoint-N.2, .3, ... when that name is taken); never deletes. Returns its new path."""
    ckpt = Path(ckpt)
    aside = ckpt.parent.parent / rundir.DAMAGED
    aside.mkdir(exist_ok=True)
    dest, i = aside / ckpt.name, 1
    while dest.exists():
        i += 1
        dest = aside / f"{ckpt.name}.{i}"
    os.replace(ckpt, dest)
    return dest


def check_resumable(run_dir: str | os.PathLike) -> None:
    """Refuse to resume the run in `run_dir` when it holds checkpoints that were written to the end but none
    complete: a resume would silently start again from step 0. Reads only. A run without checkpoints, or
    whose only ones were interrupted while being written, passes (it starts from step 0).

    Raises:
        WorkshopError: naming each damaged checkpoint and what is wrong with it."""
    complete, incomplete = find_checkpoints(run_dir)
    # damaged: written to the end (a manifest, or the Trainer's state of its step), not interrupted while written
    damaged = [p for p in incomplete if (p / MANIFEST).exists() or _trainer_step(p) is not None]
    if damaged and not complete:
        raise WorkshopError(
            f"{run_dir} holds no complete checkpoint to resume from: "
            + "; ".join(f"{p} is damaged: {why_incomplete(p)}" for p in damaged)
            + ". Nothing was changed.",
            "restore the damaged files from a copy and --resume again, or start the run again "
            "with --overwrite (which deletes it).",
        )


def last_checkpoint(path: str | os.PathLike) -> Path:
    """`path` itself when it is a complete checkpoint, else the last complete one of the run directory `path`
    when no newer checkpoint is incomplete.

    Raises:
        WorkshopError: `path` does not exist; it is a checkpoint that is not complete (`why_incomplete`), or a
            run directory whose newest checkpoint is not (each names the run's last complete checkpoint to
            use instead, if any); it holds no complete checkpoint."""
    path = Path(path)
    if not path.is_dir():
        raise WorkshopError(
            f"{path} does not exist or is not a directory.",
            "give a run directory (runs/...) or one of its checkpoints/checkpoint-N.",
        )
    run_dir, ckpt = (path.resolve().parent.parent, path) if _name_step(path) is not None else (path, None)
    complete, incomplete = find_checkpoints(run_dir)
    if ckpt is None and incomplete and (not complete or _name_step(incomplete[-1]) > _name_step(complete[-1])):
        ckpt = incomplete[-1]
    if ckpt is not None and (why := why_incomplete(ckpt)):
        instead = (
            f"use {complete[-1]}, the run's last complete checkpoint (step {_name_step(complete[-1])})"
            if complete
            else "restore its files from a copy: the run holds no complete checkpoint"
        )
        raise WorkshopError(f"{ckpt} is not a complete checkpoint: {why}. Nothing was written.", instead + ".")
    if ckpt is not None:
        return ckpt
    if not complete:
        raise WorkshopError(
            f"{path} holds no complete checkpoint in {CHECKPOINTS}/.",
            "run with --save-strategy steps or epoch (the default), or give a checkpoint directory.",
        )
    return complete[-1]


class Manifest(TrainerCallback):
    """Writes each checkpoint's MANIFEST once it is written whole: in `on_save`, which the Trainer calls after
    `_save_checkpoint` (transformers 5.2x `Trainer._maybe_log_save_evaluate`). Every rank writes its own ZeRO
    shards and RNG states: all ranks meet at a barrier first, then rank 0 writes."""

    def on_save(self, args, state, control, **kw):
        env.barrier()
        if state.is_world_process_zero:
            write_manifest(Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")


def run_command(asked, output_dir: str | os.PathLike, flag: str) -> str:
    """The `workshop run` command line of the run whose settings were `asked` (a RunConfig as given, before
    `config.resolve`) into `output_dir`, with `flag` ("--resume" or "--overwrite") instead of either:
    what the messages of an interrupted run suggest (`config.cli_args`)."""
    args = cli_args(replace(asked, output_dir=None, overwrite=False, resume=False))
    return shlex.join(["workshop", "run", *args, "--output-dir", str(output_dir), flag])


def kept(out: str | os.PathLike, asked) -> str:
    """What an interrupted run in `out` kept and how to go on, for its message: the complete checkpoints
    (paths, steps) and the `--resume` command line, or that none was kept and the `--overwrite` one."""
    out, complete = Path(out), find_checkpoints(out)[0]
    marked = f"marked unfinished ({out / rundir.MARKER})"
    if not complete:
        return (
            f"kept no checkpoint, only what it logged in {out} (train_log.csv, memory.csv), {marked}. To "
            f"start again: {run_command(asked, out, '--overwrite')}"
        )
    names = ", ".join(f"{p} (step {_name_step(p)})" for p in complete)
    return (
        f"kept {len(complete)} complete checkpoint{'s' * (len(complete) > 1)}: {names}; {marked}. To "
        f"continue from step {_name_step(complete[-1])}: {run_command(asked, out, '--resume')}"
    )


def zero_partitions(ckpt: str | os.PathLike) -> int:
    """ZeRO partitions of the optimizer states in checkpoint-N (`ckpt`): DeepSpeed's
    *zero_pp_rank_R_mp_rank_00_optim_states.pt in the folder its `latest` file names, one per data-parallel rank
    that wrote them (ZeRO 1-3). 0 where the optimizer states are whole: no DeepSpeed (the Trainer's optimizer.pt),
    or ZeRO-0 (inside mp_rank_00_model_states.pt)."""
    ckpt = Path(ckpt)
    tag = (ckpt / "latest").read_text().strip() if (ckpt / "latest").is_file() else ""
    return len(list((ckpt / tag).glob("*zero_pp_rank_*_optim_states.pt"))) if tag else 0


def run_config(out: str | os.PathLike) -> dict | None:
    """The settings the run in `out` started with (its run_config.json), or None where it has none.

    Raises:
        WorkshopError: the file is not a JSON object, or its world_size or gradient_accumulation_steps is no whole
            number >= 1 (cut short, edited by hand); the fix starts the run again."""
    path = Path(out) / RUN_CONFIG
    if not path.is_file():
        return None
    fix = "pass --overwrite to start the run again, or another --output-dir."
    started = read_json_object(path, "is damaged: the settings this run started with cannot be compared", fix)
    for k in ("world_size", "gradient_accumulation_steps"):  # the global batch a resume keeps is their product
        if not (started.get(k) is None or (type(started[k]) is int and started[k] >= 1)):
            raise WorkshopError(f"{path} is damaged: its {k} is {started[k]!r}, not a whole number >= 1.", fix)
    return started


def resume_point(out: Path, rank: int) -> Path | None:
    """The last complete checkpoint of the run in `out`, or None (start from step 0). Rank 0 says which, moves every
    incomplete one (`why_incomplete`) aside into OUTPUT_DIR/damaged-checkpoints, and keeps the interrupted attempt's
    memory logs as memory[.rankN].before-resume-at-step-N.csv."""
    complete, broken = find_checkpoints(out)
    if rank == 0:
        step = step_of(complete[-1]) if complete else 0
        for f in out.glob("memory*.csv"):  # the run's own (memory[.rankN].csv), never a user's memory_notes.csv
            if rundir.run_output(f.name) and ".before-resume-" not in f.name:
                f.rename(f.with_name(f"{f.stem}.before-resume-at-step-{step}.csv"))
        for b in broken:
            print(f"Skipped {b}: {why_incomplete(b)}; moved to {set_aside(b)}, never loaded.")
        print(
            f"Resuming from {complete[-1]} (step {step})."
            if complete
            else f"No complete checkpoint in {out / CHECKPOINTS}: training starts from step 0."
        )
    return complete[-1] if complete else None


def write_run_config(out: str | os.PathLike, config: dict, world_size: int) -> None:
    """Record the settings a run trains with (OUTPUT_DIR/run_config.json), for `check_same_run`."""
    rundir.write_json_atomic(Path(out) / RUN_CONFIG, _with_data(config) | {"world_size": world_size})


def _with_data(config: dict) -> dict:
    """`config` with the SHA-256 of each data file it names (train_file_sha256, eval_file_sha256): a file changed in
    place keeps its path, and a resume on it would train on other questions as if it were one run."""
    digests = {}
    for name in ("train_file", "eval_file"):
        if config.get(name):
            digests[f"{name}_sha256"] = _sha256(config[name])
    return config | digests


def check_same_run(out: str | os.PathLike, config: dict, world_size: int) -> None:
    """Refuse to resume the run in `out` with settings other than those it started with, or on another number of
    ranks: a checkpoint's Adam states (one ZeRO partition per rank), schedule and data position belong to one
    experiment, recipe, global batch and world size. Only `MAY_CHANGE` may differ. Nothing to compare (no
    run_config.json) passes; a recipe setting added to the workshop after the run started compares as its base value
    (`config.BASE`). The data files are compared by content (`_with_data`), where the run recorded it.

    Raises:
        WorkshopError: another world size (first: its own fix), or naming each differing setting with both values."""
    before = run_config(out)
    if before is None:
        return
    if before.get("world_size", 1) != world_size:
        raise WorkshopError(
            f"{out} holds a run on {before.get('world_size', 1)} rank(s), and this resume has {world_size}: its "
            "checkpoints' ZeRO partitions, global batch and data position belong to that number of ranks. Nothing was "
            "changed; --overwrite or another --output-dir starts a new run.",
            f"resume with the same number of GPUs ({before.get('world_size', 1)}), or start a new run",
        )
    now = _with_data(config) | {"world_size": world_size}
    before = {k: BASE[k] for k in now if k not in before and k in BASE and BASE[k] is not REQUIRED} | before
    before = {k: now[k] for k in now if k.endswith("_sha256") and k not in before} | before  # not recorded then
    diff = [
        f"{k} {before.get(k)!r} then, {now.get(k)!r} now"
        for k in sorted(now)  # a setting the workshop no longer has (in an older run_config.json) is not compared
        if k not in MAY_CHANGE and before.get(k) != now.get(k)
    ]
    if diff:
        raise WorkshopError(
            f"{out} holds a run started with other settings ({'; '.join(diff)}); a resume must "
            "continue the same run. Nothing was changed.",
            f"resume with the settings and data files in {Path(out) / RUN_CONFIG} (a file changed since: restore it), "
            "or pass another --output-dir, or --overwrite to start again.",
        )


def export(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write a Hugging Face model directory `out` (fp32 model.safetensors, configs, tokenizer) from a ZeRO checkpoint
    of any stage and world size, through DeepSpeed's own consolidation (`deepspeed.utils.zero_to_fp32.
    get_fp32_state_dict_from_zero_checkpoint`), then `save_pretrained`, which stores tied weights (Qwen3's
    embedding and LM head) once: DeepSpeed's own safetensors writer refuses them. Needs host memory for the fp32
    model twice (8 bytes/param). Atomic (`rundir.atomic_path`): `out` is whole or absent. Returns `out`.

    Args:
        source: a checkpoint-N directory, or a run directory (its last complete checkpoint).
        out: a directory that does not exist yet, or is empty.

    Raises:
        WorkshopError: no complete checkpoint at `source` (`last_checkpoint`: a damaged one is refused,
            naming the last complete one); a checkpoint without ZeRO partitions (baseline,
            ZeRO-0: its model.safetensors is the model already); a config.json that needs the model's own code
            (`model.check_no_custom_code`); a link in the checkpoint or at `out`; `out` exists and is not empty, or
            cannot be written."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint  # here: DeepSpeed is optional

    out = Path(out)
    rundir.refuse_links(out, (), "OUT")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise WorkshopError(
            f"{out} exists and is not an empty directory; nothing was written.", "give a new directory to export into."
        )
    rundir.check_writable(out, "OUT")
    ckpt = last_checkpoint(source)
    if links := [str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_symlink()]:
        raise WorkshopError(
            f"{ckpt} holds symbolic links ({', '.join(links)}); export reads no file through a link, and nothing "
            "was written.",
            "replace each link by a copy of the file it points to, or export another checkpoint.",
        )
    if not zero_partitions(ckpt):
        raise WorkshopError(
            f"{ckpt} holds no ZeRO partitions (a run without DeepSpeed, or ZeRO-0).",
            f"its model.safetensors is the whole model: load {ckpt} with from_pretrained.",
        )
    check_no_custom_code(
        read_json_object(
            ckpt / "config.json",
            "is damaged: the checkpoint's architecture cannot be read",
            f"export another checkpoint of the run, or restore {ckpt}.",
        ),
        str(ckpt),
    )
    net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ckpt), dtype=torch.float32)
    with (
        env.quiet_stderr(re.compile(r"^\s*$|(Loading checkpoint shards|Gathering sharded weights): ")),
        weights_only_loads(),
    ):
        net.load_state_dict(get_fp32_state_dict_from_zero_checkpoint(str(ckpt)), strict=True)  # without its 2 bars
    net.tie_weights()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with rundir.atomic_path(out) as tmp:
            net.save_pretrained(tmp)
            for f in ckpt.iterdir():  # what the Trainer saved beside the weights: config, generation config, tokenizer
                if (
                    f.is_file()
                    and f.suffix in (".json", ".txt", ".model", ".jinja")
                    and f.name not in ("trainer_state.json", MANIFEST)
                    and not f.name.endswith(".index.json")
                ):
                    shutil.copy2(f, tmp / f.name)
    except Exception as e:  # safetensors' writer says "No space left on device" in an error of its own, no OSError
        if "No space left on device" not in str(e):
            raise
        raise WorkshopError(
            f"{out} could not be written: No space left on device; nothing was written.",
            "free space on that disk (`df -h` shows it; the model takes 4 bytes/param) or export elsewhere.",
        ) from e
    return out


def expected_resume_notes(record) -> bool:
    """A logging filter for transformers.trainer_utils: False (dropped) for two warnings of a resume that are
    expected here: arguments that differ from the checkpoint's where every one is a setting a resume may change
    (`MAY_CHANGE`, e.g. save_steps; the workshop refused any other change before the Trainer
    started), and "mtime may not be reliable", after which the Trainer orders checkpoints by step number,
    as the workshop does. Any other difference still shows."""
    message = record.getMessage()
    if message.startswith("mtime may not be reliable"):
        return False
    if "do not match the ones in the `trainer_state.json`" in message:
        names = re.findall(r"\n\t(\w+):", message)
        return not (names and set(names) <= MAY_CHANGE)
    return True


def quiet_resume_notes() -> None:
    """Install `expected_resume_notes` on transformers.trainer_utils' logger, once per process."""
    log = logging.getLogger("transformers.trainer_utils")
    if expected_resume_notes not in log.filters:
        log.addFilter(expected_resume_notes)
