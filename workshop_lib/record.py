"""What a finished run records: its results.json fields (`results.RunResults`), gathered from the stages'
`train.Run` (introduced in `01_baseline`; `run_experiment` calls `record` after training, on every rank).

The figures: losses per step and per evaluation, throughput over the run and in its steady state
(`metrics.steady_state`), MFU and HFU (`run_mfu`), memory by phase (`PHASE_KEYS`, rank 0's, and every rank's in
per_rank_memory), DeepSpeed's model-states estimate (`preflight.recorded_states`), the settings and versions."""

from __future__ import annotations

import os
import socket
from dataclasses import asdict

from . import env, memory, metrics
from .config import RunConfig
from .results import RunResults
from .units import ceil_div

# `memory.MemorySampler.summary`'s figures that results.json takes from rank 0
PHASE_KEYS = (
    "gpu_allocated_at_start_mib",
    "setup_seconds",
    "train_begin_s",
    "train_end_s",
    "gpu_states_allocated_mib",
    "host_states_rss_mib",
    "gpu_peak_allocated_mib",
    "gpu_peak_reserved_mib",
    "gpu_peak_mib",
    "gpu_mean_mib",
    "gpu_min_mib",
    "host_peak_rss_mib",
)


def record(run) -> dict:
    """The results of a finished `train.Run` (a `RunResults` as a dict, also set as `run.results`), every rank's
    memory gathered (a collective: every rank calls it). MFU is computed from the steady-state tokens/s
    (`metrics.steady_state`)."""
    cfg, exp, trainer, mem, steps, info = run.cfg, run.exp, run.trainer, run.mem, run.steps, run.info
    train_ds, train_stats, world_size = run.train_ds, run.train_stats, run.world_size
    rank, local_rank = run.rank, run.local_rank
    history = trainer.state.log_history
    evals = [h for h in history if "eval_loss" in h]
    m = run.train_out.metrics  # of this Trainer.train() call: after a resume, the steps since the checkpoint
    tokens_per_s = sum(steps.step_tokens) / m["train_runtime"]
    # Every step is logged (logging_steps 1; with N, each log the mean of N steps) and a resumed run's log history
    # comes back with its checkpoint: their mean is the whole run's train loss (the Trainer's own covers the steps
    # since the resume only).
    step_losses = [h["loss"] for h in history if "loss" in h]
    # micro-batches in one pass over the training set, all ranks together: the token-budget sampler's (the
    # same batches every epoch), else the questions over the micro-batch size, rounded up
    micro_batches = (
        len(run.batches) if run.batches is not None else ceil_div(len(train_ds), cfg.train_micro_batch_size_per_gpu)
    )
    per_epoch = metrics.steps_per_epoch(micro_batches, cfg.gradient_accumulation_steps, world_size)
    micro = trainer.args.per_device_train_batch_size  # `train.trainer_micro_batch`, as ds_config.json has it
    global_batch = (
        len(train_ds) / per_epoch
        if cfg.batching == "token_budget"  # the mean sequences per step
        else micro * cfg.gradient_accumulation_steps * world_size
    )
    steady = metrics.steady_state(steps.step_times, steps.step_tokens, global_batch, steps.step_compiles)
    mfu, hfu = run_mfu(cfg, info, train_stats, steady["steady_train_tokens_per_second"], world_size)
    warm_end = steps.step_ends[steady["warmup_steps"] - 1] if steady["warmup_steps"] else 0.0
    mine = mem.summary()
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()  # SLURM's node name where there is one
    run.results = asdict(
        RunResults(
            experiment=cfg.experiment,
            recipe=cfg.recipe,
            model=f"{cfg.model} (tiny)" if cfg.tiny else cfg.model,
            tiny=cfg.tiny,
            random_weights=cfg.random_weights or cfg.tiny,
            zero_stage=exp.zero_stage,
            offload_optimizer=exp.offload_optimizer,
            offload_param=exp.offload_param,
            precision=cfg.precision,
            attn_implementation=info["attn_implementation"],
            loss_on=cfg.loss_on,
            padding=cfg.padding,
            world_size=world_size,
            micro_batch_size_per_gpu=micro,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            global_batch_size=micro * cfg.gradient_accumulation_steps * world_size,  # = ds_config's train_batch_size
            tokens_per_step=round(train_stats.tokens / per_epoch),
            epochs=cfg.epochs if not cfg.max_steps else round(trainer.state.epoch, 3),
            max_steps=cfg.max_steps,
            steps_per_epoch=per_epoch,
            global_steps=trainer.state.global_step,
            train_loss=round(sum(step_losses) / len(step_losses), 4),
            eval_loss=[round(h["eval_loss"], 4) for h in evals],
            train_samples_per_second=round(m["train_samples_per_second"], 2),
            eval_samples_per_second=round(evals[-1]["eval_samples_per_second"], 2),
            train_tokens_per_second=round(tokens_per_s, 1),
            **steady,
            mfu=round(mfu, 4) if mfu is not None else None,
            hfu=round(hfu, 4) if hfu is not None else None,
            gpu_util_pct=memory.mean_gpu_util(mem.rows, warm_end, steps.step_ends[-1] if steps.step_ends else 0.0),
            num_params=info["num_params"],
            **{k: mine[k] for k in PHASE_KEYS},  # rank 0's; every rank's in per_rank_memory
            per_rank_memory=env.gather(mine | {"rank": rank, "local_rank": local_rank, "host": host}),
            **run.estimate,
            data_stats={"train": train_stats.as_dict(), "eval": run.eval_stats.as_dict()},
            device=env.device_name(),
            versions=env.versions(),
            wall_seconds=round(run.wall, 1),
            train_runtime_seconds=round(m["train_runtime"], 1),
            tokenizer=info["tokenizer"],
            output_dir=cfg.output_dir,
            config=asdict(cfg),
            gpu_total_mib=memory.gpu_total_mib(local_rank),
            gpu_memory_fraction=env.gpu_memory_fraction(),
        )
    )
    return run.results


def run_mfu(
    cfg: RunConfig, info: dict, stats, tokens_per_second: float | None, world_size: int
) -> tuple[float | None, float | None]:
    """(MFU, HFU) of a run (`metrics.mfu`) from its steady tokens/s, the model's `info` and the data's
    `DataStats`: mean sequence length, and the share of positions whose logits the run computes (all, or the
    labelled). HFU counts the forward pass activation checkpointing recomputes (`metrics.recompute_flops_per_token`);
    without checkpointing it equals MFU. (None, None) where the GPU's peak is unknown (a CPU)."""
    flops, hardware = metrics.run_flops_per_token(
        info["num_params"],
        info["num_layers"],
        info["attention_width"],
        info["lm_head_params"],
        stats.tokens,
        stats.used,
        stats.labelled_tokens,
        cfg.logits_on == "labelled",
        cfg.activation_checkpointing,
    )
    mfu = metrics.mfu(tokens_per_second, flops, env.peak_flops(), world_size)
    return mfu, (mfu * hardware / flops if mfu is not None else None)
