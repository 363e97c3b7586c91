"""DeepSpeed configs: one function for every ZeRO stage and offload (introduced in `02_zero_stages`).

`build_ds_config` is the single source of truth. The JSON files in `configs/` for users of their own
Trainer scripts are generated from it (`python -m workshop_lib.ds_config configs/`) and CI checks they
are up to date. `workshop run` writes the config it actually used, batch sizes resolved, to ds_config.json.

What each stage partitions across the N data-parallel GPUs (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", fig. 1): stage 1 the optimizer states, stage 2
also the gradients, stage 3 also the parameters. Offload moves the partitioned optimizer states (and, at
stage 3, the parameters) to CPU memory and runs the Adam step on the CPU (ZeRO-Offload, Ren et al. 2021).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import WorkshopError

Auto = str  # the literal "auto": the HF Trainer integration fills it from TrainingArguments


def build_ds_config(zero_stage: int, offload_optimizer: str = "none", offload_param: str = "none",
                    precision: str = "auto", train_micro_batch_size_per_gpu: int | Auto = "auto",
                    gradient_accumulation_steps: int | Auto = "auto", world_size: int | None = None,
                    nvme_path: str | None = None, reduce_bucket_size: int | Auto = "auto",
                    check_grad_overflow: bool = True, nvme_buffer_size: int = 100_000_000,
                    nvme_buffer_count: int = 5, comms_logger: bool = False) -> dict:
    """A DeepSpeed config dict for the HF Trainer integration.

    Args:
        zero_stage: 0 (plain data parallel, DeepSpeed's engine only), 1, 2 or 3.
        offload_optimizer: "none", "cpu" (optimizer states and the Adam step in host memory; stages 1-3)
            or "nvme" (states swapped to `nvme_path`, ZeRO-Infinity; stage 3).
        offload_param: "none", "cpu" or "nvme": the parameters too (stage 3 only).
        precision: "bf16", "fp16", "fp32", or "auto" (the Trainer's --bf16/--fp16 decide).
        train_micro_batch_size_per_gpu, gradient_accumulation_steps: sequences per GPU per forward pass,
            and passes per optimizer step; ints, or "auto".
        world_size: number of GPUs (ranks). With ints above, train_batch_size is written out as
            micro x accumulation x world_size, so every rank of a multi-process launch agrees.
        nvme_path: a directory on a local NVMe drive, for "nvme" offload.
        reduce_bucket_size: gradient elements reduced together (stages 1-3), or "auto": the HF integration
            sets hidden_size², 1M elements for Qwen3-0.6B, which under stage 1-2 means one reduction call per
            parameter tensor; DeepSpeed's own default is 500M (`workshop bench` measures both).
        check_grad_overflow: bf16 only: DeepSpeed checks every gradient tensor for inf/NaN before each
            optimizer step and skips the step if one is found (its default, True). bf16 has fp32's exponent
            range, so no loss scale depends on it; False saves one check per parameter tensor per step
            (`workshop bench` measures it). fp16 always checks: its loss scale needs it.
        nvme_buffer_size: parameter elements per NVMe read/write buffer (offload_param "nvme"); DeepSpeed needs
            it at least the largest parameter tensor's (Qwen3-0.6B's embedding: 155.6M). Default 1e8, DeepSpeed's.
        nvme_buffer_count: those buffers, one per parameter tensor in use at once (DeepSpeed's default 5 is
            fewer than one transformer layer's tensors; `train._nvme_buffers` sizes both for a model).
        comms_logger: True adds DeepSpeed's communication logger (`COMMS_LOGGER`, DeepSpeed docs
            "Communication Logging"): every collective through `deepspeed.comm` is timed and its message size
            recorded; `workshop run --comms-logger` writes the totals to comms.json (introduced in `04_multi_gpu`).

    Returns:
        The config dict (JSON-serialisable). Optimizer values are "auto": the Trainer fills them from
        TrainingArguments (lr, betas, eps, weight decay); the learning-rate schedule is the Trainer's.

    Raises:
        WorkshopError: an impossible combination (offload at stage 0, parameter offload below stage 3, NVMe
            offload below stage 3 or without nvme_path, an unknown device, precision or stage).
    """
    if zero_stage not in (0, 1, 2, 3):
        raise WorkshopError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}.", "pick one of 0-3.")
    for device in (offload_optimizer, offload_param):
        if device not in ("none", "cpu", "nvme"):
            raise WorkshopError(f"Unknown offload device {device!r}.", "use none, cpu or nvme.")
    if offload_optimizer != "none" and zero_stage == 0:
        raise WorkshopError("Optimizer offload needs ZeRO stage 1, 2 or 3; stage 0 keeps the optimizer on the GPU.",
                            "use stage1_offload, stage2_offload or stage3_offload.")
    if offload_param != "none" and zero_stage != 3:
        raise WorkshopError("Parameter offload needs ZeRO stage 3 (only stage 3 partitions the parameters).",
                            "use stage3_offload, or offload the optimizer only.")
    if "nvme" in (offload_optimizer, offload_param) and (zero_stage != 3 or not nvme_path):
        raise WorkshopError("NVMe offload (ZeRO-Infinity) needs ZeRO stage 3 and an nvme_path.",
                            "use stage 3 and pass --nvme-path DIR on a local NVMe drive.")
    if precision not in ("auto", "bf16", "fp16", "fp32"):
        raise WorkshopError(f"Unknown precision {precision!r}.", "use bf16, fp16, fp32 or auto.")
    batch = "auto"
    if world_size and isinstance(train_micro_batch_size_per_gpu, int) and isinstance(gradient_accumulation_steps, int):
        batch = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size
    zero: dict = {"stage": zero_stage}
    if zero_stage >= 1:
        zero |= {"overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": reduce_bucket_size}
    if zero_stage == 3:
        zero |= {"stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                 "stage3_gather_16bit_weights_on_model_save": True}
    for key, device in (("offload_optimizer", offload_optimizer), ("offload_param", offload_param)):
        if device != "none":
            zero[key] = {"device": device, "pin_memory": True} | ({"nvme_path": nvme_path} if device == "nvme" else {})
    if offload_param == "nvme":  # pinned host buffers of 16-bit elements that parameters are swapped into
        zero["offload_param"] |= {"buffer_count": nvme_buffer_count, "buffer_size": nvme_buffer_size}
        # Parameters prefetched or cached for reuse hold their buffers: with the defaults, a Qwen3-1.7B run on an
        # H100 stopped in its second step with DeepSpeed's "Not enough buffers 0 for swapping 1" (docs/h100/
        # large-models; DeepSpeed issues #3062, #3506, where its maintainer suggests turning both off)
        zero |= {"stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0}
    # DeepSpeed's asynchronous I/O to the drive (its defaults, written out to be tuned: `ds_nvme_tune` measures
    # the best block size and queue depth for a drive)
    aio = {"aio": {"block_size": 1_048_576, "queue_depth": 8, "thread_count": 1, "single_submit": False,
                   "overlap_events": True}} if "nvme" in (offload_optimizer, offload_param) else {}
    half = {"auto": ("auto", "auto"), "bf16": (False, True), "fp16": (True, False), "fp32": (False, False)}
    fp16, bf16 = half[precision]
    return {
        "train_micro_batch_size_per_gpu": train_micro_batch_size_per_gpu,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "train_batch_size": batch,  # = micro x accumulation x world_size
        "gradient_clipping": "auto",
        # fp16 needs dynamic loss scaling (loss_scale 0) against underflow; bf16 has fp32's range and needs none
        "fp16": {"enabled": fp16, "loss_scale": 0, "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
        "bf16": {"enabled": bf16} | ({} if check_grad_overflow else {"check_grad_overflow": False}),
        "optimizer": {"type": "AdamW",
                      "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
        # No "scheduler" section: the Trainer then drives DeepSpeed with its own schedule (linear decay),
        # exactly the baseline's. DeepSpeed's WarmupDecayLR would start at lr 0 and waste the first step.
        "zero_optimization": zero,
        "steps_per_print": 1_000_000,  # the Trainer logs; DeepSpeed's own prints would interleave the bar
        "wall_clock_breakdown": False,
    } | aio | ({"comms_logger": COMMS_LOGGER} if comms_logger else {})


# DeepSpeed's communication logger (deepspeed/comm/config.py): prof_all times every collective (not a chosen
# few, `prof_ops`); verbose False keeps one line per collective out of the log; debug False names records by
# the op, not by the calling function. It synchronizes the device after every collective, which serialises
# the communication that overlap_comm would hide: a run with it on measures volumes, not speed.
COMMS_LOGGER = {"enabled": True, "verbose": False, "prof_all": True, "debug": False}


# The files shipped for Trainer-script users: name -> (stage, offload_optimizer, offload_param).
SHIPPED = {"ds_zero0.json": (0, "none", "none"), "ds_zero1.json": (1, "none", "none"),
           "ds_zero2.json": (2, "none", "none"), "ds_zero3.json": (3, "none", "none"),
           "ds_zero1_offload.json": (1, "cpu", "none"), "ds_zero2_offload.json": (2, "cpu", "none"),
           "ds_zero3_offload.json": (3, "cpu", "cpu")}


def shipped_configs() -> dict[str, str]:
    """{file name: JSON text} of every config in `configs/`, all values "auto" where the Trainer fills them."""
    return {name: json.dumps(build_ds_config(*args), indent=2) + "\n" for name, args in SHIPPED.items()}


if __name__ == "__main__":  # python -m workshop_lib.ds_config configs/
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "configs")
    out.mkdir(parents=True, exist_ok=True)
    for name, text in shipped_configs().items():
        (out / name).write_text(text)
        print(out / name)
