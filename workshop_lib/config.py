"""Every setting of a run, declared once: experiments, recipes and `RunConfig` (introduced in `01_baseline`).

- `Experiment` (from `ds_config`, with `EXPERIMENTS`): what DeepSpeed (or FSDP2) does in a run.
- `RunConfig`: one run's settings, each declared once with its help text and unit. `workshop run` is generated
  from it (`transformers.HfArgumentParser`, as in the HF examples), notebooks build it directly, and
  results.json stores it resolved (every field filled in) under "config".
- `RECIPES`: named overlays of RunConfig's recipe settings (the fields declared with `_recipe_opt`, each with
  its `base` value): model, precision, attention, padding, batching, sizes. A field left None takes the
  recipe's value (`recipe_settings`). `TINY` is --tiny's overlay; `check_overlay` checks any overlay (a
  notebook's, the benchmark's) against RunConfig's fields and types.

A new experiment is one record in `ds_config.EXPERIMENTS`, a new recipe one entry in `RECIPES`, a new recipe setting one
`_recipe_opt` field of `RunConfig`; no code branches on a name.
This module imports neither torch nor transformers at import time, so `workshop --help` stays fast."""

from __future__ import annotations

import copy
import functools
import math
import os
import re
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

from . import rundir, variables
from .ds_config import EXPERIMENTS, Experiment, Settings, apply_overrides, build_ds_config, experiment_named
from .errors import WorkshopError

# A recipe is a named overlay of RunConfig's recipe settings (the fields declared with `_recipe_opt`): what it
# leaves out takes the field's `base` value. Checked against RunConfig's fields and types at import (`check_overlay`).
RECIPES: dict[str, dict] = {
    # The original workshop exactly: BLOOM-560m, prompts padded to 512 tokens, fp16, loss on every token.
    "classic": dict(
        model="bigscience/bloom-560m",
        precision="fp16",
        attn_implementation="default",
        padding="max_length",
        batching="random",
        loss_on="all",
    ),
    # Same data and optimizer, sized for a busy GPU: micro-batches of up to 32,768 tokens of similar-length
    # questions (no fixed padding, no attention mask), one per optimizer step; the LM head only where the
    # loss has targets (the answers); each transformer block compiled (GPU only); DeepSpeed's own gradient
    # bucket size instead of transformers' hidden_size²; bf16 without DeepSpeed's per-tensor overflow check
    # (bf16 has fp32's range: no loss scale to adjust); two data loader workers collating the next micro-batches
    # while the GPU trains; all the questions. Each lever is an A/B row of lab/bench.py (lab/findings/h100).
    "default": dict(
        model="Qwen/Qwen3-0.6B",
        precision="bf16",
        attn_implementation="flash_attention_2",
        padding="longest",
        batching="token_budget",
        loss_on="answer",
        logits_on="labelled",
        torch_compile=True,
        drop_attention_mask=True,
        max_tokens_per_micro_batch=32768,
        gradient_accumulation_steps=1,
        reduce_bucket_size=500_000_000,
        check_grad_overflow=False,
        dataloader_num_workers=2,
        num_train_samples=None,
    ),
}
# --tiny: the same recipe on fewer questions, so a CPU finishes an experiment in seconds: micro-batches of
# 6,144 tokens (~20 of the tiny tokenizer's ~280-token questions, some 4 steps an epoch); a larger learning
# rate, since a 0.35M-parameter random model barely moves at 5e-5 in a few steps; collation in the training loop
# (data loader workers take the cores a CPU trains on: lab/findings/h100/bench-collation-gc-loss).
TINY = {
    "num_train_samples": 64,
    "num_eval_samples": 16,
    "epochs": 2,
    "learning_rate": 1e-3,
    "max_tokens_per_micro_batch": 6144,
    "dataloader_num_workers": 0,
}
REQUIRED = object()  # the `base` of a recipe setting every recipe must give
BASE: dict = {}  # recipe setting -> its value where a recipe leaves it out (REQUIRED: none); `_recipe_opt` fills it


def _opt(help: str, **kw):
    return field(default=None, metadata={"help": help, **kw})


def _recipe_opt(name: str, base, help: str, **kw):
    """A recipe setting: a field left None on the command line or in a notebook, which `resolve` fills from
    the recipe (`RECIPES`), else from `base`; its help shows the recipes' values and --tiny's."""
    BASE[name] = base
    value = {r: RECIPES[r].get(name, base) for r in RECIPES}
    others = [f"; recipe {r}: {v}" for r, v in value.items() if v != value["default"]]
    tiny = [f"; --tiny: {TINY[name]}"] if name in TINY else []
    return _opt(f"{help} (default: {value['default']}{''.join(others + tiny)})", **kw)


@dataclass
class RunConfig:
    """One run's settings. Fields left None take the recipe's value (`RECIPES`), or `TINY`'s with --tiny;
    `resolve` fills them in and validates everything."""

    experiment: str = field(
        metadata={"help": "one of: " + ", ".join(EXPERIMENTS) + " (or first, without --experiment)"}
    )
    recipe: str = field(default="default", metadata={"help": "one of: " + ", ".join(RECIPES)})
    tiny: bool = field(
        default=False,
        metadata={"help": "a ~0.35M-parameter model of the same family, 64 train / 16 eval questions (CPU-friendly)"},
    )
    model: str | None = _recipe_opt("model", REQUIRED, "hub name or local directory")
    random_weights: bool = field(
        default=False,
        metadata={"help": "the published architecture with random weights (no download; for memory and speed)"},
    )
    train_file: str | None = _opt("SQuAD v1.1-format JSON to train on (default: SQuAD train)")
    eval_file: str | None = _opt("SQuAD v1.1-format JSON to evaluate on (default: SQuAD dev)")
    num_train_samples: int | None = _recipe_opt(
        "num_train_samples", 500, "questions to train on, the file's first N (None: all)"
    )
    num_eval_samples: int | None = _recipe_opt("num_eval_samples", 50, "questions to evaluate on")
    epochs: int | None = _recipe_opt("epochs", 3, "passes over the training questions")
    max_steps: int | None = _opt("stop after N optimizer steps (overrides epochs)")
    train_micro_batch_size_per_gpu: int | None = _recipe_opt(
        "train_micro_batch_size_per_gpu", 4, "sequences per GPU per forward pass", aliases=["--micro-batch-size"]
    )
    gradient_accumulation_steps: int | None = _recipe_opt(
        "gradient_accumulation_steps", 4, "forward passes per optimizer step"
    )
    learning_rate: float | None = _recipe_opt("learning_rate", 5e-5, "peak learning rate, linear decay to 0")
    weight_decay: float | None = _recipe_opt("weight_decay", 0.01, "AdamW weight decay")
    max_length: int | None = _recipe_opt(
        "max_length", 512, "tokens per sequence at most; longer contexts are cut around the answer"
    )
    loss_on: Literal["answer", "all"] | None = _recipe_opt(
        "loss_on", REQUIRED, "answer: loss on the answer tokens; all: on every token"
    )
    precision: Literal["bf16", "fp16", "fp32"] | None = _recipe_opt(
        "precision",
        REQUIRED,
        "16-bit type on a GPU (bf16 falls back to fp16 where unsupported); the CPU trains in fp32",
    )
    attn_implementation: Literal["default", "sdpa", "eager", "flash_attention_2"] | None = _recipe_opt(
        "attn_implementation",
        REQUIRED,
        "attention kernel; flash_attention_2 where installed (GPU, 16-bit), else the model's",
    )
    padding: Literal["longest", "max_length"] | None = _recipe_opt(
        "padding", REQUIRED, "pad per batch, or every sequence to max_length"
    )
    batching: Literal["random", "group_by_length", "token_budget"] | None = _recipe_opt(
        "batching",
        REQUIRED,
        "random; group_by_length: similar lengths together; token_budget: micro-batches of similar "
        "lengths sized by --max-tokens-per-micro-batch",
    )
    max_tokens_per_micro_batch: int | None = _recipe_opt(
        "max_tokens_per_micro_batch", 16384, "padded tokens per micro-batch with --batching token_budget"
    )
    logits_on: Literal["all", "labelled"] | None = _recipe_opt(
        "logits_on",
        "all",
        "all: the LM head projects every position onto the vocabulary, as transformers does; "
        "labelled: only the positions the loss has a target for (exact; with loss on the answers, a few of them)",
    )
    torch_compile: bool | None = _recipe_opt(
        "torch_compile",
        False,
        "true: torch.compile each transformer block (fuses its small kernels; GPU only, the first steps compile)",
    )
    dataloader_num_workers: int | None = _recipe_opt(
        "dataloader_num_workers", 0, "processes collating micro-batches while the GPU trains (0: in the loop)"
    )
    reduce_bucket_size: int | None = _recipe_opt(
        "reduce_bucket_size",
        0,
        "gradient elements DeepSpeed reduces at once (ZeRO 1-3), at most the model's "
        "parameters; 0: transformers' auto, hidden_size²",
    )
    check_grad_overflow: bool | None = _recipe_opt(
        "check_grad_overflow",
        True,
        "bf16 under DeepSpeed: true checks every gradient tensor for inf/NaN before "
        "each optimizer step and skips the step if one is found (DeepSpeed's default; fp16 always checks)",
    )
    max_grad_norm: float | None = _recipe_opt(
        "max_grad_norm",
        1.0,
        "clip the global gradient norm to this (the Trainer's max_grad_norm, DeepSpeed's "
        "gradient_clipping); 0: no clipping, and no gradient norm under ZeRO-2 without offload "
        "(zero_optimization.compute_grad_norm false: no per-tensor norms each step)",
    )
    logging_steps: int | None = _recipe_opt(
        "logging_steps",
        1,
        "optimizer steps between train_log.csv's rows (the Trainer's logging_steps; each row's loss the mean "
        "since the last row)",
    )
    torch_compile_zero3: bool | None = _recipe_opt(
        "torch_compile_zero3",
        False,
        "true: torch_compile under ZeRO-3 too (off by default: its parameter hooks "
        "split each compiled block; an A/B row of the lab's benchmark (lab/bench.py))",
    )
    drop_attention_mask: bool | None = _recipe_opt(
        "drop_attention_mask",
        False,
        "true: no attention mask for right-padded batches (exact: causal attention never "
        "sees the pads after a sequence, and their labels are -100); lets SDPA use its flash kernel",
    )
    activation_checkpointing: bool | None = _recipe_opt(
        "activation_checkpointing", False, "true: recompute activations in the backward pass (less memory, slower)"
    )
    ds_config: list[str] | None = _opt(
        "KEY=VALUE: set one key of the DeepSpeed config (dotted, e.g. zero_optimization.overlap_comm=false; the "
        "value is JSON: a number, true, false, a string); repeatable. Checked against DeepSpeed's own config "
        "classes before anything is written; written to ds_config.json (ds_config.explain says what each key does)",
        metavar="KEY=VALUE",
        action="extend",
    )
    output_dir: str | None = _opt("where to write (default runs/<experiment>[-tiny]-<date-time>)")
    overwrite: bool = field(
        default=False, metadata={"help": "remove the run (finished or killed) in --output-dir and start again"}
    )
    resume: bool = field(
        default=False,
        metadata={
            "help": "continue the unfinished run in --output-dir from its last complete checkpoint (start fresh "
            "when there is none), on the same number of ranks; refused when a setting or the number of ranks differs"
        },
    )
    save_strategy: Literal["no", "steps", "epoch"] = field(
        default="epoch",
        metadata={"help": "when to write a checkpoint into OUTPUT_DIR/checkpoints (HF Trainer's save_strategy)"},
    )
    save_steps: int = field(
        default=100, metadata={"help": "optimizer steps between checkpoints, with --save-strategy steps"}
    )
    save_total_limit: int = field(
        default=2,
        metadata={
            "help": "checkpoints kept, the newest (each holds fp32 weights, Adam's moments and the model: 14-16 bytes/param)"
        },
    )
    save_model: bool = field(
        default=True,
        metadata={
            "help": "write the fine-tuned model to OUTPUT_DIR/model at the end (16-bit weights, 2 bytes/param); false for "
            "runs that only measure"
        },
    )
    score_questions: int = field(
        default=0,
        metadata={
            "help": "SQuAD dev questions to answer by generation before and after training; results.json gets "
            "em and f1 (0: none)"
        },
    )
    allow_cpu: bool = field(default=False, metadata={"help": "run a full-size model without a GPU (slow)"})
    seed: int = field(default=42, metadata={"help": "random seed for the model's initialisation and the data order"})
    comms_logger: bool = field(
        default=False,
        metadata={
            "help": "DeepSpeed's communication logger on: every collective inside the optimizer steps is counted, sized "
            "and timed, and OUTPUT_DIR/comms.json gets the totals per collective (ZeRO experiments; it synchronizes "
            "after each collective, so the run's speed is not the real one)"
        },
    )

    def ds_settings(self, num_params: int | None = None, **known) -> Settings:
        """What this run's DeepSpeed config needs of its settings (`ds_config.Settings`; a resolved config), with
        `known` on top: the values known once the data and the model are loaded (train_micro_batch_size_per_gpu,
        world_size); reduce_bucket_size capped at `num_params`, the model's size."""
        bucket = min(self.reduce_bucket_size, num_params or self.reduce_bucket_size) or "auto"
        return replace(
            Settings(
                precision=self.precision,
                gradient_accumulation_steps=self.gradient_accumulation_steps,
                reduce_bucket_size=bucket,
                check_grad_overflow=self.check_grad_overflow,
                max_grad_norm=self.max_grad_norm,
                comms_logger=self.comms_logger,
            ),
            **known,
        )


RECIPE_FIELDS = list(BASE)
PATH_FIELDS = ("model", "train_file", "eval_file", "output_dir")  # `~` expanded by `resolve`


def recipe_settings(recipe: str = "default", tiny: bool = False) -> dict:
    """Every recipe setting of `recipe`, --tiny's on top with `tiny`: {field name: value}, the recipe's overlay
    (`RECIPES`) over each field's `base`. What `resolve` fills a field left None with.

    Raises:
        WorkshopError: an unknown recipe."""
    if recipe not in RECIPES:
        raise WorkshopError(f"Unknown recipe {recipe!r}.", f"use one of: {', '.join(RECIPES)}.")
    return BASE | RECIPES[recipe] | (TINY if tiny else {})


def check_overlay(settings: dict, where: str, recipe_only: bool = False) -> dict:
    """`settings` ({RunConfig field: value}: a recipe, --tiny's values, a notebook's or the benchmark's settings)
    checked against RunConfig's fields and their types (a `Literal` field against its choices); returned unchanged.

    Raises:
        WorkshopError: a key that is not a field of RunConfig (not a recipe setting, with `recipe_only`), or
            a value of another type or outside the field's choices; `where` names the overlay."""
    allowed = RECIPE_FIELDS if recipe_only else [f.name for f in fields(RunConfig)]
    for name, value in settings.items():
        if name not in allowed:
            raise WorkshopError(
                f"{where}: {name!r} is not a {'recipe setting' if recipe_only else 'RunConfig field'}.",
                f"use one of: {', '.join(allowed)}.",
            )
        _check_type(name, value, where)
    return settings


@functools.cache
def field_types(cls) -> dict:
    """{field name: type} of dataclass `cls` (RunConfig, EvalConfig, BenchConfig), its annotations evaluated once
    (`typing.get_type_hints`), for `resolve`'s check of every field and `check_counts`."""
    return typing.get_type_hints(cls)


def _check_type(name: str, value, where: str) -> None:
    """Raise WorkshopError unless `value` is of RunConfig field `name`'s type as pydantic validates it, strictly: no
    "512" for 512 nor 1 for True; None where the field allows it; a `Literal`'s choices; an int for a float; one
    string or a tuple for a list (--ds-config given from Python)."""
    import pydantic

    try:
        pydantic.TypeAdapter(field_types(RunConfig)[name]).validate_python(
            [value] if isinstance(value, str) and name == "ds_config" else value, strict=name != "ds_config"
        )
    except pydantic.ValidationError as e:
        raise WorkshopError(
            f"{where}: {name} {e.errors()[0]['msg'].replace('Input should be', 'must be')}, got {value!r}.",
            f"set {name} (--{name.replace('_', '-')}) as `workshop run --help` describes it.",
        ) from None


for _name, _recipe in RECIPES.items():  # a typo in a recipe fails here, at import, naming it
    check_overlay(_recipe, f"recipe {_name!r}", recipe_only=True)
    missing = [name for name, base in BASE.items() if base is REQUIRED and name not in _recipe]
    if missing:
        raise WorkshopError(f"recipe {_name!r} does not set {', '.join(missing)}.", "give every recipe these settings.")
check_overlay(TINY, "TINY", recipe_only=True)


def resolve(cfg: RunConfig) -> RunConfig:
    """A copy of `cfg` with every recipe field filled in, the output directory chosen, and every field
    validated. Touches nothing: paths are only looked at (the output directory's writability is probed
    with an anonymous temporary file, which leaves no trace).

    Raises:
        WorkshopError: the first bad field, named, with the fix: an unknown experiment or recipe, a
            non-positive size or count, max_steps < 1, a data file that is missing or a directory, an
            output path that is a file or not writable."""
    experiment_named(cfg.experiment)  # a known one
    rec = recipe_settings(cfg.recipe, cfg.tiny)
    cfg = replace(cfg, **{k: rec[k] for k in RECIPE_FIELDS if getattr(cfg, k) is None})
    for f in fields(RunConfig):
        _check_type(f.name, getattr(cfg, f.name), "RunConfig")
    # `~` read here, once, for every path: the Trainer expands it in its own output_dir, and a `~` left to the shell
    # (`--output-dir=~/x`) or given from Python would otherwise split one run over ./~/x and $HOME/x
    cfg = replace(cfg, **{k: os.path.expanduser(v) for k in PATH_FIELDS if isinstance(v := getattr(cfg, k), str)})
    check_counts(
        cfg,
        (
            "num_train_samples",
            "num_eval_samples",
            "epochs",
            "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps",
            "max_length",
            "max_tokens_per_micro_batch",
        ),
    )
    for name, least, fix in (
        ("reduce_bucket_size", 0, "pass --reduce-bucket-size 500000000 (DeepSpeed's default) or 0 (auto)."),
        ("logging_steps", 1, "give --logging-steps 1 (a row per optimizer step) or more."),
        ("max_grad_norm", 0, "give --max-grad-norm 1.0 (the default) or 0 (no clipping)."),
        ("dataloader_num_workers", 0, "pass --dataloader-num-workers 0 (collate in the training loop) or a few."),
        ("save_steps", 1, "pass --save-steps N with N >= 1 (or --save-strategy no)."),
        ("save_total_limit", 1, "pass --save-total-limit N with N >= 1 (or --save-strategy no)."),
        ("score_questions", 0, "pass --score-questions 0 (no scoring) or a number of dev questions."),
        ("max_length", 32, "pass --max-length 32 or more, room for a question and its answer (recipes: 512)."),
    ):
        if getattr(cfg, name) < least:
            raise WorkshopError(f"{name} must be {least} or more, got {getattr(cfg, name)}.", fix)
    if cfg.score_questions and not cfg.save_model:
        raise WorkshopError(
            "--score-questions answers with the saved model, and --save-model is false.",
            "pass --save-model true, or --score-questions 0.",
        )
    if cfg.resume and cfg.overwrite:
        raise WorkshopError(
            "--resume continues the run in --output-dir and --overwrite discards it; choose one.",
            "drop --overwrite to continue the run, or --resume to start again.",
        )
    if cfg.max_steps is not None and cfg.max_steps < 1:
        raise WorkshopError(
            f"max_steps must be at least 1, got {cfg.max_steps}.",
            "leave --max-steps out to train for --epochs, or pass a number >= 1.",
        )
    if not (
        math.isfinite(cfg.learning_rate)
        and cfg.learning_rate > 0
        and math.isfinite(cfg.weight_decay)
        and cfg.weight_decay >= 0
    ):  # NaN or inf would turn every weight into NaN
        raise WorkshopError(
            f"learning_rate and weight_decay must be finite numbers, the first > 0 and the second "
            f">= 0, got {cfg.learning_rate} and {cfg.weight_decay}.",
            "pass --learning-rate 5e-5 --weight-decay 0.01, the recipes' values.",
        )
    if not 0 <= cfg.seed < 2**32:  # numpy's and DeepSpeed's seeds are unsigned 32-bit
        raise WorkshopError(
            f"seed must be between 0 and 4,294,967,295 (2^32 - 1), got {cfg.seed}.",
            "pass --seed 42 (the default) or another number in that range.",
        )
    exp = EXPERIMENTS[cfg.experiment]
    if cfg.comms_logger and not (exp.deepspeed or exp.fsdp):
        raise WorkshopError(
            f"--comms-logger logs the collectives of ZeRO and FSDP2 runs, and {cfg.experiment} shards nothing.",
            "use a ZeRO experiment (stage0-stage3) or fsdp2, or leave --comms-logger out.",
        )
    if cfg.ds_config:
        cfg = replace(cfg, ds_config=[cfg.ds_config] if isinstance(cfg.ds_config, str) else list(cfg.ds_config))
        _check_ds_config(cfg, exp)
    from .data import check_squad_path  # here, not at the top: it imports `datasets`, and --help stays quick

    for name in ("train_file", "eval_file"):
        if getattr(cfg, name) is not None:
            path = check_squad_path(getattr(cfg, name), f"--{name.replace('_', '-')}")
            cfg = replace(cfg, **{name: str(path.resolve())})
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if cfg.output_dir is None:
        if world_size > 1:
            raise WorkshopError(
                "Several ranks need one output directory, and none was given.",
                "pass --output-dir DIR (the batch scripts pass runs/<job name>-<job id>).",
            )
        from datetime import datetime

        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        cfg = replace(cfg, output_dir=str(Path("runs") / f"{cfg.experiment}{'-tiny' if cfg.tiny else ''}-{stamp}"))
    out = Path(cfg.output_dir).absolute()
    if not cfg.output_dir.strip() or out in (Path.cwd(), Path.home(), Path(out.anchor)):
        raise WorkshopError(
            f"--output-dir {cfg.output_dir!r} is {'empty' if not cfg.output_dir.strip() else out}, "
            "not a folder of the run's own; nothing was changed.",
            "pass --output-dir DIR, a folder for this run (created if missing), or leave it out.",
        )
    # bytes that are no UTF-8 (read as surrogates) cannot be written into results.json; a name over NAME_MAX failed
    # at the first mkdir
    bad = "is not UTF-8 text" if re.search("[\ud800-\udfff]", cfg.output_dir) else None
    if bad or max(len(os.fsencode(part)) for part in out.parts) > 255:
        raise WorkshopError(
            f"--output-dir {cfg.output_dir!r} {bad or 'has a name over 255 bytes'}; nothing was changed.",
            "pass --output-dir a path of UTF-8 text whose names are at most 255 bytes each.",
        )
    if not 1 <= (timeout := variables.get("WORKSHOP_DIST_TIMEOUT_S", 1)) <= 10**6:  # 0: every collective times out
        raise WorkshopError(
            f"WORKSHOP_DIST_TIMEOUT_S={timeout} is not from 1 to 1,000,000 seconds.",
            "set WORKSHOP_DIST_TIMEOUT_S to 1800 (the default; the batch scripts: 300), or unset it.",
        )
    if out.exists() and not out.is_dir():
        raise WorkshopError(
            f"output_dir {out} is a file, not a directory; nothing was changed.",
            "pass --output-dir with a directory path (it is created if missing).",
        )
    rundir.check_writable(out, "--output-dir")
    return cfg


def _check_ds_config(cfg: RunConfig, exp: Experiment) -> None:
    """The --ds-config overrides set on the config this run builds (`RunConfig.ds_settings`), checked against
    DeepSpeed's config classes (`ds_config.apply_overrides`); `train.build_trainer` builds it again once the batch
    sizes and the buckets sized for the model are known, and sets the same overrides.

    Raises:
        WorkshopError: the experiment does not use DeepSpeed, or an override is refused (`ds_config.check_overrides`).
    """
    if not exp.deepspeed:
        raise WorkshopError(
            f"--ds-config sets DeepSpeed keys, and {cfg.experiment} does not use DeepSpeed.",
            "pick a DeepSpeed experiment (stage0 ... stage3_offload), or drop --ds-config.",
        )
    apply_overrides(build_ds_config(exp, cfg.ds_settings()), cfg.ds_config)


@dataclass
class EvalConfig:
    """`workshop eval`'s settings: answers generated for SQuAD dev questions, scored by exact match and F1
    (`evaluation.evaluate_squad`)."""

    model: str = field(
        metadata={
            "help": "a run directory (its model/), a model directory or a hub name",
            "metavar": "MODEL_OR_RUN_DIR",
        }
    )
    num_questions: int = field(default=500, metadata={"help": "the first N dev questions", "metavar": "N"})
    output_dir: str | None = _opt(
        "where predictions.jsonl and squad_scores.json go (default: MODEL_OR_RUN_DIR)", metavar="DIR"
    )
    eval_file: str | None = _opt("SQuAD v1.1-format JSON (default: SQuAD dev)", metavar="JSON")
    batch_size: int = field(default=16, metadata={"help": "prompts per generate call", "metavar": "N"})
    max_new_tokens: int = field(default=32, metadata={"help": "answer length cap, tokens", "metavar": "N"})


COMMANDS = {  # `workshop COMMAND`: its settings, the positional field, one line of description
    "run": (
        RunConfig,
        "experiment",
        "Run one experiment; write results.json, memory.csv, train_log.csv and, with "
        "DeepSpeed, ds_config.json into the output directory. EXPERIMENT: "
        + "; ".join(f"{e.name} ({e.summary})" for e in EXPERIMENTS.values())
        + ".",
    ),
    "eval": (
        EvalConfig,
        "model",
        "Generate answers for SQuAD dev questions; exact match and F1 (SQuAD v1.1's "
        "official normalisation); predictions.jsonl and squad_scores.json into the output directory.",
    ),
}


def parse_args(command: str, argv: list[str]):
    """`workshop COMMAND [POSITIONAL] [--option value ...]` -> the command's settings (`COMMANDS`: RunConfig
    unresolved, EvalConfig), through HfArgumentParser, so each option is its dataclass field: one
    declaration, with its help. Counts are checked (`check_counts`).

    Raises:
        SystemExit(2): a bad option or value, after argparse's message and a "To fix:" line.
        WorkshopError: a count below 1 (eval, bench)."""
    import argparse

    from transformers import HfArgumentParser

    cls, positional, description = COMMANDS[command]
    prog = f"workshop {command}"

    class Help(argparse.ArgumentDefaultsHelpFormatter):  # "(default: X)" only where X says something
        def _get_help_string(self, action):
            return (
                action.help if action.default in (None, False, argparse.SUPPRESS) else super()._get_help_string(action)
            )

        def _format_action_invocation(self, action):  # each option once: --max-steps, not --max_steps too
            shown = copy.copy(action)
            shown.option_strings = [o for o in action.option_strings if "_" not in o] or action.option_strings
            return super()._format_action_invocation(shown)

    class Parser(HfArgumentParser):
        def error(self, message):
            self.exit(2, f"{prog}: error: {message}\nTo fix: see `{prog} --help` for the options.\n")

    if positional and argv and not argv[0].startswith("-"):  # the first argument names it on the command line
        argv = [f"--{positional}", argv[0], *argv[1:]]
    usage = f"{prog} {positional.upper() if positional else ''} [options]".replace("  ", " ")
    parser = Parser(cls, prog=prog, usage=usage, formatter_class=Help, allow_abbrev=False, description=description)
    cfg, unknown = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True, look_for_args_file=False)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if cls is not RunConfig:  # RunConfig's counts are checked by `resolve`, with the recipe filled in
        check_counts(cfg)
    return cfg


def check_counts(cfg, names=None) -> None:
    """Raise WorkshopError naming the first of `names` (default: every int field of `cfg`, an EvalConfig or
    BenchConfig) below 1, with the fix; a None value passes."""
    for name in names or [name for name, kind in field_types(type(cfg)).items() if kind is int]:
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise WorkshopError(
                f"{name} must be at least 1, got {getattr(cfg, name)}.",
                f"pass --{name.replace('_', '-')} N with N >= 1.",
            )


def parse_run_args(argv: list[str]) -> RunConfig:
    """`workshop run EXPERIMENT [--option value ...]` -> RunConfig (unresolved): `parse_args("run", argv)`."""
    return parse_args("run", argv)


def cli_args(cfg: RunConfig) -> list[str]:
    """The `workshop run` arguments of `cfg`: the experiment, then `--option value` for each field that differs
    from RunConfig's default (a yes/no option with true or false; `--ds-config` once per override). `parse_run_args(cli_args(cfg)) == cfg`, so a
    run started in another process (notebook 03b's killed run) has exactly the settings of the `RunConfig` that
    resumes it."""
    argv = [cfg.experiment]
    for f in fields(RunConfig):
        value = getattr(cfg, f.name)
        if f.name == "experiment" or value == f.default:
            continue
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(value, (list, tuple)):
            argv += [a for v in value for a in (flag, str(v))]
        elif isinstance(value, bool):
            argv += [flag, str(value).lower()]
        else:
            argv += [flag, str(value)]
    return argv
