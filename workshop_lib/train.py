"""One experiment, end to end (introduced in `01_baseline`; every later notebook and `workshop run` call
`run_experiment`).

A run is a short sequence of named stages, each a function of its concept's module:

    resolve    config.resolve, model.check_model_source, rundir.check   settings filled in and validated
    machine    check_machine                                            GPU, DeepSpeed, ops, precision, ranks
    data       data.load_squad                                          SQuAD rows (a bad file stops here)
    model      model.load_model_and_tokenizer, data.tokenize_squad      model, tokenizer, tokenised data
    engine     build_trainer (after env.build_deepspeed_ops, rundir.claim)  HF Trainer (+ DeepSpeed)
    train      train                                                    Trainer.train under the memory sampler,
                                                                        checkpoints; from one with --resume
    save       save_model                                               OUTPUT_DIR/model, loadable by
                                                                        from_pretrained
    record     record, rundir.finish                                    results.json, atomically

Nothing is written before `engine`: bad input of any kind stops the run with a `WorkshopError` and leaves
the output directory as it was. SIGINT stops it with `rundir.RunInterrupted`; SIGTERM and SIGUSR1 during
training with `rundir.RunPreempted` after a checkpoint at the next step boundary; the directory is marked
unfinished either way, and `--resume` continues it from its last complete checkpoint, on the same number of
ranks or another (`checkpoint.world_size_change`: the global batch kept, ZeRO states through DeepSpeed's
universal checkpoint).

The same function runs in a notebook kernel (one process: the distributed variables are set for a world
of one), from `workshop run`, and under a launcher (torchrun, deepspeed, srun), where each rank calls it
and rank 0 writes the results.
"""

from __future__ import annotations

import csv
import gc
import json
import os
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch

from . import checkpoint, env, memory, metrics, rundir, variables
from .config import EXPERIMENTS, Experiment, RunConfig, resolve
from .data import TokenBudgetBatchSampler, load_squad, make_collator, tokenize_squad
from .ds_config import build_ds_config
from .errors import WorkshopError
from .evaluation import EVAL_BATCH_SIZE
from .memory import MemorySampler, estimate_model_states
from .model import (check_model_fits_data, check_model_source, compile_layers, compute_logits_where_labelled,
                    load_model_and_tokenizer)
from .results import RunResults
from .units import MiB

# Liger-Kernel's fused linear + cross-entropy alone (an option; the default recipe computes the labelled
# logits only): its other kernels (RoPE, RMSNorm, SwiGLU) are what torch.compile fuses in the default recipe.
LIGER_FLCE_ONLY = {"rope": False, "rms_norm": False, "swiglu": False, "cross_entropy": False,
                   "fused_linear_cross_entropy": True}


def run_experiment(config: RunConfig | str, /, callbacks: Sequence = (), **settings) -> dict:
    """Fine-tune on SQuAD as `config` says and return the results (a `RunResults` as a dict, also written
    to OUTPUT_DIR/results.json).

        run_experiment(RunConfig("stage2", tiny=True))          # or, the same:
        run_experiment("stage2", tiny=True, output_dir="runs/x")
        run_experiment(cfg, callbacks=[MyCallback()])           # a profiler, a course hook

    Args:
        config: a `RunConfig`, or an experiment name with `settings` as its other fields.
        callbacks: `transformers.TrainerCallback` instances added to the run's Trainer after the workshop's
            own (checkpoint manifest, batch order, comms window, step log, stop file, memory phases), called after
            them for each event.

    Writes into the output directory: results.json (rank 0, last, atomically), memory.csv (time series,
    MiB; memory.rankN.csv for other ranks), train_log.csv (one row per optimizer step and evaluation),
    ds_config.json (DeepSpeed runs), comms.json (with comms_logger: `comms`), run_config.json (the settings, for
    --resume), checkpoints/checkpoint-N
    (`checkpoint`), model/ (the fine-tuned model: safetensors, config, generation config, tokenizer), and
    RUNNING while the run is in progress.

    Raises:
        WorkshopError: bad settings or data, a model that cannot be had, a machine that cannot run the
            experiment, a GPU too small, an output directory holding a run, a --resume whose checkpoints are
            all damaged (nothing is written in these cases), or an out-of-memory error during training (the
            logs so far are kept).
        RunInterrupted: SIGINT, or a signal before training started; the message names the complete
            checkpoints kept and the command that resumes (`checkpoint.kept`).
        RunPreempted: SIGTERM or SIGUSR1 during training, after a checkpoint; the message is the same.
    """
    cfg = config if isinstance(config, RunConfig) else RunConfig(config, **settings)
    asked = cfg  # as given, before `resolve`: the settings an interrupted run's message repeats
    env.quiet_libraries()
    checkpoint.quiet_resume_notes()
    # An earlier run in this process (a notebook kernel) leaves its engine and model in reference cycles that
    # only the collector frees: without this, several GiB of it would still be allocated while this run measures.
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    with rundir.interruptible():
        cfg = resolve(cfg)
        exp = EXPERIMENTS[cfg.experiment]
        check_model_source(cfg.model, cfg.tiny, cfg.random_weights)
        rundir.check(cfg.output_dir, cfg.overwrite, cfg.resume)
        try:
            cfg = check_machine(cfg, exp)
            change = None
            if cfg.resume:  # on another world size: the accumulation that keeps the global batch
                world_size = env.world()[2]
                given = asked.gradient_accumulation_steps
                accumulation = checkpoint.resume_accumulation(cfg.output_dir, world_size, given)
                cfg = replace(cfg, gradient_accumulation_steps=accumulation or cfg.gradient_accumulation_steps)
                checkpoint.check_same_run(cfg.output_dir, asdict(cfg), world_size)
                checkpoint.check_resumable(cfg.output_dir)
                change = checkpoint.world_size_change(cfg.output_dir, asdict(cfg), world_size)
            return _run(cfg, exp, change, callbacks)
        except rundir.RunInterrupted as e:
            if hasattr(e, "step"):  # set once the run had claimed its directory (`_run`)
                e.args = (f"stopped by {e.args[0]} at step {e.step}; {checkpoint.kept(cfg.output_dir, asked)}",)
            else:
                e.args = (f"stopped by {e.args[0]} before anything was written.",)
            raise
        except Exception as e:
            if hasattr(e, "disk_full"):  # set by `_run` on rank 0
                raise disk_full_error(cfg.output_dir, e.disk_full, e.step, asked) from e
            raise


def disk_full_error(out: str | os.PathLike, cleared: dict, step: int, asked: RunConfig) -> WorkshopError:
    """The one message for a run stopped by a full disk (`rundir.clear_partial_writes` has removed what it
    was writing): the disk, its free space, what the run needs, and the command that goes on."""
    usage, mount = shutil.disk_usage(out), rundir.mount_point(out)
    if cleared["checkpoint_mib"]:
        need = f"a checkpoint of this run takes {cleared['checkpoint_mib']:,.0f} MiB"
    else:  # `checkpoint.bytes_per_param`
        need = f"a checkpoint of this run takes about {cleared['estimate_mib']:,.0f} MiB"
    need += f" and the run keeps up to {cleared['keep']}"
    complete = cleared["complete"]
    go_on = checkpoint.run_command(asked, out, "--resume" if complete else "--overwrite")
    return WorkshopError(
        f"The disk holding {out} ({mount}) is full: the run stopped at step {step} while writing {cleared['what']}; "
        f"{need}. The partial files were removed ({usage.free / MiB:,.0f} MiB free of "
        f"{usage.total / MiB:,.0f} MiB now); {rundir.MARKER} says failed: disk full. "
        + (f"Complete checkpoints kept: {', '.join(map(str, complete))}." if complete else "No checkpoint was kept."),
        f"free space on {mount} (`du -sh {mount}/*` shows what holds it) or copy the run to a larger disk, then "
        f"{go_on}")


def check_machine(cfg: RunConfig, exp: Experiment) -> RunConfig:
    """Stop early, with the fix, when this machine cannot run the experiment; set up the ranks; return
    `cfg` with precision and attention resolved for this machine.

    Raises:
        WorkshopError: no GPU for a full-size model; DeepSpeed missing; a DeepSpeed op the experiment needs
            cannot be built here (a compiler and ninja; with a GPU the CUDA toolkit; for NVMe libaio).
    """
    if not torch.cuda.is_available() and not (cfg.tiny or cfg.allow_cpu):
        raise WorkshopError("No CUDA GPU is visible, and a full-size model on the CPU would take hours.",
                            "add --tiny to run the tiny model on the CPU, or run on a GPU node "
                            "(check `nvidia-smi` and CUDA_VISIBLE_DEVICES).")
    if exp.deepspeed:
        env.sanitize_cuda_arch_list()
        try:
            import deepspeed
        except ImportError as e:
            raise WorkshopError(f"DeepSpeed is not installed ({e}).",
                                "pip install deepspeed (or `pip install -e .` in the workshop folder), or run "
                                "the baseline experiment, which does not use DeepSpeed.") from e
        env.check_deepspeed_version(deepspeed.__version__)
        env.check_deepspeed_ops(env.deepspeed_ops(exp.offload_optimizer, exp.offload_param, env.world()[2]))
        env.ensure_distributed_env()
    if torch.cuda.is_available():
        torch.cuda.set_device(env.world()[1])
        env.gpu_memory_fraction()  # WORKSHOP_GPU_MEMORY_FRACTION: this GPU made to look smaller
    env.init_distributed()
    precision = env.pick_precision(cfg.precision)
    compile_ = cfg.torch_compile and torch.cuda.is_available()
    if compile_ and (exp.zero_stage or 0) >= 3:
        compile_ = False
        if env.world()[0] == 0:
            print("torch_compile is off under ZeRO-3: DeepSpeed's parameter-gathering hooks split every compiled "
                  "block into pieces, which measured slower than no compilation (`workshop bench`, docs/h100/bench).")
    return replace(cfg, precision=precision, liger_kernel=cfg.liger_kernel and env.liger_available(),
                   torch_compile=compile_,
                   attn_implementation=env.pick_attention(cfg.attn_implementation, precision) or "default")


def _run(cfg: RunConfig, exp: Experiment, change: dict | None = None, callbacks: Sequence = ()) -> dict:
    rank, local_rank, world_size = env.world()
    out = Path(cfg.output_dir)
    # data, then model: a bad file or a missing model stops here, before anything is written
    train_raw = load_squad("train", cfg.num_train_samples, cfg.train_file, verbose=rank == 0)
    eval_raw = load_squad("validation", cfg.num_eval_samples, cfg.eval_file, verbose=rank == 0)
    from transformers import set_seed

    # before a minute of building the model: will it fit on the GPU, and its swap files on the drive?
    if not cfg.tiny and (torch.cuda.is_available() or exp.offloads_to_nvme):
        from .model import count_params

        counts = count_params(cfg.model)
        _check_fits(cfg, _estimate(counts, exp, world_size)["estimated_model_states_gpu_mib"], local_rank)
        if exp.offloads_to_nvme:
            check_nvme_space(cfg, exp, counts["num_params"], world_size)
    set_seed(cfg.seed)  # before building the model: the same random init in every experiment
    attn = None if cfg.attn_implementation == "default" else cfg.attn_implementation
    net, tokenizer, info = load_model_and_tokenizer(cfg.model, tiny=cfg.tiny, random_weights=cfg.random_weights,
                                                    attn_implementation=attn)
    check_model_fits_data(net, tokenizer, cfg.max_length, cfg.model)
    before = score_before_training(net, tokenizer, cfg) if cfg.score_questions and rank == 0 else {}
    apply_speed_levers(net, cfg)
    train_ds, train_stats = tokenize_squad(train_raw, tokenizer, cfg.max_length, cfg.loss_on)
    eval_ds, eval_stats = tokenize_squad(eval_raw, tokenizer, cfg.max_length, cfg.loss_on)
    estimate = _estimate(info, exp, world_size)
    if exp.deepspeed:  # JIT-build the ops now, saying so, one rank per node first; the others load them
        ops = env.deepspeed_ops(exp.offload_optimizer, exp.offload_param, world_size)
        if local_rank == 0:
            env.build_deepspeed_ops(ops)
        env.barrier()
        if local_rank != 0:
            env.build_deepspeed_ops(ops)
    env.barrier()  # every rank validated the directory before rank 0 changes it
    if rank == 0:
        rundir.claim(out, cfg.overwrite, cfg.resume)
        checkpoint.write_run_config(out, asdict(cfg), world_size)
    env.barrier()
    resume_from = trainer = None
    try:
        if cfg.resume:  # inside: a universal conversion that fails marks the run failed
            resume_from = resume_point(out, rank, change)
        # The sampler starts before the Trainer is built (the model still on the CPU) in every experiment, so
        # that its clock and set-up phase mean the same thing whether the Trainer or DeepSpeed sets the model up.
        with MemorySampler(out / "memory.csv" if rank == 0 else out / f"memory.rank{rank}.csv") as mem:
            trainer = build_trainer(cfg, exp, net, tokenizer, train_ds, eval_ds, world_size,
                                    load_universal=bool(change and change["universal"] and resume_from))
            train_out, steps, wall = train(trainer, mem, out, cfg.experiment, resume_from, callbacks)
        if cfg.comms_logger:  # every rank's collectives into comms.json (a gather: every rank)
            from . import comms

            comms.write(out, trainer)
        if cfg.save_model:
            save_model(trainer, out, rank)
        results = record(cfg, exp, trainer, train_out, mem, steps, wall, info, estimate, train_ds, train_stats,
                         eval_stats, world_size)
        if cfg.score_questions and rank == 0:
            from .evaluation import evaluate_squad

            after = evaluate_squad(out, out, cfg.score_questions, eval_file=cfg.eval_file, max_length=cfg.max_length)
            results |= {"em": after["em"], "f1": after["f1"], "em_before": before["em"], "f1_before": before["f1"]}
        if rank == 0:
            rundir.finish(out, results)
    except BaseException as e:
        step = trainer.state.global_step if trainer is not None else 0
        full = not isinstance(e, KeyboardInterrupt) and rundir.disk_full(e, out)
        if rank == 0:
            if isinstance(e, rundir.RunPreempted):
                rundir.mark_ended(out, status="preempted", signal=e.args[0], step=step)
            elif isinstance(e, rundir.RunInterrupted):
                rundir.mark_ended(out, status="interrupted", signal=e.args[0], step=step)
            elif full:  # what was half-written goes first: it frees the space the marker needs
                per_param = checkpoint.bytes_per_param(exp.deepspeed, cfg.precision)
                e.disk_full = rundir.clear_partial_writes(out) | {
                    "estimate_mib": info["num_params"] * per_param / MiB, "keep": cfg.save_total_limit}
                rundir.mark_ended(out, status="failed", error=f"disk full, writing {e.disk_full['what']}", step=step)
            else:
                rundir.mark_ended(out, status="failed", error=f"{type(e).__name__}: {e}", step=step)
        e.step = step
        raise
    finally:
        if trainer is not None:
            _release(trainer)
        if exp.offloads_to_nvme:  # the swap files: as large as what they hold
            shutil.rmtree(nvme_swap_dir(cfg), ignore_errors=True)
    return results


def _nvme_buffers(net) -> dict:
    """ZeRO-Infinity's parameter buffers for `net`: DeepSpeed swaps each parameter tensor from NVMe into a
    buffer of its own (runtime/swap_tensor/partitioned_param_swapper.py), so a buffer must hold the largest
    tensor (the embedding: 155.6M elements for Qwen3-0.6B, above DeepSpeed's default 1e8; no larger) and there must be
    one per tensor in use at once: a transformer layer's, the next layer's being prefetched, and the embedding
    and LM head (Qwen3: 11 tensors a layer -> 24 buffers; with 5, DeepSpeed stops: "Not enough buffers 0 for
    swapping 1"). Pinned host memory: count x size x 2 bytes (Qwen3-1.7B: 24 x 311M x 2 = 14 GiB)."""
    layers = next((m for m in net.modules() if isinstance(m, torch.nn.ModuleList)), [])
    per_layer = max((len(list(layer.parameters())) for layer in layers), default=5)
    return {"nvme_buffer_count": 2 * per_layer + 2,
            "nvme_buffer_size": max(2**20, max(p.numel() for p in net.parameters()))}  # aio: 1 MiB at least


def nvme_swap_dir(cfg: RunConfig) -> Path:
    """This run's folder under --nvme-path for ZeRO-Infinity's swap files (DeepSpeed adds zero_stage_3/<what>/
    rank<N>), so that two runs sharing a drive never swap into each other's files; removed when the run ends
    (checkpoints, not swap files, are what a resumed run reads)."""
    import hashlib

    run = Path(cfg.output_dir).resolve()
    return Path(cfg.nvme_path) / f"workshop-{run.name}-{hashlib.sha1(str(run).encode()).hexdigest()[:8]}"


def nvme_swap_mib(cfg: RunConfig) -> dict:
    """MiB of ZeRO-Infinity's swap files in this run's `nvme_swap_dir` (every rank of this node), by what they
    hold: DeepSpeed writes parameters to zero_stage_3/<dtype>params/rank<N> (tensors of 1 MiB and more only,
    `swap_tensor.utils.MIN_AIO_BYTES`) and optimizer states to zero_stage_3/optimizer/rank<N>.
    Returns {"params": MiB, "optimizer": MiB}."""
    root, mib = nvme_swap_dir(cfg) / "zero_stage_3", {"params": 0.0, "optimizer": 0.0}
    for f in root.rglob("*.swp"):
        mib["optimizer" if f.relative_to(root).parts[0] == "optimizer" else "params"] += f.stat().st_size / MiB
    return {k: round(v, 1) for k, v in mib.items()}


def resume_point(out: Path, rank: int, change: dict | None = None) -> Path | None:
    """The last complete checkpoint of the run in `out`, or None (start from step 0). Rank 0 says which,
    moves every checkpoint that is not complete (interrupted while being written, or damaged:
    `checkpoint.why_incomplete`) aside into OUTPUT_DIR/damaged-checkpoints, one line each, and keeps the
    interrupted attempt's memory logs as memory[.rankN].before-resume-at-step-N.csv (train_log.csv goes on).

    On another world size (`change`, from `checkpoint.world_size_change`) rank 0 also says what changes, appends
    it to OUTPUT_DIR/world_size_changes.json (results.json's `world_size_changes`) and, for ZeRO partitions,
    makes the checkpoint's universal checkpoint (`checkpoint.to_universal`, once) while the other ranks wait.

    Raises:
        WorkshopError: DeepSpeed's converter failed (`checkpoint.to_universal`).
    """
    complete, broken = checkpoint.find_checkpoints(out)
    if rank == 0:
        step = checkpoint.step_of(complete[-1]) if complete else 0
        for f in out.glob("memory*.csv"):
            if ".before-resume-" not in f.name:
                f.rename(f.with_name(f"{f.stem}.before-resume-at-step-{step}.csv"))
        for b in broken:
            print(f"Skipped {b}: {checkpoint.why_incomplete(b)}; moved to {checkpoint.set_aside(b)}, never loaded.")
        print(f"Resuming from {complete[-1]} (step {step})." if complete else
              f"No complete checkpoint in {out / checkpoint.CHECKPOINTS}: training starts from step 0.")
        if change:
            print(checkpoint.describe_world_size_change(change), flush=True)
            changes = out / checkpoint.WORLD_SIZE_CHANGES
            before = json.loads(changes.read_text()) if changes.is_file() else []
            if before[-1:] != [change]:  # an attempt stopped before its first checkpoint made the same change
                rundir.write_json_atomic(changes, before + [change])
    failed = None
    if rank == 0 and change and change["universal"]:
        try:
            checkpoint.to_universal(complete[-1])
        except WorkshopError as e:  # raised after the barrier: the other ranks must not wait for it forever
            failed = e
    env.barrier()  # the other ranks load the universal checkpoint once rank 0 has made it
    if failed:
        raise failed
    if change and change["universal"] and not (complete[-1] / checkpoint.UNIVERSAL).is_file():
        raise WorkshopError(f"Rank 0 could not make the universal checkpoint of {complete[-1]} (its log says why).",
                            f"resume on the {change['world_size'][0]} rank(s) that wrote it.")
    return complete[-1] if complete else None


def score_before_training(net, tokenizer, cfg: RunConfig) -> dict:
    """SQuAD EM and F1 of the model as loaded, before fine-tuning (`evaluation.score_model` on
    `cfg.score_questions` dev questions; on the GPU where there is one, then back to the CPU)."""
    from .evaluation import score_model

    if torch.cuda.is_available():
        net.to("cuda")
    rows = load_squad("validation", cfg.score_questions, cfg.eval_file, verbose=False, count_option="--score-questions")
    scores = score_model(net.eval(), tokenizer, rows, max_length=cfg.max_length)[0]
    net.to("cpu").train()
    print(f"Before fine-tuning: exact match {scores['em']:.2f}, F1 {scores['f1']:.2f} on {scores['num_questions']} "
          "SQuAD questions.")
    return scores


def save_model(trainer, out: Path, rank: int) -> Path:
    """Write the fine-tuned model to OUTPUT_DIR/model: model.safetensors, config.json,
    generation_config.json and the tokenizer, which `AutoModelForCausalLM.from_pretrained` and
    `AutoTokenizer.from_pretrained` load (Trainer.save_model; under ZeRO-3 the engine gathers the partitioned
    weights first, `stage3_gather_16bit_weights_on_model_save`: a collective, so every rank calls this).
    Written to a temporary directory and renamed by rank 0: model/ is whole or absent. Returns its path."""
    final, tmp = out / "model", out / ".model.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    env.barrier()
    trainer.save_model(str(tmp))
    env.barrier()
    if rank == 0:
        (tmp / "training_args.bin").unlink(missing_ok=True)  # a pickle of TrainingArguments: not the model's
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    return final


def _estimate(counts: dict, exp: Experiment, world_size: int) -> dict:
    """DeepSpeed's estimate of the model states (`memory.estimate_model_states`) for this run's GPUs; without
    a GPU every state it places lives in host memory: GPU part None, the host part both."""
    gpus_per_node = max(torch.cuda.device_count(), 1)
    estimate = estimate_model_states(counts["num_params"], counts["largest_layer_params"], exp.zero_stage,
                                 exp.offload_optimizer != "none", exp.offload_param != "none",
                                 num_gpus_per_node=min(world_size, gpus_per_node),
                                 num_nodes=max(1, world_size // gpus_per_node))
    if torch.cuda.is_available():
        return estimate
    return {"estimated_model_states_gpu_mib": None,
            "estimated_model_states_cpu_mib": round(estimate["estimated_model_states_gpu_mib"]
                                                    + estimate["estimated_model_states_cpu_mib"], 1),
            "estimator": f"{estimate['estimator']}, its GPU and CPU parts together (no GPU: host memory)"}


def _check_fits(cfg: RunConfig, states_mib: float, local_rank: int) -> None:
    """Refuse a GPU whose memory the model states alone (DeepSpeed's estimate) would fill past 90%
    (`memory.STATES_MARGIN`)."""
    if not torch.cuda.is_available():
        return
    total_mib = torch.cuda.get_device_properties(local_rank).total_memory / MiB * (env.gpu_memory_fraction() or 1)
    if states_mib > memory.STATES_MARGIN * total_mib:
        raise WorkshopError(
            f"{cfg.model} needs about {states_mib:,.0f} MiB per GPU for its model states alone under "
            f"{cfg.experiment} (DeepSpeed's estimate), more than 90% of this GPU's {total_mib:,.0f} MiB.",
            "use more ZeRO (stage3), CPU offload (stage2_offload, stage3_offload), more GPUs, or a smaller model.")


def check_nvme_space(cfg: RunConfig, exp: Experiment, num_params: int, world_size: int) -> float:
    """Refuse an NVMe offload whose swap files (`memory.estimate_nvme_swap`: 18 bytes/param for parameters and
    optimizer states, over the nodes) would not fit in 95% (`memory.DRIVE_MARGIN`) of the free space at
    `cfg.nvme_path`: DeepSpeed would stop with an I/O error in the first step, after minutes of set-up, with the drive full.

    Returns: the swap files' estimate for this node, MiB. Raises: WorkshopError with both figures and the fix."""
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or min(world_size, max(torch.cuda.device_count(), 1)))
    nodes = max(1, world_size // per_node)  # ranks of one node share its drive
    need = memory.estimate_nvme_swap(num_params, exp.offload_optimizer == "nvme", exp.offload_param == "nvme", nodes)
    free = shutil.disk_usage(cfg.nvme_path).free / MiB
    if need > memory.DRIVE_MARGIN * free:
        raise WorkshopError(
            f"{cfg.experiment} would write about {need:,.0f} MiB of swap files for {cfg.model} "
            f"({num_params / 1e9:.2f}B parameters) to {cfg.nvme_path}, which has {free:,.0f} MiB free.",
            "pass --nvme-path DIR on a drive with more free space (or set WORKSHOP_NVME_PATH), use more nodes, "
            "or CPU offload (stage3_offload) where the host's memory holds the states.")
    return need


def _activation_checkpointing(on: bool) -> dict:
    """TrainingArguments' switch for it: `activation_checkpointing` from transformers 5.2x, before that
    `gradient_checkpointing` (5.17 on the GPU machines), which 5.2x deprecates; nothing when off."""
    from transformers import TrainingArguments

    if not on:
        return {}
    new = "activation_checkpointing" in TrainingArguments.__dataclass_fields__
    return {"activation_checkpointing" if new else "gradient_checkpointing": True}


def build_trainer(cfg: RunConfig, exp: Experiment, net, tokenizer, train_ds, eval_ds, world_size: int,
                  load_universal: bool = False):
    """The HF Trainer for this run, with DeepSpeed (config written to ds_config.json) for ZeRO experiments;
    `load_universal`: its engine resumes from the checkpoint's universal checkpoint (`checkpoint.to_universal`)."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    out = Path(cfg.output_dir)
    ds_config, batches = None, token_budget_batches(cfg, train_ds)
    micro = trainer_micro_batch(cfg, batches)
    if exp.deepspeed:
        ds_config = build_ds_config(exp.zero_stage, exp.offload_optimizer, exp.offload_param, cfg.precision,
                                    micro, cfg.gradient_accumulation_steps,
                                    world_size, nvme_path=str(nvme_swap_dir(cfg)) if cfg.nvme_path else None,
                                    **_nvme_buffers(net),
                                    reduce_bucket_size=min(cfg.reduce_bucket_size, sum(p.numel() for p in net.parameters()))
                                    or "auto", check_grad_overflow=cfg.check_grad_overflow,
                                    comms_logger=cfg.comms_logger, load_universal=load_universal)
        if cfg.ds_config:  # --ds-config KEY=VALUE: set last, checked against DeepSpeed as config.resolve did
            from .ds_config import apply_overrides

            ds_config = apply_overrides(ds_config, cfg.ds_config)
        if env.world()[0] == 0:
            rundir.write_json_atomic(out / "ds_config.json", ds_config)
    args = TrainingArguments(
        output_dir=str(out / checkpoint.CHECKPOINTS), per_device_train_batch_size=micro,
        per_device_eval_batch_size=EVAL_BATCH_SIZE, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay, num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps or -1, eval_strategy="epoch", logging_steps=1, report_to="none",
        save_strategy=cfg.save_strategy, save_steps=cfg.save_steps, save_total_limit=cfg.save_total_limit,
        prediction_loss_only=True,  # the eval loss is all the runs use; no logits kept
        bf16=cfg.precision == "bf16", fp16=cfg.precision == "fp16", use_cpu=not torch.cuda.is_available(),
        deepspeed=ds_config, seed=cfg.seed,
        dataloader_num_workers=cfg.dataloader_num_workers, include_num_input_tokens_seen="non_padding",
        ddp_timeout=variables.get("WORKSHOP_DIST_TIMEOUT_S", 1800),  # a dead rank fails, never hangs
        train_sampling_strategy="random" if cfg.batching == "token_budget" else cfg.batching,
        use_liger_kernel=cfg.liger_kernel, liger_kernel_config=LIGER_FLCE_ONLY if cfg.liger_kernel else None,
        **_activation_checkpointing(cfg.activation_checkpointing))
    trainer_class, callbacks = Trainer, [checkpoint.manifest_callback()]  # each checkpoint's manifest, last
    if batches is not None:
        class trainer_class(Trainer):  # noqa: N801 - the Trainer, with micro-batches sized in tokens
            def get_train_dataloader(self):
                from torch.utils.data import DataLoader

                return self.accelerator.prepare(DataLoader(
                    self.train_dataset, batch_sampler=batches, collate_fn=self.data_collator,
                    num_workers=self.args.dataloader_num_workers, pin_memory=self.args.dataloader_pin_memory))

        class EpochOrder(TrainerCallback):
            """Each epoch's batch order, also for an epoch resumed mid-way under several ranks, where the
            Trainer's own set_epoch does not reach the sampler (wrapped twice by accelerate)."""

            def on_epoch_begin(self, args, state, control, **kw):
                batches.set_epoch(int(state.epoch or 0))  # state.epoch: e + steps done / steps per epoch

        callbacks.append(EpochOrder())
    if exp.deepspeed:  # DeepSpeed's comms logger on (--comms-logger) or off, to the optimizer steps
        from .comms import Window

        callbacks.append(Window(cfg.comms_logger))
    return trainer_class(model=net, args=args, train_dataset=train_ds, eval_dataset=eval_ds, callbacks=callbacks,
                         data_collator=make_collator(tokenizer, cfg.padding, cfg.max_length,
                                                     attention_mask=not cfg.drop_attention_mask,
                                                     labelled_positions=cfg.logits_on == "labelled"),
                         processing_class=tokenizer)


def train(trainer, mem: MemorySampler, out: Path, experiment: str, resume_from: Path | None = None,
          callbacks: Sequence = ()):
    """Trainer.train() with each step timed and the memory phases marked on `mem` (`MemorySampler.mark`:
    train_begin, states after the first optimizer step, train_end), from the checkpoint `resume_from` if given
    (and a final evaluation if max_steps ended the run before the first epoch's); `callbacks` (TrainerCallback)
    come after the workshop's own. Returns (TrainOutput, step log callback, wall seconds since the sampler
    started).

    Raises:
        WorkshopError: the GPU ran out of memory (memory.csv and train_log.csv show how far it got).
        RunPreempted: SIGTERM or SIGUSR1 reached a rank; every rank stopped at the same step boundary after
            the Trainer saved a checkpoint there.
    """
    try:
        steps = _step_log_callback(out / "train_log.csv", mem.t0)
        stop = _stop_callback(out / rundir.STOP_FILE)
        for callback in (steps, stop, _phase_callback(mem), _evaluate_before_save_callback(), *callbacks):
            trainer.add_callback(callback)
        rundir.StopRequest.training = True
        try:
            train_out = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        finally:
            rundir.StopRequest.training = False
        if stop.signum and trainer.state.global_step < trainer.state.max_steps:
            raise rundir.RunPreempted(stop.signum)
        if not any("eval_loss" in h for h in trainer.state.log_history):
            trainer.evaluate()
    except torch.cuda.OutOfMemoryError as e:
        raise WorkshopError(f"The GPU ran out of memory during {experiment} ({e}). memory.csv and "
                            "train_log.csv in the output directory show how far it got.",
                            "lower --max-tokens-per-micro-batch or --micro-batch-size (and raise "
                            "--gradient-accumulation-steps to keep the global batch), turn on "
                            "--activation-checkpointing, or use CPU offload (stage2_offload, stage3_offload).") from e
    return train_out, steps, time.perf_counter() - mem.t0


def _phase_callback(mem: MemorySampler):
    """A TrainerCallback marking the memory phases on `mem`: training begins (after model and engine set-up),
    the first optimizer step of this train() call has ended (the model states kept between steps), training
    ends."""
    from transformers import TrainerCallback

    class Phases(TrainerCallback):
        first = True

        def on_train_begin(self, args, state, control, **kw):
            mem.mark("train_begin")

        def on_step_end(self, args, state, control, **kw):
            if self.first:
                mem.mark("states")
                self.first = False

        def on_train_end(self, args, state, control, **kw):
            mem.mark("train_end")

    return Phases()


def record(cfg: RunConfig, exp: Experiment, trainer, train_out, mem: MemorySampler, steps, wall: float, info: dict,
           estimate: dict, train_ds, train_stats, eval_stats, world_size: int) -> dict:
    """The results of a finished run, every rank's memory gathered (a collective: every rank calls it).
    MFU is computed from the steady-state tokens/s (`metrics.steady_state`)."""
    rank, local_rank, _ = env.world()
    history = trainer.state.log_history
    evals = [h for h in history if "eval_loss" in h]
    m = train_out.metrics  # of this Trainer.train() call: after a resume, the steps since the checkpoint
    tokens_per_s = sum(steps.step_tokens) / m["train_runtime"]
    # Every step is logged (logging_steps=1) and a resumed run's log history comes back with its checkpoint:
    # their mean is the whole run's train loss (the Trainer's own covers the steps since the resume only).
    step_losses = [h["loss"] for h in history if "loss" in h]
    micro_batches = _micro_batches(cfg, train_ds)
    per_epoch = metrics.steps_per_epoch(micro_batches, cfg.gradient_accumulation_steps, world_size)
    micro = trainer.args.per_device_train_batch_size  # `trainer_micro_batch`, as ds_config.json has it
    global_batch = (len(train_ds) / per_epoch if cfg.batching == "token_budget"  # the mean sequences per step
                    else micro * cfg.gradient_accumulation_steps * world_size)
    steady = metrics.steady_state(steps.step_times, steps.step_tokens, global_batch)
    mfu, hfu = run_mfu(cfg, info, train_stats, steady["steady_train_tokens_per_second"], world_size)
    warm_end = steps.step_ends[steady["warmup_steps"] - 1] if steady["warmup_steps"] else 0.0
    mine = mem.summary()
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()  # SLURM's node name where there is one
    return asdict(RunResults(
        experiment=cfg.experiment, recipe=cfg.recipe, model=f"{cfg.model} (tiny)" if cfg.tiny else cfg.model,
        tiny=cfg.tiny, random_weights=cfg.random_weights or cfg.tiny, zero_stage=exp.zero_stage, offload_optimizer=exp.offload_optimizer,
        offload_param=exp.offload_param, precision=cfg.precision, attn_implementation=info["attn_implementation"],
        loss_on=cfg.loss_on, padding=cfg.padding, world_size=world_size,
        micro_batch_size_per_gpu=micro, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        global_batch_size=micro * cfg.gradient_accumulation_steps * world_size,  # = ds_config's train_batch_size
        tokens_per_step=round(train_stats.tokens / per_epoch),
        epochs=cfg.epochs if not cfg.max_steps else round(trainer.state.epoch, 3), max_steps=cfg.max_steps,
        steps_per_epoch=per_epoch,
        global_steps=trainer.state.global_step, train_loss=round(sum(step_losses) / len(step_losses), 4),
        train_loss_per_epoch=metrics.per_epoch([h for h in history if "loss" in h], "loss"),
        eval_loss=[round(h["eval_loss"], 4) for h in evals],
        train_samples_per_second=round(m["train_samples_per_second"], 2),
        eval_samples_per_second=round(evals[-1]["eval_samples_per_second"], 2),
        train_tokens_per_second=round(tokens_per_s, 1), **steady,
        mfu=round(mfu, 4) if mfu is not None else None, hfu=round(hfu, 4) if hfu is not None else None,
        gpu_util_pct=memory.mean_gpu_util(mem.rows, warm_end, steps.step_ends[-1] if steps.step_ends else 0.0),
        num_params=info["num_params"],
        **{k: mine[k] for k in PHASE_KEYS},  # rank 0's; every rank's in per_rank_memory
        per_rank_memory=_gather_per_rank(mine | {"rank": rank, "local_rank": local_rank, "host": host}),
        **estimate, data_stats={"train": train_stats.as_dict(), "eval": eval_stats.as_dict()},
        device=env.device_name(), versions=env.versions(), wall_seconds=round(wall, 1),
        train_runtime_seconds=round(m["train_runtime"], 1), tokenizer=info["tokenizer"], output_dir=cfg.output_dir,
        config=asdict(cfg),
        nvme_swap_mib=nvme_swap_mib(cfg) if exp.offloads_to_nvme else None,
        gpu_total_mib=memory.gpu_total_mib(local_rank), gpu_memory_fraction=env.gpu_memory_fraction(),
        world_size_changes=json.loads(changes.read_text()) if (changes := Path(cfg.output_dir)
                                                                / checkpoint.WORLD_SIZE_CHANGES).is_file() else []))


PHASE_KEYS = ("gpu_allocated_at_start_mib", "setup_seconds", "train_begin_s", "train_end_s", "gpu_states_allocated_mib", "host_states_rss_mib",
              "gpu_peak_allocated_mib", "gpu_peak_reserved_mib", "gpu_peak_mib", "gpu_mean_mib", "gpu_min_mib",
              "host_peak_rss_mib")


def apply_speed_levers(net, cfg: RunConfig) -> None:
    """The recipe's changes to the model itself, in place: logits only where labelled, compiled blocks."""
    if cfg.logits_on == "labelled":
        compute_logits_where_labelled(net)
    if cfg.torch_compile:
        compile_layers(net)


def run_mfu(cfg: RunConfig, info: dict, stats, tokens_per_second: float | None,
            world_size: int) -> tuple[float | None, float | None]:
    """(MFU, HFU) of a run (`metrics.mfu`) from its steady tokens/s, the model's `info` and the data's
    `DataStats`: mean sequence length, and the share of positions whose logits the run computes (all, or the
    labelled). HFU counts the forward pass activation checkpointing recomputes (`metrics.recompute_flops_per_token`);
    without checkpointing it equals MFU. (None, None) where the GPU's peak is unknown (a CPU)."""
    flops, hardware = metrics.run_flops_per_token(
        info["num_params"], info["num_layers"], info["attention_width"], info["lm_head_params"], stats.tokens,
        stats.used, stats.labelled_tokens, cfg.logits_on == "labelled", cfg.activation_checkpointing)
    mfu = metrics.mfu(tokens_per_second, flops, env.peak_flops(), world_size)
    return mfu, (mfu * hardware / flops if mfu is not None else None)


def token_budget_batches(cfg: RunConfig, train_ds) -> TokenBudgetBatchSampler | None:
    """The run's token-budget sampler, built with its seed (what the training loop iterates), or None when
    `cfg.batching` is not "token_budget"."""
    if cfg.batching != "token_budget":
        return None
    return TokenBudgetBatchSampler.for_dataset(train_ds, cfg.max_tokens_per_micro_batch, cfg.seed)


def trainer_micro_batch(cfg: RunConfig, batches: TokenBudgetBatchSampler | None) -> int:
    """Sequences per micro-batch as the Trainer and DeepSpeed count them (per_device_train_batch_size,
    ds_config's train_micro_batch_size_per_gpu): the recipe's, or with token-budget batching (`batches`, from
    `token_budget_batches`) the mean of the micro-batches, rounded, which vary in size. DeepSpeed uses it only
    for its own bookkeeping (train_batch_size = micro x accumulation x world_size) and the Trainer for
    samples/s; the batches are the sampler's."""
    if batches is None:
        return cfg.train_micro_batch_size_per_gpu
    return max(1, round(batches.mean_batch_size))


def _micro_batches(cfg: RunConfig, train_ds) -> int:
    """Micro-batches in one pass over the training set, all ranks together."""
    batches = token_budget_batches(cfg, train_ds)
    return len(batches) if batches is not None else -(-len(train_ds) // cfg.train_micro_batch_size_per_gpu)


def _step_log_callback(path: Path, t0: float):
    """A TrainerCallback appending every Trainer log to a CSV (rank 0): each optimizer step's loss, learning
    rate, gradient norm, its time in seconds (`step_time_s`: from the previous step's end, or from the end of
    an evaluation or a checkpoint, to this step's end) and its non-padding tokens, all ranks; each epoch's
    eval loss. `time_s` counts from `t0`, the memory sampler's start, so the two CSVs share one clock. A run
    resumed at step N keeps the file's rows up to N and appends. The callback keeps `step_times`,
    `step_tokens` and `step_ends` (this process's steps) for the steady-state figures."""
    from transformers import TrainerCallback

    fields = ["step", "epoch", "time_s", "loss", "eval_loss", "learning_rate", "grad_norm", "step_time_s",
              "tokens", "num_input_tokens_seen"]

    class StepLog(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.last, self.seen = time.perf_counter(), state.num_input_tokens_seen
            self.step_times, self.step_tokens, self.step_ends = [], [], []
            if state.is_world_process_zero:
                kept = []
                if state.global_step and path.is_file():  # resumed: the rows up to the checkpoint's step
                    with path.open(newline="") as f:
                        kept = [r for r in csv.DictReader(f) if int(r["step"]) <= state.global_step]
                self.f = path.open("w", newline="")
                self.w = csv.DictWriter(self.f, fields, extrasaction="ignore")
                self.w.writeheader()
                self.w.writerows(kept)

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            self.step_times.append(now - self.last)
            self.step_tokens.append(state.num_input_tokens_seen - self.seen)
            self.step_ends.append(now - t0)
            self.last, self.seen = now, state.num_input_tokens_seen

        def on_evaluate(self, args, state, control, **kw):
            self.last = time.perf_counter()  # the next step is timed from here: evaluation is not a step

        on_save = on_evaluate  # nor is writing a checkpoint

        def on_log(self, args, state, control, logs=None, **kw):
            if not (state.is_world_process_zero and logs and ("loss" in logs or "eval_loss" in logs)):
                return
            row = logs | {"step": state.global_step, "time_s": round(time.perf_counter() - t0, 3)}
            if "loss" in logs and self.step_times:
                row |= {"step_time_s": round(self.step_times[-1], 4), "tokens": self.step_tokens[-1]}
            self.w.writerow(row)
            self.f.flush()

        def on_train_end(self, args, state, control, **kw):
            if state.is_world_process_zero:
                self.f.close()

    return StepLog()


def _stop_callback(stop_file: Path):
    """A TrainerCallback that, at every optimizer step's end, asks all ranks whether one received SIGTERM or
    SIGUSR1 (`rundir.StopRequest`) or sees `stop_file` (taken as SIGUSR1): a max over ranks, so they stop at
    the same step whichever rank was asked. If so the Trainer saves a checkpoint there and stops. `signum`
    keeps the signal."""
    import signal

    import torch.distributed as dist
    from transformers import TrainerCallback

    class StopAtStepBoundary(TrainerCallback):
        signum = None

        def on_step_end(self, args, state, control, **kw):
            asked = int(rundir.StopRequest.signum or (signal.SIGUSR1 if stop_file.exists() else 0))
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                asked_ = torch.tensor([asked], device=args.device)  # a world of one needs no GPU round trip
                dist.all_reduce(asked_, op=dist.ReduceOp.MAX)
                asked = int(asked_.item())
            if asked:
                self.signum = asked
                control.should_save = control.should_training_stop = True

        def on_epoch_end(self, args, state, control, **kw):
            # Stopped mid-epoch, the Trainer would evaluate the unfinished epoch before the checkpoint: that
            # epoch's evaluation comes when the resumed run finishes it, so an interrupted run's evaluations
            # are those of an uninterrupted one.
            if self.signum and abs(state.epoch - round(state.epoch)) > 1e-6:
                control.should_evaluate = False

    return StopAtStepBoundary()


def _evaluate_before_save_callback():
    """A TrainerCallback that makes each epoch's evaluation at the end of the epoch's last optimizer step (or
    of the run's last, when max_steps ends it mid-epoch) instead of at the epoch's end, so that a checkpoint of
    that step holds the evaluation in its log history (trainer_state.json) and a run resumed from it never
    skips it. The Trainer evaluates before it saves within one step's end (`_maybe_log_save_evaluate`), but
    by itself it evaluates at the epoch's end (`DefaultFlowCallback.on_epoch_end`), after the checkpoint that
    save_strategy "steps" or a stop at the step boundary wrote at the step's end. The epoch's end then neither
    evaluates again nor writes the checkpoint of the same step a second time."""
    from transformers import TrainerCallback

    class EvaluateBeforeSave(TrainerCallback):
        evaluated = saved = None  # the global step of this run's last evaluation, last checkpoint

        def on_step_end(self, args, state, control, **kw):
            if abs(state.epoch - round(state.epoch)) < 1e-6 or state.global_step >= state.max_steps:
                control.should_evaluate = True

        def on_evaluate(self, args, state, control, **kw):
            self.evaluated = state.global_step

        def on_save(self, args, state, control, **kw):
            self.saved = state.global_step

        def on_epoch_end(self, args, state, control, **kw):
            if self.evaluated == state.global_step:
                control.should_evaluate = False
            if self.saved == state.global_step:
                control.should_save = False

    return EvaluateBeforeSave()


def _gather_per_rank(summary: dict) -> list[dict]:
    """Every rank's memory summary, in rank order (all_gather_object; just [summary] in a world of one)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [summary]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, summary)
    return out


def _release_zero3_globals() -> None:
    """Drop the two module-level references through which DeepSpeed's ZeRO-3 (0.19.8) keeps a finished run's
    model, and with it the optimizer's fp32 partitions, alive after `engine.destroy()`: the top module that
    `DeepSpeedZeRoOffload` pushes on `parameter_offload.FWD_MODULE_STACK` and never pops, and the
    `functools.lru_cache` on `PartitionedParameterCoordinator.__params_to_release`, whose keys are the
    coordinator and its submodules. Without this, a ZeRO-3 run of Qwen3-0.6B left its fp32 master weights and
    Adam moments allocated on the GPU for every later run in the same process (docs/h100/course/README.md)."""
    try:
        from deepspeed.runtime.zero import parameter_offload
        from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator
    except ImportError:
        return
    parameter_offload.FWD_MODULE_STACK.clear()
    fn = vars(PartitionedParameterCoordinator).get("_PartitionedParameterCoordinator__params_to_release")
    cells = getattr(fn, "__closure__", None) or ()  # the lru_cache sits under DeepSpeed's NVTX wrapper
    for f in (fn, *(c.cell_contents for c in cells)):
        if hasattr(f, "cache_clear"):
            f.cache_clear()


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
        # set by accelerate's Accelerator for a DeepSpeed run and never unset: a later Trainer in this process
        # (a baseline run, an evaluation) would build a DeepSpeed engine from it
        os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
        torch._dynamo.reset()  # compiled blocks' caches hold the model (torch_compile)
        _release_zero3_globals()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
