"""What a run checks before it trains, so that it stops in seconds with the fix instead of minutes in (introduced
in `01_baseline`; the refusal of a model too large in `03c_models_that_do_not_fit`). `run_experiment` calls
`check_machine` and `check_resume` once the settings are resolved, and `check_resources` once the data is read;
all come before anything is written.

    check_machine      GPU, DeepSpeed and its ops, precision, attention, the ranks
    check_resume       with --resume: the same run on as many ranks, a complete checkpoint
    check_resources    the model states against the GPU's memory (`check_states_fit`, `fit`'s rule)

Will it fit? The preflight refuses only what the model states alone rule out: they are certain before a run
(`memory.estimate_model_states`). Activations and logits depend on the batch and can only be estimated (`fit.estimate`); a run
whose states fit but whose activations do not starts, and runs out of memory: notebook 03c starts one on purpose."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import asdict, replace

import torch

from . import checkpoint, env, fit
from .config import RunConfig, parse_run_args, resolve
from .ds_config import Experiment, experiment_named
from .errors import WorkshopError
from .memory import estimate_model_states
from .model import count_params
from .units import MiB


def check_machine(cfg: RunConfig, exp: Experiment) -> RunConfig:
    """Stop early, with the fix, when this machine cannot run the experiment; set up the ranks; return
    `cfg` with precision and attention resolved for this machine.

    Raises:
        WorkshopError: no GPU for a full-size model; DeepSpeed missing; a DeepSpeed op the experiment needs
            cannot be built here (a compiler and ninja; with a GPU the CUDA toolkit).
    """
    if not torch.cuda.is_available() and not (cfg.tiny or cfg.allow_cpu):
        raise WorkshopError(
            "No CUDA GPU is visible, and a full-size model on the CPU would take hours.",
            "add --tiny to run the tiny model on the CPU, or run on a GPU node "
            "(check `nvidia-smi` and CUDA_VISIBLE_DEVICES).",
        )
    if exp.deepspeed:
        env.sanitize_cuda_arch_list()
        try:  # here, not at the top: DeepSpeed is optional (the baseline runs without it), and reads
            import deepspeed  # TORCH_CUDA_ARCH_LIST, which the line above cleans first
        except ImportError as e:
            raise WorkshopError(
                f"DeepSpeed is not installed ({e}).",
                "pip install deepspeed (or `pip install -e .` in the workshop folder), or run "
                "the baseline experiment, which does not use DeepSpeed.",
            ) from e
        env.check_deepspeed_version(deepspeed.__version__)
        env.check_deepspeed_ops(env.deepspeed_ops(exp.offload_optimizer, env.world()[2]))
    if exp.deepspeed or exp.fsdp:  # both shard over a process group, of one without a launcher
        env.ensure_distributed_env()
    if torch.cuda.is_available():
        torch.cuda.set_device(env.world()[1])
    env.gpu_memory_fraction()  # WORKSHOP_GPU_MEMORY_FRACTION: checked everywhere, this GPU made to look smaller
    env.init_distributed()
    precision = env.pick_precision(cfg.precision)
    compile_ = cfg.torch_compile and torch.cuda.is_available()
    # off under ZeRO-3 unless asked: DeepSpeed's parameter-gathering hooks split every compiled block into pieces (the
    # lab benchmark's compile row, lab/findings/h100/bench); results.json's config records torch_compile false
    if compile_ and (exp.zero_stage or 0) >= 3 and not cfg.torch_compile_zero3:
        compile_ = False
    if exp.fsdp and env.world()[0] == 0:  # what differs from the ZeRO runs, said before anything starts
        print(
            f"{cfg.experiment}: PyTorch FSDP2 through the HF Trainer (fsdp_config.json), not DeepSpeed. Its checkpoints "
            "hold the whole model and optimizer states, gathered on rank 0 (pytorch_model_fsdp.bin, optimizer.bin, "
            "model.safetensors): --resume loads them on the same number of ranks, as with ZeRO, and `workshop export` "
            "has no partitions to join (checkpoint-N loads with from_pretrained)."
        )
    return replace(
        cfg,
        precision=precision,
        torch_compile=compile_,
        attn_implementation=env.pick_attention(cfg.attn_implementation, precision) or "default",
    )


def check_resume(cfg: RunConfig) -> None:
    """For --resume (nothing otherwise): the settings and the number of ranks are the run's own
    (`checkpoint.check_same_run`) and a complete checkpoint is left (`checkpoint.check_resumable`).

    Raises:
        WorkshopError: other settings or another number of ranks than the run's, or every checkpoint damaged."""
    if cfg.resume:
        checkpoint.check_same_run(cfg.output_dir, asdict(cfg), env.world()[2])
        checkpoint.check_resumable(cfg.output_dir)


def check_resources(cfg: RunConfig, exp: Experiment, world_size: int, local_rank: int) -> None:
    """Before a minute of building the model: will its states fit on this rank's GPU (`check_states_fit`; not for the
    tiny model, nor without a GPU)? Checked from the model's config alone (the meta device: seconds).

    Raises:
        WorkshopError: the GPU is too small, with both figures.
    """
    if not cfg.tiny and torch.cuda.is_available():
        counts = count_params(cfg.model, tiny=cfg.tiny)
        check_states_fit(cfg, exp, counts, world_size, gpu_memory_mib(local_rank))


def model_states(counts: dict, exp: Experiment, world_size: int) -> dict:
    """`memory.estimate_model_states` (DeepSpeed's estimators; `fit.estimate` takes its figure there too) for this
    experiment on `world_size` ranks, as many per node as this machine has GPUs (one without a GPU). `counts`:
    `model.count_params`'s. Returns memory.estimate_model_states's dict, MiB."""
    gpus_per_node = max(torch.cuda.device_count(), 1)
    return estimate_model_states(
        counts["num_params"],
        counts["largest_layer_params"],
        exp.states_stage,
        exp.offload_optimizer != "none",
        exp.offload_param != "none",
        num_gpus_per_node=min(world_size, gpus_per_node),
        num_nodes=max(1, world_size // gpus_per_node),
    )


def recorded_states(counts: dict, exp: Experiment, world_size: int) -> dict:
    """`model_states` as results.json records it: without a GPU every state it places lives in host memory,
    the GPU part None and the host part both."""
    estimate = model_states(counts, exp, world_size)
    if torch.cuda.is_available():
        return estimate
    return {
        "estimated_model_states_gpu_mib": None,
        "estimated_model_states_cpu_mib": round(
            estimate["estimated_model_states_gpu_mib"] + estimate["estimated_model_states_cpu_mib"], 1
        ),
        "estimator": f"{estimate['estimator']}, its GPU and CPU parts together (no GPU: host memory)",
    }


def gpu_memory_mib(local_rank: int) -> float:
    """The memory of torch's cuda:local_rank, MiB, times WORKSHOP_GPU_MEMORY_FRACTION where it is set."""
    return torch.cuda.get_device_properties(local_rank).total_memory / MiB * (env.gpu_memory_fraction() or 1)


def check_states_fit(cfg: RunConfig, exp: Experiment, counts: dict, world_size: int, gpu_mib: float) -> float:
    """Refuse a GPU of `gpu_mib` MiB whose memory the model states alone (`model_states`) would fill past
    1 - `fit.HEADROOM` (`fit.states_fit`; `fit.estimate` holds states + activations + logits to the same share).
    Activations are not counted: see the module's docstring.

    Returns: the model states per GPU, MiB. Raises: WorkshopError with both figures and the fix."""
    states_mib = model_states(counts, exp, world_size)["estimated_model_states_gpu_mib"]
    if not fit.states_fit(states_mib, gpu_mib):
        raise WorkshopError(
            f"{cfg.model} needs about {states_mib:,.0f} MiB per GPU for its model states alone under "
            f"{cfg.experiment} (DeepSpeed's estimate), more than {1 - fit.HEADROOM:.0%} of this GPU's "
            f"{gpu_mib:,.0f} MiB ({fit.HEADROOM:.0%} kept as headroom).",
            "use more ZeRO (stage3), CPU offload (stage2_offload, stage3_offload), more GPUs, or a smaller model.",
        )
    return states_mib


def sized_micro_batch(argv: list[str]) -> int | None:
    """`python -m workshop_lib.preflight EXPERIMENT [workshop run options]` (slurm/common.sh, once per batch job):
    the run's micro-batch token budget on this node's GPU, `fit.micro_batch_budget` of its experiment as the
    notebooks size theirs (the choice and why on stderr), or the budget its output directory's run recorded (a
    resume keeps it). None without a GPU, with --max-tokens-per-micro-batch given, other batching, a model `fit`
    does not know, settings `resolve` refuses, or a run_config.json that is damaged or records no budget >= 1 (the
    run then says why). Writes nothing."""
    if "--max-tokens-per-micro-batch" in argv or not torch.cuda.is_available():
        return None
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's complaint: the run itself prints it, once
            cfg = resolve(parse_run_args(argv))
        started = checkpoint.run_config(cfg.output_dir)  # damaged: the resumed run says so (check_same_run)
    except (WorkshopError, SystemExit):
        return None
    if started is not None:
        tokens = started.get("max_tokens_per_micro_batch")
        return tokens if type(tokens) is int and tokens >= 1 else None  # another: the run names both values
    if cfg.batching != "token_budget" or cfg.model not in fit.MODELS:
        return None
    setup = {cfg.experiment: experiment_named(cfg.experiment).fit_setup | {"logits_on": cfg.logits_on}}
    budget = fit.micro_batch_budget(
        cfg.model, setup, env.gpu_free_mib(), cfg.max_tokens_per_micro_batch, cfg.max_length
    )
    print(budget.line(f"this {cfg.experiment} run"), file=sys.stderr)
    return budget.tokens


if __name__ == "__main__":
    print(sized_micro_batch(sys.argv[1:]) or "")
