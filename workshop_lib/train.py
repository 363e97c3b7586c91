"""One experiment, end to end: data, model, DeepSpeed config, HF Trainer, memory, results
(introduced in `01_baseline`; every later notebook and `workshop run` call `run_experiment`).

The same function runs in a notebook kernel (one process: the distributed variables are set for a world
of one), from `workshop run`, and under a launcher (torchrun, deepspeed, srun), where each rank calls it
and rank 0 writes the results.
"""

from __future__ import annotations

import csv
import gc
import json
import math
import os
import socket
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

import torch

from . import env
from .data import load_squad, tokenize_squad
from .ds_config import build_ds_config
from .errors import WorkshopError
from .memory import MemorySampler, estimate_model_states
from .model import DEFAULT_MODEL, load_model_and_tokenizer

# The Trainer's eval loss is a mean of per-batch means, so it depends on how the eval set is batched: one
# fixed eval batch keeps eval losses comparable when the training micro-batch changes.
EVAL_BATCH_SIZE = 4
# name -> (zero_stage, offload_optimizer, offload_param); zero_stage None = no DeepSpeed
EXPERIMENTS = {
    "baseline": (None, False, False),
    "stage0": (0, False, False),
    "stage1": (1, False, False),
    "stage2": (2, False, False),
    "stage3": (3, False, False),
    "stage1_offload": (1, True, False),
    "stage2_offload": (2, True, False),
    "stage3_offload": (3, True, True),
}


@dataclass(frozen=True)
class Recipe:
    """Training hyper-parameters. Global batch = micro_batch_size x gradient_accumulation_steps x world_size
    (4 x 4 x 1 GPU = 16 sequences per optimizer step)."""

    name: str
    model: str
    loss_on: str  # "answer" or "all"
    pad_to_max_length: bool  # pad every sequence to max_length (the original workshop) or per batch
    group_by_length: bool  # batch sequences of similar length together: less padding
    max_length: int = 512  # tokens
    micro_batch_size: int = 4  # train_micro_batch_size_per_gpu
    gradient_accumulation_steps: int = 4
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    epochs: int = 3
    num_train_samples: int = 500  # questions
    num_eval_samples: int = 50


RECIPES = {
    # The original workshop exactly: BLOOM-560m, prompts padded to 512 tokens, fp16, loss on every token.
    "classic": Recipe("classic", "bigscience/bloom-560m", loss_on="all", pad_to_max_length=True,
                      group_by_length=False),
    # Same data and optimizer; no fixed padding, similar lengths batched, bf16 where supported, loss on answers.
    "default": Recipe("default", DEFAULT_MODEL, loss_on="answer", pad_to_max_length=False, group_by_length=True),
}
# --tiny: the same recipe on fewer questions, so a CPU finishes an experiment in seconds; a larger learning
# rate, since a 0.35M-parameter random model barely moves at 5e-5 in 8 steps.
TINY = {"num_train_samples": 64, "num_eval_samples": 16, "epochs": 2, "learning_rate": 1e-3}


def make_collator(tokenizer, recipe: Recipe):
    """Pads input_ids (pad token), attention_mask (0) and labels (-100, ignored by the loss) per batch, to a
    multiple of 8 (tensor-core friendly), or to recipe.max_length for the classic recipe."""
    from transformers import DataCollatorForSeq2Seq

    if recipe.pad_to_max_length:
        return DataCollatorForSeq2Seq(tokenizer, padding="max_length", max_length=recipe.max_length,
                                      label_pad_token_id=-100)
    return DataCollatorForSeq2Seq(tokenizer, padding="longest", pad_to_multiple_of=8, label_pad_token_id=-100)


def _step_log_callback(path: Path):
    """A TrainerCallback appending every Trainer log (each step's loss, each epoch's eval loss) to a CSV."""
    from transformers import TrainerCallback

    fields = ["step", "epoch", "time_s", "loss", "eval_loss", "learning_rate", "grad_norm",
              "num_input_tokens_seen"]

    class StepLog(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()
            if state.is_world_process_zero:
                self.f = path.open("w", newline="")
                self.w = csv.DictWriter(self.f, fields, extrasaction="ignore")
                self.w.writeheader()

        def on_log(self, args, state, control, logs=None, **kw):
            if state.is_world_process_zero and logs and ("loss" in logs or "eval_loss" in logs):
                self.w.writerow(logs | {"step": state.global_step, "time_s": round(time.perf_counter() - self.t0, 3)})
                self.f.flush()

        def on_train_end(self, args, state, control, **kw):
            if state.is_world_process_zero:
                self.f.close()

    return StepLog()


def check_machine(zero_stage, offload_optimizer: bool, tiny: bool, allow_cpu: bool) -> None:
    """Stop early, with the fix, when this machine cannot run the experiment.

    Raises:
        WorkshopError: no GPU for a full-size model; DeepSpeed missing; CPU Adam (needed by offload)
            cannot be built here (JIT compilation needs a compiler and ninja).
    """
    if not torch.cuda.is_available() and not (tiny or allow_cpu):
        raise WorkshopError("No CUDA GPU is visible, and a full-size model on the CPU would take hours.",
                            "add --tiny to run the tiny model on the CPU, or run on a GPU node "
                            "(check `nvidia-smi` and CUDA_VISIBLE_DEVICES).")
    if zero_stage is None:
        return
    env.sanitize_cuda_arch_list()
    try:
        import deepspeed  # noqa: F401
    except ImportError as e:
        raise WorkshopError(f"DeepSpeed is not installed ({e}).",
                            "pip install deepspeed (or `pip install -e .` in the workshop folder), or run "
                            "the baseline experiment, which does not use DeepSpeed.") from e
    from deepspeed.ops.op_builder import CPUAdamBuilder, FusedAdamBuilder

    # DeepSpeed's AdamW is JIT-compiled on first use: CPU Adam with offload, fused Adam otherwise.
    builder, what = (CPUAdamBuilder(), "CPU Adam") if offload_optimizer else (FusedAdamBuilder(), "fused Adam")
    if not builder.is_compatible(verbose=False):
        raise WorkshopError(f"DeepSpeed's {what} op cannot be built on this machine (see `ds_report`).",
                            "install a C++ compiler, ninja and, on a GPU, the CUDA toolkit matching torch "
                            "(conda install gxx_linux-64 ninja cuda-nvcc), or run the baseline experiment.")


def _default_output_dir(experiment: str, tiny: bool) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{experiment}{'-tiny' if tiny else ''}-{stamp}"


def run_experiment(experiment: str, *, tiny: bool = False, model: str | None = None, recipe: str = "default",
                   train_file: str | None = None, eval_file: str | None = None,
                   num_train_samples: int | None = None, num_eval_samples: int | None = None,
                   epochs: int | None = None, max_steps: int | None = None, micro_batch_size: int | None = None,
                   gradient_accumulation_steps: int | None = None, loss_on: str | None = None,
                   random_weights: bool = False, output_dir: str | os.PathLike | None = None,
                   overwrite: bool = False, allow_cpu: bool = False, seed: int = 42) -> dict:
    """Fine-tune on SQuAD with one of `EXPERIMENTS` and return the results dict (also in results.json).

    Args:
        experiment: "baseline" (HF Trainer, no DeepSpeed), "stage0".."stage3", or "stage{1,2,3}_offload".
        tiny: a ~0.35M-parameter model of the same family on the CPU or GPU (see `workshop_lib.model`).
        model: hub name or local path; default: the recipe's (Qwen/Qwen3-0.6B, or bloom-560m for classic).
        recipe: "default" or "classic" (see `RECIPES`); the other arguments override single fields.
        train_file, eval_file: SQuAD-format JSON files instead of SQuAD itself.
        max_steps: stop after this many optimizer steps (overrides epochs).
        random_weights: the published architecture with random weights (no download).
        output_dir: where to write; default runs/<experiment>[-tiny]-<YYYYmmdd-HHMMSS>.
        overwrite: allow writing into a directory that already holds results.json.
        allow_cpu: run a full-size model without a GPU (slow; for debugging).

    Writes into output_dir: results.json (rank 0), memory.csv (time series, MiB), train_log.csv (one row
    per optimizer step and per evaluation), ds_config.json (DeepSpeed runs).

    Returns:
        The results dict; keys are listed in the README ("What results.json holds").

    Raises:
        WorkshopError: unknown experiment or recipe, bad data file, model not available offline, a machine
            that cannot run the experiment, a GPU too small, an output directory holding a finished run.
    """
    if experiment not in EXPERIMENTS:
        raise WorkshopError(f"Unknown experiment {experiment!r}.", f"use one of: {', '.join(EXPERIMENTS)}.")
    if recipe not in RECIPES:
        raise WorkshopError(f"Unknown recipe {recipe!r}.", f"use one of: {', '.join(RECIPES)}.")
    zero_stage, offload_optimizer, offload_param = EXPERIMENTS[experiment]
    rec = RECIPES[recipe]
    overrides = (TINY if tiny else {}) | {k: v for k, v in dict(
        model=model, num_train_samples=num_train_samples, num_eval_samples=num_eval_samples, epochs=epochs,
        micro_batch_size=micro_batch_size, gradient_accumulation_steps=gradient_accumulation_steps,
        loss_on=loss_on).items() if v is not None}
    rec = replace(rec, **overrides)
    check_machine(zero_stage, offload_optimizer, tiny, allow_cpu)

    out = Path(output_dir) if output_dir else _default_output_dir(experiment, tiny)
    if (out / "results.json").exists() and not overwrite:
        raise WorkshopError(f"{out} already holds a finished run (results.json); nothing was changed.",
                            "pass another --output-dir, or --overwrite to replace it.")
    rank, local_rank, world_size = env.world()
    if zero_stage is not None:
        env.ensure_distributed_env()
        rank, local_rank, world_size = env.world()
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    precision = env.pick_precision(rec.name)

    # Data and model first: a bad file or a missing model stops here, before anything is written.
    train_raw = load_squad("train", rec.num_train_samples, train_file, verbose=rank == 0)
    eval_raw = load_squad("validation", rec.num_eval_samples, eval_file, verbose=rank == 0)
    attn = None
    if rec.name == "default" and torch.cuda.is_available():
        from transformers.utils import is_flash_attn_2_available

        attn = "flash_attention_2" if is_flash_attn_2_available() and precision == "bf16" else None
    from transformers import Trainer, TrainingArguments, set_seed

    set_seed(seed)  # before building the model: the same random init in every experiment
    net, tokenizer, info = load_model_and_tokenizer(rec.model, tiny=tiny, random_weights=random_weights,
                                                    attn_implementation=attn)
    train_ds, train_stats = tokenize_squad(train_raw, tokenizer, rec.max_length, rec.loss_on)
    eval_ds, eval_stats = tokenize_squad(eval_raw, tokenizer, rec.max_length, rec.loss_on)
    estimate = estimate_model_states(info["num_params"], info["largest_layer_params"], zero_stage,
                                     offload_optimizer, offload_param, num_gpus_per_node=min(world_size, max(
                                         torch.cuda.device_count(), 1)), num_nodes=max(1, world_size // max(
                                             torch.cuda.device_count(), 1)))
    if torch.cuda.is_available():
        total_mib = torch.cuda.get_device_properties(local_rank).total_memory / 2**20
        if estimate["estimated_model_states_gpu_mib"] > 0.9 * total_mib:
            raise WorkshopError(
                f"{rec.model} needs about {estimate['estimated_model_states_gpu_mib']:,.0f} MiB per GPU for "
                f"its model states alone under {experiment} (DeepSpeed's estimate), more than 90% of this "
                f"GPU's {total_mib:,.0f} MiB.",
                "use more ZeRO (stage3), CPU offload (stage2_offload, stage3_offload), more GPUs, or a smaller model.")

    out.mkdir(parents=True, exist_ok=True)
    ds_config = None
    if zero_stage is not None:
        ds_config = build_ds_config(zero_stage, offload_optimizer, offload_param, precision, rec.micro_batch_size,
                                    rec.gradient_accumulation_steps, world_size)
        if rank == 0:
            (out / "ds_config.json").write_text(json.dumps(ds_config, indent=2) + "\n")

    args = TrainingArguments(
        output_dir=str(out / "trainer"), per_device_train_batch_size=rec.micro_batch_size,
        per_device_eval_batch_size=EVAL_BATCH_SIZE, gradient_accumulation_steps=rec.gradient_accumulation_steps,
        learning_rate=rec.learning_rate, weight_decay=rec.weight_decay, num_train_epochs=rec.epochs,
        max_steps=max_steps or -1, eval_strategy="epoch", logging_steps=1, save_strategy="no", report_to="none",
        bf16=precision == "bf16", fp16=precision == "fp16", use_cpu=not torch.cuda.is_available(),
        deepspeed=ds_config, seed=seed, dataloader_num_workers=0, include_num_input_tokens_seen="non_padding",
        ddp_timeout=int(os.environ.get("WORKSHOP_DIST_TIMEOUT_S", 1800)),  # a dead rank fails, never hangs
        train_sampling_strategy="group_by_length" if rec.group_by_length else "random")
    trainer = Trainer(model=net, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                      data_collator=make_collator(tokenizer, rec), processing_class=tokenizer,
                      callbacks=[_step_log_callback(out / "train_log.csv")])
    t0 = time.perf_counter()
    try:
        with MemorySampler(out / "memory.csv" if rank == 0 else out / f"memory.rank{rank}.csv") as mem:
            train_out = trainer.train()
            history = trainer.state.log_history
            if not any("eval_loss" in h for h in history):  # max_steps ended before the first epoch did
                trainer.evaluate()
    except torch.cuda.OutOfMemoryError as e:
        raise WorkshopError(f"The GPU ran out of memory during {experiment} ({e}). memory.csv and "
                            "train_log.csv in the output directory show how far it got.",
                            "lower --micro-batch-size (and raise --gradient-accumulation-steps to keep the "
                            "global batch), or use CPU offload (stage2_offload, stage3_offload).") from e
    finally:
        _release(trainer)
    wall = time.perf_counter() - t0
    history = trainer.state.log_history
    evals = [h for h in history if "eval_loss" in h]
    train_logs = [h for h in history if "loss" in h]
    m = train_out.metrics
    tokens = trainer.state.num_input_tokens_seen
    steps_per_epoch = math.ceil(math.ceil(len(train_ds) / (rec.micro_batch_size * world_size))
                                / rec.gradient_accumulation_steps)
    # Model FLOPs per token: 6N for the forward and backward matmuls + 12*L*H*S for attention scores
    # (Chowdhery et al. 2022, PaLM, appendix B), S = mean tokens per trained sequence (padding excluded).
    seq = train_stats.tokens / train_stats.used
    flops_per_token = 6 * info["num_params"] + 12 * info["num_layers"] * info["hidden_size"] * seq
    peak = env.peak_flops()
    tokens_per_s = tokens / m["train_runtime"]
    mine = mem.summary()
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()  # SLURM's node name where there is one
    ranks = _gather_per_rank(mine | {"rank": rank, "local_rank": local_rank, "host": host})
    results = {
        "experiment": experiment, "recipe": rec.name, "model": rec.model, "tiny": tiny,
        "random_weights": random_weights, "zero_stage": zero_stage, "offload_optimizer": offload_optimizer,
        "offload_param": offload_param, "precision": precision, "attn_implementation": info["attn_implementation"],
        "loss_on": rec.loss_on, "padding": "max_length" if rec.pad_to_max_length else "longest",
        "world_size": world_size, "micro_batch_size_per_gpu": rec.micro_batch_size,
        "gradient_accumulation_steps": rec.gradient_accumulation_steps,
        "global_batch_size": rec.micro_batch_size * rec.gradient_accumulation_steps * world_size,
        "epochs": rec.epochs if not max_steps else round(trainer.state.epoch, 3), "max_steps": max_steps,
        "steps_per_epoch": steps_per_epoch, "global_steps": trainer.state.global_step,
        "train_loss": round(m["train_loss"], 4),
        "train_loss_per_epoch": _per_epoch(train_logs, "loss"),
        "eval_loss": [round(h["eval_loss"], 4) for h in evals],
        "train_samples_per_second": round(m["train_samples_per_second"], 2),
        "eval_samples_per_second": round(evals[-1]["eval_samples_per_second"], 2),
        "train_tokens_per_second": round(tokens_per_s, 1),
        "mfu": round(tokens_per_s * flops_per_token / (peak * world_size), 4) if peak else None,
        "num_params": info["num_params"],
        **{k: mine[k] for k in ("gpu_peak_allocated_mib", "gpu_peak_mib", "gpu_mean_mib", "gpu_min_mib",
                                "host_peak_rss_mib")},  # rank 0's; every rank's in per_rank_memory
        "per_rank_memory": ranks,
        "estimated_model_states_gpu_mib": estimate["estimated_model_states_gpu_mib"],
        "estimated_model_states_cpu_mib": estimate["estimated_model_states_cpu_mib"],
        "estimator": estimate["estimator"],
        "data_stats": {"train": train_stats.as_dict(), "eval": eval_stats.as_dict()},
        "device": env.device_name(), "versions": env.versions(), "wall_seconds": round(wall, 1),
        "train_runtime_seconds": round(m["train_runtime"], 1), "tokenizer": info["tokenizer"],
        "recipe_config": asdict(rec), "output_dir": str(out),
    }
    if rank == 0:
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def _gather_per_rank(summary: dict) -> list[dict]:
    """Every rank's memory summary, in rank order (all_gather_object; just [summary] in a world of one)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [summary]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, summary)
    return out


def _per_epoch(logs: list[dict], key: str) -> list[float]:
    """Mean of logs[key] over each epoch (epoch numbers in the logs are fractional, 0 < e <= epochs)."""
    by_epoch: dict[int, list[float]] = {}
    for h in logs:
        by_epoch.setdefault(max(math.ceil(h["epoch"] - 1e-9), 1), []).append(h[key])
    return [round(sum(v) / len(v), 4) for _, v in sorted(by_epoch.items())]


def _release(trainer) -> None:
    """Free the engine, optimizer and GPU memory so the next experiment in the same kernel starts clean."""
    from accelerate.state import AcceleratorState
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    try:
        trainer.accelerator.free_memory()
    finally:
        trainer.model_wrapped = trainer.model = trainer.optimizer = trainer.lr_scheduler = None
        unset_hf_deepspeed_config()
        AcceleratorState._reset_state(reset_partial_state=True)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
