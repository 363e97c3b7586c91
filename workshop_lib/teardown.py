"""Clean-up after a run, so that the next run starts in the same process as in a fresh one (a notebook kernel runs
several experiments; `train.run_experiment` calls these). All of the library's in-process clean-up lives here:

    restored_world          the rank variables a run set for a world of one removed (a child would take them)
    release                 the Trainer's engine, optimizer, model, DeepSpeed state, torch.compile's caches
    release_zero3_globals   what DeepSpeed's ZeRO-3 keeps of a finished run in module globals
    free_memory             the collector, then the CUDA cache

`without_world` is the environment for a child process that must start a world of its own.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator, Mapping

import torch
from accelerate.state import AcceleratorState
from transformers.integrations.deepspeed import unset_hf_deepspeed_config

# The variables a launcher sets per process (torchrun, deepspeed, srun via slurm/common.sh), and that
# `env.ensure_distributed_env` (a world of one) and accelerate (on the CPU) set in a plain process.
DIST_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)


@contextlib.contextmanager
def restored_world() -> Iterator[None]:
    """Put `DIST_VARS` back as they were on entry when the block ends, however it ends. Under a launcher they
    were set and stay; in a notebook kernel a run's world of one leaves none behind, so a `workshop run` or a
    launch started from the kernel later does not inherit this process's RANK and MASTER_PORT. The process
    group itself outlives the run (`env.init_distributed`): the next run sets the variables again."""
    saved = {k: os.environ.get(k) for k in DIST_VARS}
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def without_world(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (default os.environ) less `DIST_VARS`: the environment of a child process that starts a world of
    its own, whose launcher sets them afresh."""
    return {k: v for k, v in (os.environ if environ is None else environ).items() if k not in DIST_VARS}


def free_memory() -> None:
    """Collect garbage, then return the CUDA allocator's free blocks: an earlier run's engine and model sit in
    reference cycles that only the collector frees, and the next run measures what stays allocated."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def release_zero3_globals() -> None:
    """Drop the two module-level references through which DeepSpeed's ZeRO-3 keeps a finished run's model, and with it
    the optimizer's fp32 partitions, alive after `engine.destroy()`: the top module that `DeepSpeedZeRoOffload` pushes
    on `parameter_offload.FWD_MODULE_STACK` and never pops, and the `functools.lru_cache` on
    `PartitionedParameterCoordinator.__params_to_release`, whose keys are the coordinator and its submodules. Without
    this, a ZeRO-3 run of Qwen3-0.6B left its fp32 master weights and Adam moments allocated on the GPU for every later
    run in the same process (workshop_lessons/reference/h100/course/README.md). Does nothing without DeepSpeed."""
    try:  # optional: DeepSpeed may be missing
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


def release(trainer) -> None:
    """Free `trainer`'s engine, optimizer and GPU memory, and reset what the Trainer set process-wide, so the
    next experiment in the same kernel starts clean."""
    try:
        trainer.accelerator.free_memory()
    finally:
        trainer.model_wrapped = trainer.model = trainer.optimizer = trainer.lr_scheduler = None
        unset_hf_deepspeed_config()
        AcceleratorState._reset_state(reset_partial_state=True)
        # set by accelerate's Accelerator for a DeepSpeed or FSDP run and never unset: a later Trainer in this
        # process (a baseline run, an evaluation) would build a DeepSpeed engine or FSDP state from them
        for v in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"):
            os.environ.pop(v, None)
        torch._dynamo.reset()  # compiled blocks' caches hold the model (torch_compile)
        release_zero3_globals()
        free_memory()
