"""Experiments and their DeepSpeed configs (introduced in `02_zero_stages`), and the FSDP2 one's `fsdp_config`.

`EXPERIMENTS` holds every experiment as one `Experiment` record: its ZeRO stage, offload and any extra keys (`overlay`);
`check_combination` holds the rules they obey. `build_ds_config(experiment, settings)` is the single source of truth for
a config: `workshop run` checks `--ds-config` overrides on it and runs with it. The JSON files in `configs/` for users
of their own Trainer scripts are generated from it (`python scripts/make_configs.py`) and CI checks they are up to date.
`workshop run` writes the config it used, batch sizes resolved, to ds_config.json. `KEYS` says what each key means
(units: bucket sizes count elements) and who sets it, `explain` and `diff` make tables of configs, and `apply_overrides`
sets `--ds-config KEY=VALUE` overrides after checking them against DeepSpeed's own config classes (`check_overrides`).

What each stage partitions across the N data-parallel GPUs (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", fig. 1): stage 1 the optimizer states, stage 2
also the gradients, stage 3 also the parameters. Offload moves the partitioned optimizer states (and, at
stage 3, the parameters) to CPU memory and runs the Adam step on the CPU (ZeRO-Offload, Ren et al. 2021)."""

from __future__ import annotations

import copy
import difflib
import functools
import json
import typing
from dataclasses import dataclass, field
from typing import Literal

from .errors import WorkshopError
from .units import MiB

Auto = str  # the literal "auto": the HF Trainer integration fills it from TrainingArguments
Offload = Literal["none", "cpu"]  # where ZeRO keeps a partitioned state: on the GPU, or in host RAM


def check_combination(zero_stage: int | None, offload_optimizer: str = "none", offload_param: str = "none") -> None:
    """The legal experiments, in one place (an `Experiment` and `fit.estimate` check theirs here): `zero_stage`
    None (the HF Trainer alone) or 0-3; optimizer offload ("cpu") at stages 1-3, parameter offload at stage 3.

    Raises:
        WorkshopError: an unknown stage or device, or a combination DeepSpeed cannot run.
    """
    if zero_stage not in (None, 0, 1, 2, 3):
        raise WorkshopError(
            f"zero_stage must be None, 0, 1, 2 or 3, got {zero_stage!r}: not an option.",
            "pick None (the HF Trainer alone) or a ZeRO stage 0-3.",
        )
    for device in (offload_optimizer, offload_param):
        if device not in typing.get_args(Offload):
            raise WorkshopError(f"Unknown offload device {device!r}: not an option.", "use none or cpu.")
    if offload_optimizer != "none" and zero_stage in (None, 0):
        who = "The HF Trainer alone" if zero_stage is None else "ZeRO-0"
        raise WorkshopError(
            f"{who} offloads nothing: optimizer offload needs ZeRO stage 1, 2 or 3, which partition "
            "the optimizer states.",
            "use stage1_offload, stage2_offload or stage3_offload, or no offload.",
        )
    if offload_param != "none" and zero_stage != 3:
        raise WorkshopError(
            "Parameter offload needs ZeRO stage 3 (only stage 3 partitions the parameters).",
            "use stage3_offload, or offload the optimizer only.",
        )


@dataclass(frozen=True)
class Experiment:
    """What DeepSpeed does in a run, checked at creation (`check_combination`): the ZeRO stage (None: the HF
    Trainer alone, or with `fsdp` PyTorch FSDP2), where optimizer states and parameters live, and `overlay`: the
    ds_config keys (dotted, as `--ds-config` writes them) this experiment sets on top of what its stage and offload
    build.

    A new DeepSpeed variant is one record in `EXPERIMENTS`, a `KEYS` line for each new key, and a test."""

    name: str
    zero_stage: int | None
    offload_optimizer: Offload = "none"  # optimizer states and the Adam step (stages 1-3)
    offload_param: Offload = "none"  # parameters (stage 3 only)
    summary: str = ""
    overlay: dict = field(default_factory=dict, compare=False)
    # PyTorch FSDP2 instead of DeepSpeed (zero_stage None), through the HF Trainer's own integration (accelerate's
    # FSDP plugin, `build_fsdp_config`); offload: FSDP2's CPUOffloadPolicy, parameters, gradients and Adam step
    fsdp: bool = False

    def __post_init__(self):
        check_combination(self.states_stage, self.offload_optimizer, self.offload_param)

    @property
    def deepspeed(self) -> bool:
        return self.zero_stage is not None

    @property
    def states_stage(self) -> int | None:
        """The ZeRO stage whose partitioning the model states follow: FSDP2 shards parameters, gradients and
        optimizer states across the ranks as ZeRO-3 does (Zhao et al. 2023, "PyTorch FSDP"), else `zero_stage`."""
        return 3 if self.fsdp else self.zero_stage

    @property
    def fit_setup(self) -> dict:
        """`fit.estimate`'s zero_stage and offload for this experiment: {"zero_stage": None | 0-3, "offload":
        "none" | "cpu"}, where the optimizer states go (FSDP2 as ZeRO-3, `states_stage`). At stage 3
        `fit.estimate` offloads the parameters with them, as every stage-3 experiment here does
        (tests/test_fit.py checks it)."""
        return {"zero_stage": self.states_stage, "offload": self.offload_optimizer}


EXPERIMENTS = {
    e.name: e
    for e in [
        Experiment("baseline", None, summary="HF Trainer + torch AdamW: everything on the GPU"),
        Experiment("stage0", 0, summary="DeepSpeed's engine, nothing partitioned"),
        Experiment("stage1", 1, summary="optimizer states partitioned across GPUs"),
        Experiment("stage2", 2, summary="+ gradients partitioned"),
        Experiment("stage3", 3, summary="+ parameters partitioned, gathered per layer"),
        Experiment("stage1_offload", 1, "cpu", summary="ZeRO-1, optimizer states and Adam step on the CPU"),
        Experiment("stage2_offload", 2, "cpu", summary="ZeRO-2, optimizer states and Adam step on the CPU"),
        Experiment("stage3_offload", 3, "cpu", "cpu", summary="ZeRO-3, optimizer states and parameters on the CPU"),
        Experiment("fsdp2", None, fsdp=True, summary="PyTorch FSDP2: ZeRO-3's sharding, one unit per decoder layer"),
    ]
}


def experiment_named(name: str) -> Experiment:
    """The experiment called `name`. Raises WorkshopError: no experiment has that name."""
    if name not in EXPERIMENTS:
        raise WorkshopError(f"Unknown experiment {name!r}.", f"use one of: {', '.join(EXPERIMENTS)}.")
    return EXPERIMENTS[name]


@dataclass(frozen=True)
class Settings:
    """A run's values that its DeepSpeed config needs beside the experiment; "auto": the HF Trainer fills it.
    With ints for both batch sizes and a `world_size`, train_batch_size is written out (micro x accumulation x
    world_size), so every rank of a multi-process launch agrees."""

    precision: str = "auto"  # bf16, fp16, fp32, or auto (the Trainer's --bf16/--fp16 decide)
    train_micro_batch_size_per_gpu: int | Auto = "auto"  # sequences per GPU per forward pass
    gradient_accumulation_steps: int | Auto = "auto"  # forward passes per optimizer step
    world_size: int | None = None  # GPUs (ranks)
    # gradient ELEMENTS reduced together (stages 1-3); "auto": the HF integration's hidden_size², 1M elements for
    # Qwen3-0.6B, one reduction call per parameter tensor at stage 1-2; DeepSpeed's own default is 500M
    reduce_bucket_size: int | Auto = "auto"
    # bf16: check every gradient tensor for inf/NaN before each step and skip the step on one (DeepSpeed's default);
    # bf16 has fp32's exponent range, so no loss scale needs it; False saves a check per tensor per step
    check_grad_overflow: bool = True
    # the Trainer's clipping (it fills gradient_clipping); 0 at stage 2 without offload also writes
    # zero_optimization.compute_grad_norm false: no global norm, none of its per-tensor norms each step
    max_grad_norm: float = 1.0
    # DeepSpeed's communication logger (`COMMS_LOGGER`): every collective timed and sized (`04_multi_gpu`)
    comms_logger: bool = False


def build_ds_config(experiment: Experiment | str, settings: Settings = Settings()) -> dict:
    """The DeepSpeed config of an experiment (a record of `EXPERIMENTS`, or its name) for the HF Trainer
    integration: what its stage and offload need, then its `overlay`. `workshop run` validates `--ds-config`
    overrides on this config and runs with it (the same call, with the batch sizes and buffers known by then).

        build_ds_config("stage3")                                      # all batch sizes "auto"
        build_ds_config("stage2_offload", Settings(precision="bf16", train_micro_batch_size_per_gpu=4,
                                                   gradient_accumulation_steps=2, world_size=8))

    Returns:
        The config dict (JSON-serialisable). Optimizer values are "auto": the Trainer fills them from
        TrainingArguments (lr, betas, eps, weight decay); the learning-rate schedule is the Trainer's.

    Raises:
        WorkshopError: an unknown experiment, one without DeepSpeed (baseline), an unknown precision.
    """
    exp, s = experiment if isinstance(experiment, Experiment) else experiment_named(experiment), settings
    if not exp.deepspeed:
        raise WorkshopError(
            f"{exp.name} does not use DeepSpeed: it has no DeepSpeed config.",
            "pick a DeepSpeed experiment (stage0 ... stage3_offload).",
        )
    if s.precision not in ("auto", "bf16", "fp16", "fp32"):
        raise WorkshopError(f"Unknown precision {s.precision!r}.", "use bf16, fp16, fp32 or auto.")
    stage, micro, accum = exp.zero_stage, s.train_micro_batch_size_per_gpu, s.gradient_accumulation_steps
    batch = (
        micro * accum * s.world_size if s.world_size and isinstance(micro, int) and isinstance(accum, int) else "auto"
    )
    zero: dict = {"stage": stage}
    if stage >= 1:
        zero |= {"overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": s.reduce_bucket_size}
    if s.max_grad_norm == 0 and stage == 2 and exp.offload_optimizer == "none":
        zero["compute_grad_norm"] = False
    if stage == 3:
        # Prefetch DeepSpeed's default 5e7 elements: HF's "auto" (0.9 x hidden², 943,718 for Qwen3-0.6B) is less
        # than one of its matrices, and each layer waits for its gather (lab/findings/h200/zero3-prefetch)
        zero |= {
            "stage3_prefetch_bucket_size": 50_000_000,
            "stage3_param_persistence_threshold": "auto",
            "stage3_gather_16bit_weights_on_model_save": True,
        }
    for key, device in (("offload_optimizer", exp.offload_optimizer), ("offload_param", exp.offload_param)):
        if device != "none":
            zero[key] = {"device": device, "pin_memory": True}
    half = {"auto": ("auto", "auto"), "bf16": (False, True), "fp16": (True, False), "fp32": (False, False)}
    fp16, bf16 = half[s.precision]
    cfg = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "train_batch_size": batch,  # = micro x accumulation x world_size
        "gradient_clipping": "auto",
        # fp16 needs dynamic loss scaling (loss_scale 0) against underflow; bf16 has fp32's range and needs none
        "fp16": {"enabled": fp16, "loss_scale": 0, "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
        "bf16": {"enabled": bf16} | ({} if s.check_grad_overflow else {"check_grad_overflow": False}),
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        },
        # no "scheduler": the Trainer's own (the baseline's linear decay); WarmupDecayLR would waste step 1 at lr 0
        "zero_optimization": zero,
        "steps_per_print": 1_000_000,  # the Trainer logs; DeepSpeed's own prints would interleave the bar
        "wall_clock_breakdown": False,
    } | ({"comms_logger": COMMS_LOGGER} if s.comms_logger else {})
    for key, value in exp.overlay.items():
        _set(cfg, key, copy.deepcopy(value))
    return cfg


def _set(cfg: dict, key: str, value) -> None:
    """Set dotted `key` of `cfg` in place, making sections as needed.

    Raises:
        WorkshopError: a part of the key is a value, not a section.
    """
    parts, node = key.split("."), cfg
    for i, p in enumerate(parts[:-1]):
        if not isinstance(node.get(p, {}), dict):
            raise WorkshopError(
                f"--ds-config {key}: {p} is a value ({node[p]!r}), not a section.",
                f"set {'.'.join(parts[: i + 1])} itself.",
            )
        node = node.setdefault(p, {})
    node[parts[-1]] = value


# DeepSpeed's communication logger (deepspeed/comm/config.py, `comms`): prof_all times every collective (not a
# chosen few, `prof_ops`); verbose False keeps a line per collective out of the log; debug False: records by op.
COMMS_LOGGER = {"enabled": True, "verbose": False, "prof_all": True, "debug": False}


def build_fsdp_config(experiment: Experiment, layer_classes: list[str], activation_checkpointing: bool = False) -> dict:
    """TrainingArguments' `fsdp_config` of an FSDP2 experiment (with `fsdp=True`): transformers passes it to
    accelerate's FSDP plugin, which applies `torch.distributed.fsdp.fully_shard` to each module of
    `layer_classes` (the decoder layer: `model._no_split_modules`), then to the whole model. Activation
    checkpointing is FSDP's own here: TrainingArguments' would gather each layer's parameters a third time.

    Raises:
        WorkshopError: `experiment` is not an FSDP2 one."""
    if not experiment.fsdp:
        raise WorkshopError(f"{experiment.name} does not use FSDP.", "pick fsdp2.")
    return {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls_to_wrap": list(layer_classes),  # one unit: gathered, used and freed together
        "reshard_after_forward": True,  # free each unit's gathered parameters after its forward (ZeRO-3), not ZeRO-2
        "cpu_offload": experiment.offload_param != "none",  # FSDP2's CPUOffloadPolicy
        "state_dict_type": "FULL_STATE_DICT",  # save_model gathers one whole model.safetensors, as ZeRO-3's does
        "activation_checkpointing": activation_checkpointing,
    }


# The files shipped for Trainer-script users: name -> experiment.
SHIPPED = {
    "ds_zero0.json": "stage0",
    "ds_zero1.json": "stage1",
    "ds_zero2.json": "stage2",
    "ds_zero3.json": "stage3",
    "ds_zero1_offload.json": "stage1_offload",
    "ds_zero2_offload.json": "stage2_offload",
    "ds_zero3_offload.json": "stage3_offload",
}


def shipped_configs() -> dict[str, str]:
    """{file name: JSON text} of every config in `configs/`, all values "auto" where the Trainer fills them."""
    return {file: json.dumps(build_ds_config(name), indent=2) + "\n" for file, name in SHIPPED.items()}


# ---- What each key means and who sets it; overrides checked against DeepSpeed (introduced in `02_zero_stages`)
# Each meaning was read in DeepSpeed 0.19.8's config classes and the code that uses them, and in transformers'
# integration (integrations/deepspeed.py: trainer_config_process fills "auto" from TrainingArguments and refuses a
# value that differs; trainer_config_finalize fills the hidden_size-based ones). Sizes in ELEMENTS count numbers,
# not bytes: bytes = elements x 2 in bf16/fp16, x 4 in fp32.


@dataclass(frozen=True)
class Key:
    """One ds_config key (a dotted path): what it does, with units; who sets its value; and, where a `workshop
    run` option or the experiment sets it, how to change it that way (`fix`): an override of such a key is
    refused, so that each setting is declared once. `stages`: the ZeRO stages it acts at."""

    meaning: str
    set_by: str
    fix: str | None = None
    stages: tuple[int, ...] = (0, 1, 2, 3)


def _trainer(arg: str) -> str:
    return f'HF Trainer: "auto" <- TrainingArguments.{arg}; any other value must equal it (trainer_config_process)'


def _hidden(expr: str) -> str:
    return (
        f'HF Trainer: "auto" <- {expr} from the model\'s hidden_size (trainer_config_finalize); absent: '
        "DeepSpeed's default"
    )


_DEFAULT = "DeepSpeed's default (the workshop does not write it)"
_LR = "the HF Trainer's linear schedule drives it (no scheduler section)"
KEYS: dict[str, Key] = {
    "train_micro_batch_size_per_gpu": Key(
        "sequences per GPU in one forward and backward pass. With --batching token_budget the micro-batches vary "
        "in size and this is their mean, rounded: DeepSpeed uses it only to check train_batch_size",
        "workshop: the run's micro-batch; " + _trainer("per_device_train_batch_size"),
        "pass --train-micro-batch-size-per-gpu, or --max-tokens-per-micro-batch with token_budget batching",
    ),
    "gradient_accumulation_steps": Key(
        "micro-batches (forward + backward passes) per optimizer step",
        "workshop: --gradient-accumulation-steps; " + _trainer("gradient_accumulation_steps"),
        "pass --gradient-accumulation-steps",
    ),
    "train_batch_size": Key(
        "sequences per optimizer step over all GPUs = micro-batch x accumulation x world_size; DeepSpeed refuses "
        "a config where the three disagree",
        "workshop: the product; " + _trainer("world_size x per_device_train_batch_size x gradient_accumulation_steps"),
        "change the micro-batch, the accumulation or the number of GPUs",
    ),
    "gradient_clipping": Key(
        "largest global L2 norm of the gradients: a larger norm is scaled down to it before the step (0: none)",
        _trainer("max_grad_norm") + " (workshop: --max-grad-norm, 1.0)",
        "give --max-grad-norm (0: no clipping)",
    ),
    "fp16.enabled": Key(
        "fp16 training: 16-bit weights, activations and gradients, fp32 master weights and Adam moments, the loss "
        "scaled against underflow",
        _trainer("fp16"),
        "pass --precision fp16",
    ),
    "fp16.loss_scale": Key(
        "0: dynamic loss scaling (the scale halves on an overflow and grows after a run of "
        "clean steps); > 0: that fixed scale",
        "workshop (fp16 only uses it)",
    ),
    "fp16.initial_scale_power": Key("the dynamic loss scale starts at 2^this (16: 65,536)", "workshop"),
    "fp16.hysteresis": Key(
        "overflowing steps tolerated before the loss scale is lowered (a delayed shift)", "workshop"
    ),
    "fp16.min_loss_scale": Key("the dynamic loss scale never goes below this", "workshop"),
    "bf16.enabled": Key(
        "bf16 training: bf16 weights, activations and gradients, fp32 master weights and Adam moments; no loss "
        "scale (bf16 has fp32's exponent range)",
        _trainer("bf16"),
        "pass --precision bf16",
    ),
    "bf16.check_grad_overflow": Key(
        "check every gradient for inf/NaN before each optimizer step and skip the step if one is found",
        "workshop: --check-grad-overflow (written only when false)",
        "pass --check-grad-overflow true/false",
    ),
    "optimizer.type": Key(
        "the optimizer DeepSpeed builds: AdamW runs as DeepSpeed's FusedAdam, or DeepSpeedCPUAdam "
        "when the optimizer is offloaded",
        "workshop",
        "keep AdamW: every experiment uses it, so that the runs compare",
    ),
    "optimizer.params.lr": Key("peak learning rate; " + _LR, _trainer("learning_rate"), "pass --learning-rate"),
    "optimizer.params.betas": Key(
        "Adam's decay rates of its two moment estimates, [beta1, beta2]",
        _trainer("adam_beta1, adam_beta2"),
        "keep the Trainer's (0.9, 0.999); `workshop run` does not change them",
    ),
    "optimizer.params.eps": Key(
        "Adam's epsilon, added to the denominator",
        _trainer("adam_epsilon"),
        "keep the Trainer's 1e-8; `workshop run` does not change it",
    ),
    "optimizer.params.weight_decay": Key(
        "AdamW's decoupled weight decay", _trainer("weight_decay"), "pass --weight-decay"
    ),
    "zero_optimization.stage": Key(
        "0: nothing partitioned (DeepSpeed's engine only); 1: the optimizer states partitioned across the "
        "data-parallel GPUs; 2: + the gradients; 3: + the 16-bit parameters, gathered just before each use",
        "workshop: the experiment",
        "pick another experiment (stage0, stage1, stage2, stage3, *_offload)",
    ),
    "zero_optimization.overlap_comm": Key(
        "reduce each full gradient bucket on a side stream while the backward pass goes on (else on the compute "
        "stream, between its kernels). Stages 1-2 then keep two buffers of reduce_bucket_size elements, not one "
        "(setup_buckets); stage 3 keeps one either way, only the stream changes. Absent: true at stage 3, false below",
        "workshop: true",
        stages=(1, 2, 3),
    ),
    "zero_optimization.compute_grad_norm": Key(
        "compute the global gradient norm at each optimizer step (one norm per gradient tensor, then their sum). "
        "Absent: true. False needs gradient_clipping 0 and no optimizer offload (stages 1-2)",
        "workshop: false where --max-grad-norm is 0 at stage 2 without offload",
        "give --max-grad-norm 0 (no clipping) at stage 2",
        stages=(1, 2),
    ),
    "zero_optimization.contiguous_gradients": Key(
        "copy each gradient into a bucket buffer of reduce_bucket_size elements as it is produced: less "
        "fragmentation. Stage 3 allocates that buffer at its start and keeps it (false: no buffer, "
        "reduce_bucket_size x 2 bytes less in bf16); stages 1-2 allocate it at each backward pass",
        "workshop: true",
        stages=(1, 2, 3),
    ),
    "zero_optimization.reduce_bucket_size": Key(
        "ELEMENTS (not bytes) of gradients reduced in one collective. Stages 1-2 allocate a buffer of this many "
        "elements in the reduction dtype, two with overlap_comm: 5e8 bf16 elements = 1 GB each",
        "workshop: --reduce-bucket-size, at most the model's parameters; " + _hidden("hidden_size²"),
        "pass --reduce-bucket-size N (elements; 0: auto)",
        stages=(1, 2, 3),
    ),
    "zero_optimization.allgather_bucket_size": Key(
        "ELEMENTS per all-gather of the updated parameters after the optimizer step (stages 1-2), used only "
        "where torch.distributed lacks all_gather_into_tensor (NCCL and gloo have it: one all-gather per "
        "parameter group, whatever this says; runtime/utils.py all_gather_dp_groups)",
        _DEFAULT,
        stages=(1, 2),
    ),
    "zero_optimization.stage3_prefetch_bucket_size": Key(
        "ELEMENTS of parameters gathered ahead of the layer that needs them (stage 3); 0: no prefetching",
        "workshop: 50,000,000 (DeepSpeed's default)",
        stages=(3,),
    ),
    "zero_optimization.stage3_param_persistence_threshold": Key(
        "parameters of at most this many ELEMENTS persist: every GPU keeps them whole between uses, so the forward "
        "and backward passes gather them no more; they are still partitioned for the optimizer step and "
        "all-gathered after every step (stage3.py _post_step). On one GPU nothing is ever gathered "
        "(partition_parameters.py _no_gather_coalesced): no effect there",
        _hidden("10 x hidden_size"),
        stages=(3,),
    ),
    "zero_optimization.stage3_max_live_parameters": Key(
        "ELEMENTS of gathered parameters a GPU may hold before it releases some (stage 3)", _DEFAULT, stages=(3,)
    ),
    "zero_optimization.stage3_max_reuse_distance": Key(
        "a gathered parameter used again within this many ELEMENTS of parameters is kept, not released "
        "(stage 3); 0: released at once",
        _DEFAULT,
        stages=(3,),
    ),
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": Key(
        "stage 3: gather the partitioned 16-bit weights into one state dict when the model is saved (the Trainer's "
        "save_model writes a loadable model); false: accelerate refuses that save, and only a ZeRO checkpoint "
        "(zero_to_fp32) holds the weights",
        "workshop: true",
        stages=(3,),
    ),
    "zero_optimization.offload_optimizer.device": Key(
        "where the partitioned optimizer states live: none (the GPU) or cpu (host memory); with cpu the Adam step "
        "runs on the CPU",
        "workshop: the experiment",
        "pick an offload experiment (stage1_offload, stage2_offload, stage3_offload)",
        stages=(1, 2, 3),
    ),
    "zero_optimization.offload_optimizer.pin_memory": Key(
        "keep the offloaded states in page-locked host memory: faster, asynchronous copies between GPU and CPU, "
        "but memory the OS cannot page out",
        "workshop: true",
        stages=(1, 2, 3),
    ),
    "zero_optimization.offload_param.device": Key(
        "where the partitioned 16-bit parameters live between uses: none (the GPU), or cpu (stage 3 only)",
        "workshop: the experiment",
        "pick stage3_offload",
        stages=(3,),
    ),
    "zero_optimization.offload_param.pin_memory": Key(
        "keep the offloaded parameters in page-locked host memory (see offload_optimizer.pin_memory)",
        "workshop: true",
        stages=(3,),
    ),
    "steps_per_print": Key(
        "DeepSpeed prints its progress every this many steps (1e6: practically never)",
        "workshop: the Trainer logs instead",
    ),
    "wall_clock_breakdown": Key(
        "time the forward, backward and optimizer step apart in every step and print it", "workshop: false"
    ),
}


def flatten(cfg: dict, prefix: str = "") -> dict:
    """{dotted key: value} of every leaf of a nested config (a list is a leaf)."""
    out = {}
    for k, v in cfg.items():
        if isinstance(v, dict) and v:
            out |= flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


@functools.cache
def _defaults(stage: int) -> dict:
    """{dotted key: DeepSpeed's default at ZeRO `stage`} of the sections DeepSpeed validates with its pydantic config
    classes, each built with no values (the offload blocks present, which are absent by default); a
    default that depends on the stage (overlap_comm: on at stage 3 only) is the stage's."""
    # DeepSpeed here, not at the top: importing it picks the accelerator and probes its ops; env settles both first
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    sections = {
        "zero_optimization": DeepSpeedZeroConfig(stage=stage, offload_optimizer={}, offload_param={}),
        "bf16": DeepSpeedBF16Config(),
        "fp16": DeepSpeedFP16Config(),
        "comms_logger": CommsLoggerConfig(),
    }
    return flatten({name: model.model_dump(mode="json", by_alias=True) for name, model in sections.items()})


def deepspeed_default(key: str, stage: int = 0):
    """DeepSpeed's default for dotted `key` at ZeRO `stage` where a config class declares it (`_defaults`), else
    None."""
    return _defaults(stage).get(key)


def explain(cfg: dict, absent: bool = True):
    """The config as a table, one row per key: `key` (dotted), `value`, `meaning` (with units), `set by` (who
    writes or fills the value: the workshop, the HF Trainer for "auto", or DeepSpeed's default) and
    `DeepSpeed default` (from its config classes, where they declare one). With `absent`, also the `KEYS` that
    act at the config's ZeRO stage and are not in it, valued by DeepSpeed's default.

    Returns a pandas DataFrame. A key missing from `KEYS` gets "(not in workshop_lib.ds_config.KEYS)".
    """
    import pandas as pd  # here only: `workshop --help` reads the experiments from this module

    rows, unknown = [], Key("(not in workshop_lib.ds_config.KEYS)", "an override (--ds-config)")
    leaves = flatten(cfg)
    stage = cfg.get("zero_optimization", {}).get("stage", 0)
    keys = list(leaves) + [
        k for k, v in KEYS.items() if absent and k not in leaves and stage in v.stages and v.set_by == _DEFAULT
    ]
    for k in keys:
        info = KEYS.get(k, unknown)
        default = deepspeed_default(k, stage)
        rows.append(
            {
                "key": k,
                "value": leaves.get(k, "(absent)"),
                "meaning": info.meaning,
                "set by": info.set_by,
                "DeepSpeed default": "" if default is None else default,
            }
        )
    return pd.DataFrame(rows)


def diff(a: dict, b: dict, names: tuple[str, str] = ("a", "b")):
    """The keys whose values differ between two configs (a key missing on one side shows as "(absent)"), as a
    DataFrame: `key`, one column per name, and `meaning`."""
    import pandas as pd  # as in `explain`

    fa, fb = flatten(a), flatten(b)
    keys = [k for k in dict.fromkeys([*fa, *fb]) if fa.get(k, "(absent)") != fb.get(k, "(absent)")]
    return pd.DataFrame(
        [
            {
                "key": k,
                names[0]: fa.get(k, "(absent)"),
                names[1]: fb.get(k, "(absent)"),
                "meaning": KEYS[k].meaning if k in KEYS else "",
            }
            for k in keys
        ],
        columns=["key", *names, "meaning"],
    )


def gradient_bucket_mib(cfg: dict) -> float | None:
    """MiB of the gradient buckets a config makes ZeRO allocate: with contiguous_gradients, stages 1-2 keep
    reduce_bucket_size elements in the training dtype (2 bytes with bf16 or fp16 enabled, else 4), two such
    buffers with overlap_comm (double buffering: DeepSpeedZeroOptimizer.setup_buckets, zero/stage_1_and_2.py),
    and stage 3 one (DeepSpeedZeroOptimizer_Stage3, zero/stage3.py). One bucket per communication dtype: one
    where every parameter has the training dtype and data_types.grad_accum_dtype is unset, as here. 0 at stage
    0 or without contiguous_gradients; None where reduce_bucket_size is "auto" (the Trainer fills it later)."""
    zero = cfg.get("zero_optimization", {})
    stage, elements = zero.get("stage", 0), zero.get("reduce_bucket_size", 500_000_000)
    if stage == 0 or zero.get("contiguous_gradients", True) is False:
        return 0.0
    if not isinstance(elements, int):
        return None
    half = any(cfg.get(p, {}).get("enabled") is True for p in ("bf16", "fp16"))
    overlap = zero.get("overlap_comm", stage == 3)  # DeepSpeed's default: on at stage 3 only
    buffers = 1 if stage == 3 else 1 + bool(overlap)
    return buffers * elements * (2 if half else 4) / MiB


def parse_override(text: str) -> tuple[str, object]:
    """ "zero_optimization.reduce_bucket_size=5e7" -> ("zero_optimization.reduce_bucket_size", 50000000): a
    dotted key and a JSON value (a number, true/false, null, a string, a list); text that is not JSON stays a
    string; a whole float becomes an int.

    Raises:
        WorkshopError: no "=", or an empty key part."""
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not p for p in key.split(".")):
        raise WorkshopError(
            f"--ds-config {text!r} is not KEY=VALUE.",
            "write the dotted key, '=' and the value, e.g. --ds-config zero_optimization.overlap_comm=false",
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return key.strip(), value


def apply_overrides(cfg: dict, overrides: list[str] | None) -> dict:
    """A copy of `cfg` with each "KEY=VALUE" of `overrides` set (`parse_override`; sections made as needed), after
    `check_overrides` has checked them. `cfg` itself is unchanged.

    Raises:
        WorkshopError: see `check_overrides`."""
    out = copy.deepcopy(cfg)
    if not overrides:
        return out
    pairs = [parse_override(o) for o in overrides]
    for key, value in pairs:
        _set(out, key, value)
    check_overrides(out, [k for k, _ in pairs])
    written = flatten(cfg)
    for key, value in pairs:
        old = written.get(key)
        # DeepSpeed reads its top-level keys (steps_per_print, ...) without checking their type; where the workshop
        # writes a number or a flag, an override of another JSON type is refused here (an int may stand for a float)
        if old not in (None, "auto") and type(value) is not type(old) and (type(old), type(value)) != (float, int):
            kind = {int: "an integer", float: "a number", bool: "true or false"}.get(type(old), type(old).__name__)
            raise WorkshopError(
                f"--ds-config {key}={value!r}: {key} takes {kind} (the workshop writes {json.dumps(old)}).",
                f"give {key} {kind}, e.g. --ds-config {key}={json.dumps(old)}",
            )
    return out


def check_overrides(cfg: dict, keys: list[str]) -> None:
    """Check the overridden dotted `keys` of `cfg` (a built config with the overrides set): none may be a key that
    the experiment, a `workshop run` option or the HF Trainer sets (`KEYS[...].fix`), and DeepSpeed must accept
    the config (`check_keys`).

    Raises:
        WorkshopError: the first key the workshop sets, with the option that sets it; or as `check_keys`."""
    for key in keys:
        if key in KEYS and KEYS[key].fix:
            raise WorkshopError(
                f"--ds-config {key}: not for an override; it is set by {KEYS[key].set_by}.", f"{KEYS[key].fix}."
            )
        # DeepSpeed checks no top-level name: a typo of one the workshop writes would be ignored. No name DeepSpeed
        # 0.19.8 reads at the top level is this close to one of the workshop's (tests/test_ds_config.py)
        top, written = key.split(".")[0], {k.split(".")[0] for k in KEYS}
        near = difflib.get_close_matches(top, sorted(written), n=1, cutoff=0.8)
        if top not in written and near:
            raise WorkshopError(
                f"--ds-config {key}: DeepSpeed would ignore {top!r} silently (it checks no top-level names).",
                f"use {near[0]}{key[len(top) :]}.",
            )
    check_keys(cfg, keys)


def check_keys(cfg: dict, keys: list[str]) -> None:
    """DeepSpeed's own validation of `cfg`: `DeepSpeedConfig` builds it, and its pydantic config classes
    (DeepSpeedZeroConfig, DeepSpeedBF16Config, DeepSpeedMonitorConfig for tensorboard/wandb/csv_monitor/comet, ...:
    extra="forbid") refuse an unknown key and a value of the wrong type in the sections they model. "auto"
    values: DeepSpeed's classes drop them (the Trainer fills them later); the batch sizes and gradient_clipping
    are given numbers for the check. Keys outside those sections DeepSpeed reads if it knows them and ignores
    otherwise (https://www.deepspeed.ai/docs/config-json/ lists them).

    Raises:
        WorkshopError: DeepSpeed's message, with the key of `keys` it names and the nearest keys of `KEYS`."""
    import pydantic  # installed with DeepSpeed: optional here too

    try:  # optional here: a config is built without DeepSpeed
        from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError
    except ImportError as e:
        raise WorkshopError(
            f"--ds-config needs DeepSpeed to check the keys, and it is not installed ({e}).",
            "pip install deepspeed (or `pip install -e .` in the workshop folder).",
        ) from e
    filled = {k: v for k, v in cfg.items() if k not in ("train_batch_size", "gradient_accumulation_steps")}
    filled |= {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_clipping": 1.0 if cfg.get("gradient_clipping") in (None, "auto") else cfg["gradient_clipping"],
    }
    try:
        DeepSpeedConfig(filled)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        key = next((k for k in keys if k.endswith(loc)), loc)
        near = difflib.get_close_matches(key, list(KEYS), n=3, cutoff=0.8)
        fix = (f"use {' or '.join(near)}" if near else "check the key's spelling") + " (an unknown key)"
        raise WorkshopError(
            f"--ds-config {key}={err.get('input')!r}: DeepSpeed's {e.title} refuses it: {err['msg']}.",
            (fix if err["type"] == "extra_forbidden" else f"give {key} a value DeepSpeed accepts")
            + "; the keys and their values are documented at https://www.deepspeed.ai/docs/config-json/.",
        ) from None
    except (DeepSpeedConfigError, AssertionError, ValueError, TypeError) as e:  # its own checks and asserts
        raise WorkshopError(
            f"--ds-config {', '.join(keys)}: DeepSpeed refuses the config: {e}",
            "change or drop that override; see https://www.deepspeed.ai/docs/config-json/.",
        ) from None
