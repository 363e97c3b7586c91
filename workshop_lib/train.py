"""One experiment, end to end (introduced in `01_baseline`; every later notebook and `workshop run` call
`run_experiment`).

A run is a short sequence of named stages that share one `Run` (torchtune's recipe), each a function here or
of its concept's module:

    resolve    config.resolve, model.check_model_source, rundir.check  settings filled in and validated
    machine    preflight.check_machine                                 GPU, DeepSpeed, ops, precision, ranks
    data       load_data, preflight.check_resources                    SQuAD rows; the states fit the GPU?
    model      load_model                                              model, tokenizer, tokenised data
    engine     claim, build_trainer                                    ops built, directory claimed; the Trainer
    train      checkpoint.resume_point (--resume), train (callbacks)   Trainer.train under the memory sampler
    save       save_model                                              OUTPUT_DIR/model (from_pretrained)
    record     record.record, rundir.finish                            results.json, atomically
    cleanup    mark_ended (on an error), cleanup (teardown.release)    the next run in this process starts clean

Nothing is written before `engine`: bad input stops the run with a `WorkshopError` and leaves the output
directory as it was. Signals stop it as `rundir` says; `--resume` continues it from its last complete checkpoint,
on the same number of ranks (`checkpoint.check_same_run` refuses another).

The same function runs in a notebook kernel (a world of one: `teardown.restored_world`), from `workshop run`, and
under a launcher (torchrun, deepspeed, srun), where each rank calls it and rank 0 writes the results."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed

from . import checkpoint, comms, env, preflight, rundir, teardown
from .callbacks import EvaluateBeforeSave, MicroBatches, Phases, StepLog, StopAtStepBoundary
from .config import RunConfig, resolve
from .data import DataStats, TokenBudgetBatchSampler, load_squad, make_collator, tokenize_squad
from .ds_config import EXPERIMENTS, Experiment, apply_overrides, build_ds_config, build_fsdp_config
from .errors import WorkshopError
from .evaluation import EVAL_BATCH_SIZE, evaluate_squad, score_model
from .memory import MemorySampler
from .model import (
    check_model_fits_data,
    check_model_source,
    compile_layers,
    compute_logits_where_labelled,
    load_model_and_tokenizer,
)
from .record import record


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

    Writes into the output directory (`rundir.RUN_OUTPUTS`): results.json (rank 0, last, atomically), memory.csv
    (MiB; memory.rankN.csv), train_log.csv (per step and evaluation), micro_batches.csv (`MicroBatches`),
    ds_config.json (fsdp_config.json with FSDP2), comms.json (`comms`), run_config.json (for --resume), checkpoints/
    (`checkpoint`), model/ (the fine-tuned model), and RUNNING while the run is in progress.

    Raises:
        WorkshopError: bad settings or data, a model that cannot be had, a machine that cannot run the
            experiment, a GPU too small, an output directory holding a run, a --resume whose checkpoints are
            all damaged (nothing is written in these cases), or an out-of-memory error during training (the
            logs so far are kept).
        RunInterrupted: SIGINT, or a signal before training started; the message names the complete
            checkpoints kept and the command that resumes (`checkpoint.kept`).
        RunPreempted: SIGTERM or SIGUSR1 during training, after a checkpoint; the message is the same."""
    cfg = config if isinstance(config, RunConfig) else RunConfig(config, **settings)
    asked = cfg  # as given, before `resolve`: the settings an interrupted run's message repeats
    env.quiet_libraries()
    checkpoint.quiet_resume_notes()
    # what an earlier run in this process (a notebook kernel) left in reference cycles: GiB, until collected
    teardown.free_memory()
    # the rank variables a world of one sets (`env.ensure_distributed_env`) go when the run ends
    with teardown.restored_world(), rundir.interruptible() as stop:
        cfg = resolve(cfg)
        exp = EXPERIMENTS[cfg.experiment]
        check_model_source(cfg.model, cfg.tiny, cfg.random_weights)
        rundir.check(cfg.output_dir, cfg.overwrite, cfg.resume)
        cfg = preflight.check_machine(cfg, exp)
        preflight.check_resume(cfg)
        return _run(Run(cfg, exp, *env.world(), callbacks, asked, stop))


@dataclass
class Run:
    """One run's state, which its stages share (torchtune's recipe): `run_experiment` makes it with the resolved
    settings and this process's rank; each stage fills in what it makes (None or empty until then), the next
    reads it."""

    cfg: RunConfig  # resolved (`config.resolve`, `preflight.check_machine`, `preflight.check_resume`)
    exp: Experiment
    rank: int = 0  # the world: `env.world()`, read once
    local_rank: int = 0
    world_size: int = 1
    callbacks: Sequence = ()  # the caller's TrainerCallbacks, after the workshop's own
    asked: RunConfig | None = None  # the settings as given, which a stopped run's command repeats
    stop: rundir.StopRequest = field(default_factory=rundir.StopRequest)  # `rundir.interruptible`'s, for the stages
    # load_data
    train_raw: Any = None  # SQuAD rows, a datasets.Dataset (`data.load_squad`)
    eval_raw: Any = None
    # load_model
    net: Any = None  # the model (transformers PreTrainedModel), on the CPU until the Trainer moves it
    tokenizer: Any = None
    info: dict = field(default_factory=dict)  # `model.load_model_and_tokenizer`'s: num_params, num_layers...
    scores_before: dict = field(default_factory=dict)  # EM/F1 before fine-tuning (--score-questions, rank 0)
    train_ds: Any = None  # tokenised (`data.tokenize_squad`)
    eval_ds: Any = None
    train_stats: DataStats | None = None
    eval_stats: DataStats | None = None
    estimate: dict = field(default_factory=dict)  # model-states estimate, MiB (`preflight.recorded_states`)
    # build_trainer and train
    resume_from: Path | None = None  # the checkpoint a --resume starts from
    batches: TokenBudgetBatchSampler | None = None  # token-budget batching's sampler; None: the Trainer's
    trainer: Any = None  # transformers Trainer
    mem: MemorySampler | None = None
    train_out: Any = None  # Trainer.train's TrainOutput
    steps: Any = None  # the step log callback (`callbacks.StepLog`): step times and tokens
    wall: float = 0.0  # seconds since the memory sampler started
    # record (`record.record`)
    results: dict = field(default_factory=dict)  # a `RunResults` as a dict

    @property
    def out(self) -> Path:
        """The output directory."""
        return Path(self.cfg.output_dir)


def _run(run: Run) -> dict:
    """The run's stages in order; raises as `run_experiment`. However it ends after claiming its directory, rank 0
    marks how (`mark_ended`); a stop by a signal is told with its step."""
    cfg, exp, rank, world_size, local_rank = run.cfg, run.exp, run.rank, run.world_size, run.local_rank
    try:  # data, then model: a bad file or a missing model stops here, before anything is written
        load_data(run)
        preflight.check_resources(cfg, exp, world_size, local_rank)
        load_model(run)
        claim(run)
    except (Exception, rundir.RunInterrupted) as e:
        run.stop.ending = True
        if run.stop.claimed:  # a failure in the barrier after rank 0 claimed the directory
            mark_ended(run, e)
        raise
    try:
        if cfg.resume:
            run.resume_from = checkpoint.resume_point(run.out, rank)
        # sampled from before the Trainer is built: the set-up phase is the same whoever (Trainer, DeepSpeed) does it
        with MemorySampler(run.out / "memory.csv" if rank == 0 else run.out / f"memory.rank{rank}.csv") as run.mem:
            build_trainer(run)
            train(run)
        if cfg.comms_logger:  # every rank's collectives into comms.json (a gather: every rank)
            comms.write(run.out, run.trainer)
        if cfg.save_model:
            save_model(run)
        record(run)
        if cfg.score_questions and rank == 0:
            score_after_training(run)
        if rank == 0:
            rundir.finish(run.out, run.results)
    except BaseException as e:
        run.stop.ending = True  # torchrun's SIGTERM to every rank once one failed waits: this error is told
        step = mark_ended(run, e)
        if isinstance(e, rundir.RunInterrupted):
            raise e.at_step(step, checkpoint.kept(cfg.output_dir, run.asked)).with_traceback(e.__traceback__) from None
        raise
    finally:
        cleanup(run)
    return run.results


def load_data(run: Run) -> None:
    """SQuAD's training and evaluation rows (`data.load_squad`), as many as the settings ask, into `run`.

    Raises:
        WorkshopError: a missing or malformed file, or fewer questions than asked."""
    cfg = run.cfg
    run.train_raw = load_squad("train", cfg.num_train_samples, cfg.train_file, verbose=run.rank == 0)
    run.eval_raw = load_squad("validation", cfg.num_eval_samples, cfg.eval_file, verbose=run.rank == 0)


def load_model(run: Run) -> None:
    """The model and tokenizer (the same random init in every experiment: seeded first), the recipe's changes
    to the model (`apply_speed_levers`), the tokenised data and DeepSpeed's estimate, into `run`; with
    --score-questions, rank 0 scores the model as loaded (`score_before_training`).

    Raises:
        WorkshopError: a model that cannot be had, or whose context is shorter than --max-length."""
    cfg = run.cfg
    set_seed(cfg.seed)
    attn = None if cfg.attn_implementation == "default" else cfg.attn_implementation
    run.net, run.tokenizer, run.info = load_model_and_tokenizer(
        cfg.model, tiny=cfg.tiny, random_weights=cfg.random_weights, attn_implementation=attn
    )
    check_model_fits_data(run.net, run.tokenizer, cfg.max_length, cfg.model)
    if cfg.score_questions and run.rank == 0:
        run.scores_before = score_before_training(run.net, run.tokenizer, cfg)
    apply_speed_levers(run.net, cfg)
    run.train_ds, run.train_stats = tokenize_squad(run.train_raw, run.tokenizer, cfg.max_length, cfg.loss_on)
    run.eval_ds, run.eval_stats = tokenize_squad(run.eval_raw, run.tokenizer, cfg.max_length, cfg.loss_on)
    run.estimate = preflight.recorded_states(run.info, run.exp, run.world_size)


def claim(run: Run) -> None:
    """Build DeepSpeed's ops (JIT, saying so: one rank per node first, the others then load them), then rank 0
    claims the output directory (`rundir.claim`) and writes run_config.json, while the others wait: the first
    stage that writes anything."""
    if run.exp.deepspeed:
        ops = env.deepspeed_ops(run.exp.offload_optimizer, run.world_size)
        if run.local_rank == 0:
            env.build_deepspeed_ops(ops)
        env.barrier()
        if run.local_rank != 0:
            env.build_deepspeed_ops(ops)
    env.barrier()  # every rank validated the directory before rank 0 changes it
    if run.rank == 0:
        rundir.claim(run.out, run.cfg.overwrite, run.cfg.resume)
        checkpoint.write_run_config(run.out, asdict(run.cfg), run.world_size)
    run.stop.claimed = True
    env.barrier()


def score_after_training(run: Run) -> None:
    """SQuAD EM and F1 of the fine-tuned model in OUTPUT_DIR/model (`evaluation.evaluate_squad`), added to
    `run.results` beside those before training."""
    cfg, before = run.cfg, run.scores_before
    after = evaluate_squad(run.out, run.out, cfg.score_questions, eval_file=cfg.eval_file, max_length=cfg.max_length)
    run.results |= {"em": after["em"], "f1": after["f1"], "em_before": before["em"], "f1_before": before["f1"]}


def mark_ended(run: Run, e: BaseException) -> int:
    """Rank 0 marks the output directory with how the run ended (`rundir.mark_ended`): preempted, interrupted,
    failed. Returns the last optimizer step, on every rank."""
    out = run.out
    step = run.trainer.state.global_step if run.trainer is not None else 0
    if run.rank == 0:
        if isinstance(e, rundir.RunPreempted):
            rundir.mark_ended(out, status="preempted", signal=e.signal, step=step)
        elif isinstance(e, rundir.RunInterrupted):
            rundir.mark_ended(out, status="interrupted", signal=e.signal, step=step)
        else:
            rundir.mark_ended(out, status="failed", step=step, error=f"{type(e).__name__}: {e}")
    return step


def cleanup(run: Run) -> None:
    """However the run ended: its Trainer released for the next run in this process (`teardown.release`)."""
    if run.trainer is not None:
        teardown.release(run.trainer)


def score_before_training(net, tokenizer, cfg: RunConfig) -> dict:
    """SQuAD EM and F1 of the model as loaded, before fine-tuning (`evaluation.score_model` on
    `cfg.score_questions` dev questions; on the GPU where there is one, then back to the CPU)."""
    if torch.cuda.is_available():
        net.to("cuda")
    rows = load_squad("validation", cfg.score_questions, cfg.eval_file, verbose=False, count_option="--score-questions")
    scores = score_model(net.eval(), tokenizer, rows, max_length=cfg.max_length)[0]
    net.to("cpu").train()
    print(
        f"Before fine-tuning: exact match {scores['em']:.2f}, F1 {scores['f1']:.2f} on {scores['num_questions']} "
        "SQuAD questions."
    )
    return scores


def save_model(run: Run) -> Path:
    """Write the fine-tuned model to OUTPUT_DIR/model: model.safetensors, config.json,
    generation_config.json and the tokenizer, which `AutoModelForCausalLM.from_pretrained` and
    `AutoTokenizer.from_pretrained` load (Trainer.save_model; under ZeRO-3 the engine gathers the partitioned
    weights first, `stage3_gather_16bit_weights_on_model_save`: a collective, so every rank calls this).
    Written to a temporary directory and renamed by rank 0: model/ is whole or absent. Returns its path."""
    trainer, out, rank = run.trainer, run.out, run.rank
    final, tmp = out / "model", out / ".model.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    env.barrier()
    trainer.save_model(str(tmp))
    env.barrier()
    if rank == 0:
        (tmp / "training_args.bin").unlink(missing_ok=True)  # a pickle of TrainingArguments: not the model's
        rundir.readable_as_umask(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    return final


def _activation_checkpointing(on: bool) -> dict:
    """TrainingArguments' switch for it: `activation_checkpointing` where TrainingArguments has it (newer
    transformers), else `gradient_checkpointing`, which the newer releases deprecate; nothing when off."""
    if not on:
        return {}
    new = "activation_checkpointing" in TrainingArguments.__dataclass_fields__
    return {"activation_checkpointing" if new else "gradient_checkpointing": True}


def build_trainer(run: Run):
    """The HF Trainer for this run, with DeepSpeed (config written to ds_config.json) for ZeRO experiments, FSDP2
    (`ds_config.build_fsdp_config`, written to fsdp_config.json) for an FSDP one, and
    with token-budget batching its sampler (`token_budget_batches`); both set on `run` and the Trainer returned."""
    cfg, exp, net, out, world_size = run.cfg, run.exp, run.net, run.out, run.world_size
    ds_config, batches = None, token_budget_batches(cfg, run.train_ds, run.world_size)
    run.batches, micro = batches, trainer_micro_batch(cfg, batches)
    if exp.deepspeed:
        ds_config = build_ds_config(
            exp,
            cfg.ds_settings(
                train_micro_batch_size_per_gpu=micro,
                world_size=world_size,
                num_params=sum(p.numel() for p in net.parameters()),
            ),
        )
        if cfg.ds_config:  # --ds-config KEY=VALUE: set last, checked against DeepSpeed as config.resolve did
            ds_config = apply_overrides(ds_config, cfg.ds_config)
        if run.rank == 0:
            rundir.write_json_atomic(out / "ds_config.json", ds_config)
    sharding = {"deepspeed": ds_config, **_activation_checkpointing(cfg.activation_checkpointing)}
    if exp.fsdp:
        fsdp_config = build_fsdp_config(exp, net._no_split_modules, cfg.activation_checkpointing)
        sharding = {"fsdp": True, "fsdp_config": fsdp_config}
        if run.rank == 0:
            rundir.write_json_atomic(out / "fsdp_config.json", fsdp_config)
    args = TrainingArguments(
        output_dir=str(out / checkpoint.CHECKPOINTS),
        per_device_train_batch_size=micro,
        per_device_eval_batch_size=EVAL_BATCH_SIZE,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps or -1,
        eval_strategy="epoch",
        logging_steps=cfg.logging_steps,
        report_to="none",
        max_grad_norm=cfg.max_grad_norm,
        save_strategy=cfg.save_strategy,
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        prediction_loss_only=True,  # the eval loss is all the runs use; no logits kept
        bf16=cfg.precision == "bf16",
        fp16=cfg.precision == "fp16",
        use_cpu=not torch.cuda.is_available(),
        seed=cfg.seed,
        dataloader_num_workers=cfg.dataloader_num_workers,
        include_num_input_tokens_seen="non_padding",
        ddp_timeout=env.dist_timeout_s(),  # a dead rank fails, never hangs
        train_sampling_strategy="random" if cfg.batching == "token_budget" else cfg.batching,
        **sharding,
    )
    env.one_gpu_per_process(args)
    callbacks = [checkpoint.Manifest()]  # each checkpoint's manifest, last
    if batches is not None:
        callbacks.append(EpochOrder(batches))
    if exp.deepspeed or exp.fsdp:  # DeepSpeed's comms logger on (--comms-logger) or off, to the optimizer steps
        callbacks.append(comms.Window(cfg.comms_logger))
    run.trainer = WorkshopTrainer(
        model=net,
        args=args,
        train_dataset=run.train_ds,
        eval_dataset=run.eval_ds,
        callbacks=callbacks,
        data_collator=make_collator(
            run.tokenizer,
            cfg.padding,
            cfg.max_length,
            attention_mask=not cfg.drop_attention_mask,
            labelled_positions=cfg.logits_on == "labelled",
        ),
        processing_class=run.tokenizer,
        batches=batches,
    )
    return run.trainer


class WorkshopTrainer(Trainer):
    """The HF Trainer with the workshop's changes: `batches` (a `TokenBudgetBatchSampler`), training micro-batches
    sized in tokens, drawn from it (off unless asked for); FSDP on a CPU (`create_accelerator_and_postprocess`)."""

    def __init__(self, *args, batches: TokenBudgetBatchSampler | None = None, **kwargs):
        self.batches = batches
        super().__init__(*args, **kwargs)

    def create_accelerator_and_postprocess(self):
        # accelerate 1.15 keeps an FSDP plugin only in an accelerator's world (AcceleratorState: MULTI_GPU, ...) and
        # trains a CPU's (MULTI_CPU) with DDP, though torch's FSDP2 shards over gloo too: a CPU's world is taken
        # for a GPU's while accelerate makes its FSDP state, which then names the world FSDP, as on a GPU
        from accelerate import PartialState
        from accelerate.utils import DistributedType

        if self.args.fsdp and PartialState().distributed_type == DistributedType.MULTI_CPU:
            PartialState().distributed_type = DistributedType.MULTI_GPU
        super().create_accelerator_and_postprocess()

    def get_train_dataloader(self):
        if self.batches is None:
            return super().get_train_dataloader()
        return self.accelerator.prepare(
            DataLoader(
                self.train_dataset,
                batch_sampler=self.batches,
                collate_fn=self.data_collator,
                num_workers=self.args.dataloader_num_workers,
                pin_memory=self.args.dataloader_pin_memory,
            )
        )


class EpochOrder(TrainerCallback):
    """Each epoch's batch order of token-budget batching (`batches`, a `TokenBudgetBatchSampler`), also for an
    epoch resumed mid-way under several ranks, where the Trainer's own set_epoch does not reach the sampler
    (wrapped twice by accelerate)."""

    def __init__(self, batches: TokenBudgetBatchSampler):
        self.batches = batches

    def on_epoch_begin(self, args, state, control, **kw):
        self.batches.set_epoch(int(state.epoch or 0))  # state.epoch: e + steps done / steps per epoch


def train(run: Run) -> None:
    """Trainer.train() with each step timed and the memory phases marked on `run.mem` (`MemorySampler.mark`:
    train_begin, states after the first optimizer step, train_end), from the checkpoint `run.resume_from` if
    given (and a final evaluation if max_steps ended the run before the first epoch's); `run.callbacks`
    (TrainerCallback) come after the workshop's own (`callbacks`). Sets `run.train_out` (TrainOutput),
    `run.steps` (the step log callback) and `run.wall` (seconds since the sampler started).

    Raises:
        WorkshopError: the GPU ran out of memory (memory.csv and train_log.csv show how far it got).
        RunPreempted: SIGTERM or SIGUSR1 reached a rank; every rank stopped at the same step boundary after
            the Trainer saved a checkpoint there."""
    trainer, mem, out, resume_from = run.trainer, run.mem, run.out, run.resume_from
    try:
        steps = StepLog(out / "train_log.csv", mem.t0)
        stop = StopAtStepBoundary(out / rundir.STOP_FILE, run.stop)
        shapes = MicroBatches(out / ("micro_batches.csv" if run.rank == 0 else f"micro_batches.rank{run.rank}.csv"))
        for callback in (steps, stop, Phases(mem), EvaluateBeforeSave(), shapes, *run.callbacks):
            trainer.add_callback(callback)
        run.stop.training = True
        try:
            with checkpoint.weights_only_loads():  # a resume's DeepSpeed loads
                train_out = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        finally:
            run.stop.training = False
        if stop.signum and trainer.state.global_step < trainer.state.max_steps:
            raise rundir.RunPreempted(stop.signum)
        if not any("eval_loss" in h for h in trainer.state.log_history):
            trainer.evaluate()
    except torch.cuda.OutOfMemoryError as e:
        raise WorkshopError(
            f"The GPU ran out of memory during {run.cfg.experiment} ({e}). memory.csv and "
            "train_log.csv in the output directory show how far it got.",
            "lower --max-tokens-per-micro-batch or --micro-batch-size (and raise "
            "--gradient-accumulation-steps to keep the global batch), turn on "
            "--activation-checkpointing, or use CPU offload (stage2_offload, stage3_offload).",
        ) from e
    run.train_out, run.steps, run.wall = train_out, steps, time.perf_counter() - mem.t0


def apply_speed_levers(net, cfg: RunConfig) -> None:
    """The recipe's changes to the model itself, in place: logits only where labelled, compiled blocks. On a GPU,
    SDPA's flash kernel rather than its cuDNN one, which plans each new (sequences, length) shape on the host
    (about 90 ms a micro-batch for Qwen3-0.6B, and token-budget batches bring new shapes all run long)."""
    if torch.cuda.is_available():  # lab/findings/h100/new-shapes
        torch.backends.cuda.enable_cudnn_sdp(False)
    if cfg.logits_on == "labelled":
        compute_logits_where_labelled(net)
    if cfg.torch_compile:
        compile_layers(net)


def token_budget_batches(cfg: RunConfig, train_ds, world_size: int = 1) -> TokenBudgetBatchSampler | None:
    """The run's token-budget sampler, built with its seed for its micro-batches per step (`world_size` x
    accumulation: what the training loop iterates), or None when `cfg.batching` is not "token_budget"."""
    if cfg.batching != "token_budget":
        return None
    return TokenBudgetBatchSampler.for_dataset(
        train_ds, cfg.max_tokens_per_micro_batch, cfg.seed, world_size * cfg.gradient_accumulation_steps
    )


def trainer_micro_batch(cfg: RunConfig, batches: TokenBudgetBatchSampler | None) -> int:
    """Sequences per micro-batch as the Trainer and DeepSpeed count them (per_device_train_batch_size,
    ds_config's train_micro_batch_size_per_gpu): the recipe's, or with token-budget batching (`batches`, from
    `token_budget_batches`) the mean of the micro-batches, rounded, which vary in size. DeepSpeed uses it only
    for its own bookkeeping (train_batch_size = micro x accumulation x world_size) and the Trainer for
    samples/s; the batches are the sampler's."""
    if batches is None:
        return cfg.train_micro_batch_size_per_gpu
    return max(1, round(batches.mean_batch_size))
