"""The speed benchmark: every recipe and ZeRO setting side by side on one GPU, in one process and one call,
against a plain PyTorch training loop on the same model and data as the ceiling (its H100 run is in
lab/findings/h100/bench), and against the peers at their best (issue 56, `PEERS`): what a practitioner gets from
transformers' Trainer (ZeRO-2 or FSDP2) and TRL's SFTTrainer at their fastest documented settings, each row's
settings in the table's configuration column (TRL's rows are skipped, with the reason, where TRL is not installed;
the FSDP2 and torch_compile rows on a CPU). From the repository's root:

    python -m lab.bench --out bench                      # every row, 30 steps each, random weights
    python -m lab.bench --tiny --max-steps 3 --only "default ZeRO-2"   # a CPU check of the benchmark itself
    python -m lab.bench --out bench --only "default ZeRO-2" "HF Trainer + ZeRO-2 + Liger (best)" \
        "TRL SFTTrainer + ZeRO-2 + Liger (best)"         # the lead over the peers (and the ceiling, always run)
    bash lab/scripts/device_bench.sh                     # the one-GPU device call: ceiling, ZeRO rows, every peer

Every figure is steady state (`metrics.steady_state`): the warm-up, found from each row's own step log (a peer's
in train_log.csv's columns, as every run's), and any step that compiled are left out, then all the steady steps'
tokens over their summed time, the one figure of the table, the ratios under it and the plot. Speeds are
comparable only within one benchmark call. Tables made before 2026-11-26 (lab/findings/h100/bench*) also have a
"window tokens/s" column and a median-step "steady tokens/s": the definition then.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import re
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from transformers import TrainerCallback, set_seed

from workshop_lib import env, memory, metrics, teardown
from workshop_lib.callbacks import Phases, StepLog
from workshop_lib.config import RunConfig, resolve
from workshop_lib.data import (
    PROMPT_HEAD,
    PROMPT_TAIL,
    TokenBudgetBatchSampler,
    load_squad,
    make_collator,
    tokenize_squad,
)
from workshop_lib.ds_config import EXPERIMENTS
from workshop_lib.errors import WorkshopError
from workshop_lib.model import load_model_and_tokenizer
from workshop_lib.preflight import check_machine
from workshop_lib.record import run_mfu
from workshop_lib.results import title
from workshop_lib.train import apply_speed_levers, run_experiment
from workshop_lib.units import MiB

from . import packing

# Liger-Kernel's kernels for a row, the keyword arguments of `liger_kernel.transformers._apply_liger_kernel_to_instance`
# ({}: Liger's own defaults for the model, what the Trainer's use_liger_kernel applies): the fused linear +
# cross-entropy alone (torch.compile fuses the other kernels), or the fused layers alone (ZeRO-3 runs eager)
LIGER_FLCE_ONLY = dict(rope=False, rms_norm=False, swiglu=False, cross_entropy=False, fused_linear_cross_entropy=True)
LIGER_FUSED_LAYERS = dict(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False)

# The peers' DeepSpeed config: ZeRO-2 as transformers' DeepSpeed guide gives it (its buckets of 2e8 elements), every
# "auto" filled by the Trainer (bf16 from its bf16, the batch sizes, AdamW's settings: DeepSpeed's FusedAdam, a fused
# AdamW), DeepSpeed's defaults for the rest: what a practitioner writes, not `ds_config.build_ds_config`
PEER_ZERO2 = {
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "zero_optimization": {
        "stage": 2,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": 2e8,
        "allgather_bucket_size": 2e8,
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}
# Sequences per micro-batch, one micro-batch per optimizer step: 64 (issue 56's probes; 128 ran out of memory on an
# H100 80GB); --tiny: 8 of its 64 questions. TRL's packed rows hold ~3 questions each (512 tokens / 168 on average):
# 20 rows, about the tokens of 64 questions
PEER_MICRO_BATCH, PEER_MICRO_BATCH_TINY, PEER_PACKED_ROWS = 64, 8, 20


@dataclass(frozen=True)
class Peer:
    """One peer row (issue 56: each tool at its fastest documented setting on this image: torch 2.11, transformers
    5.17, accelerate 1.15, TRL 1.16, SDPA attention, no flash-attn wheel). `trainer`: "hf" (transformers' Trainer)
    or "trl" (TRL's SFTTrainer); `collate` (HF only): "no_mask" (right padding to the batch's longest, labels -100,
    no attention mask: exact for right-padded causal batches, and SDPA runs its mask-free kernels), "mask" (the same
    with the attention mask), "flatten" (DataCollatorWithFlattening: one row, position_ids restarting per question;
    transformers builds a block-diagonal mask from them for SDPA); `sharding`: "zero2" (`PEER_ZERO2`) or "fsdp2"
    (fsdp="full_shard auto_wrap", fsdp_version 2, one unit per decoder layer, torch's fused AdamW); `sft`:
    SFTConfig's own settings. Every row: bf16, Liger-Kernel on a GPU, lengths grouped, loss on the answer, no
    activation checkpointing, one micro-batch per step."""

    trainer: str = "hf"
    collate: str = "no_mask"
    sharding: str = "zero2"
    torch_compile: bool = False
    sft: tuple = ()  # SFTConfig's keyword arguments, as (key, value) pairs

    def micro_batch(self, tiny: bool) -> int:
        """Sequences (packed rows) per micro-batch: `PEER_MICRO_BATCH` (`PEER_PACKED_ROWS`), --tiny's for `tiny`."""
        if dict(self.sft).get("packing"):
            return 2 if tiny else PEER_PACKED_ROWS
        return PEER_MICRO_BATCH_TINY if tiny else PEER_MICRO_BATCH

    def configuration(self, tiny: bool = False) -> str:
        """The row's settings in one line, for the table's configuration column."""
        micro = self.micro_batch(tiny)
        if self.trainer == "trl":
            sft = dict(self.sft)
            rows = (
                f"{micro} packed rows of 512 tokens (BFD)"
                if sft.get("packing")
                else f"{micro} sequences length-grouped"
            )
            mode = "padding-free (one flattened row), " if sft.get("packing") or sft.get("padding_free") else ""
            return (
                f"TRL SFTTrainer, {rows}, {mode}prompt/completion (loss on the completion), TRL's fused LM head + "
                "Liger's layers, no activation checkpointing, ZeRO-2, bf16"
            )
        batch = {
            "no_mask": "right padding, labels -100, no attention mask",
            "mask": "right padding, labels -100, attention mask",
            "flatten": "DataCollatorWithFlattening (one row, position_ids; SDPA block-diagonal mask)",
        }[self.collate]
        shard = "FSDP2 (one unit per decoder layer), adamw_torch_fused" if self.sharding == "fsdp2" else "ZeRO-2"
        compiled = ", torch_compile" if self.torch_compile else ""
        return f"HF Trainer, {micro} sequences length-grouped, {batch}, Liger{compiled}, {shard}, bf16"


HF_PEER = "HF Trainer + ZeRO-2 + Liger (best)"
HF_FLAT = "HF Trainer + ZeRO-2 + Liger, padding-free (flattened)"
FSDP2_PEER = "HF Trainer + FSDP2 + Liger (best)"
TRL_PEER = "TRL SFTTrainer + ZeRO-2 + Liger (best)"
HF_COMPILE = "A/B: HF Trainer + ZeRO-2 + Liger, torch_compile"
# What each tool documents as its fastest setting (searched 2026-11-29): transformers' padding-free guide flattens with
# DataCollatorWithFlattening and "relies on a FlashAttention implementation"; without one, transformers 5 builds a
# block-diagonal mask from the position_ids for SDPA (masking_utils.find_packed_sequence_indices): exact, but a dense
# mask over the whole flattened row. TRL 1.16's padding_free and BFD packing are "only supported with FlashAttention
# 2 or 3"; its use_liger_kernel is deprecated (hub kernels) and it refuses Liger's fused linear cross-entropy (it
# has its own chunked LM head). transformers 5.20 drops the string form of `fsdp` (fsdp=True + fsdp_config), which
# the image's 5.17 still takes. The A/B rows last: a call stopped by its time limit keeps the best rows.
PEERS = {
    HF_PEER: Peer(),
    FSDP2_PEER: Peer(sharding="fsdp2"),
    TRL_PEER: Peer("trl"),
    HF_FLAT: Peer(collate="flatten"),
    "A/B: HF Trainer + ZeRO-2 + Liger, attention mask": Peer(collate="mask"),
    "A/B: TRL SFTTrainer + ZeRO-2 + Liger, packing + padding-free": Peer(
        "trl", sft=(("packing", True), ("packing_strategy", "bfd"))
    ),
    HF_COMPILE: Peer(torch_compile=True),
}


# (row label, RunConfig fields and the lab's own `liger`, Liger-Kernel's kernels applied by `Liger`, the
# peers' Trainer or the ceiling, on a GPU): the classic recipe; the default recipe before this benchmark (4 x 4
# sequences, every logit, no compile); the default recipe under each experiment; then A/B rows, each
# changing one lever of "default ZeRO-2"
BEFORE = dict(
    batching="group_by_length",
    train_micro_batch_size_per_gpu=4,
    gradient_accumulation_steps=4,
    drop_attention_mask=False,
    logits_on="all",
    torch_compile=False,
    reduce_bucket_size=0,
)
NO_OVERLAP = ["zero_optimization.overlap_comm=false"]
CORES_BOUND = "A/B: ZeRO-2 + CPU offload, cores bound (DeepSpeed's --bind_cores_to_rank)"  # run in `cores_bound`
CHUNKED = "A/B: ZeRO-2, 16k tokens, all logits, DeepSpeed's chunked cross-entropy"  # its loss by `ChunkedLoss`
BUCKETED = "A/B: ZeRO-2, one gradient hook per bucket"  # its hooks by `BucketHooks`
LIGER_LAYERS = "A/B: ZeRO-3, Liger-Kernel's RMSNorm, SwiGLU and RoPE"  # its layers by `Liger`
PACKED = "A/B: ZeRO-2, packed sequences (FlexAttention)"  # these two run within `packing.packed`
PACKED_NO_GC = "A/B: ZeRO-2, packed sequences, Python's garbage collector off"
CEILING, CEILING_PACKED = "plain PyTorch (ceiling)", "plain PyTorch (ceiling), packed sequences"  # run by `ceiling`
VARIANTS = [
    ("classic", dict(experiment="baseline", recipe="classic")),
    ("default before (4 x 4 sequences)", dict(experiment="baseline", **BEFORE)),
    ("default", dict(experiment="baseline")),
    ("default ZeRO-2", dict(experiment="stage2")),
    ("default ZeRO-2 + CPU offload", dict(experiment="stage2_offload")),
    ("default ZeRO-3", dict(experiment="stage3")),
    ("default FSDP2", dict(experiment="fsdp2")),  # PyTorch's fully_shard through the Trainer (notebook 03e)
    ("A/B: ZeRO-2, 16k tokens", dict(experiment="stage2", max_tokens_per_micro_batch=16384)),
    (
        "A/B: ZeRO-2, 16k tokens, without torch.compile",
        dict(experiment="stage2", max_tokens_per_micro_batch=16384, torch_compile=False),
    ),
    (
        "A/B: ZeRO-2, 16k tokens, all logits",
        dict(experiment="stage2", max_tokens_per_micro_batch=16384, logits_on="all"),
    ),
    (
        "A/B: ZeRO-2, 16k tokens, Liger instead",
        dict(experiment="stage2", max_tokens_per_micro_batch=16384, logits_on="all", liger=LIGER_FLCE_ONLY),
    ),
    ("A/B: ZeRO-2, 48k tokens", dict(experiment="stage2", max_tokens_per_micro_batch=49152)),
    ("A/B: ZeRO-2, 2 x 32k tokens (accumulation 2)", dict(experiment="stage2", gradient_accumulation_steps=2)),
    ("A/B: ZeRO-2, bf16 overflow check (DeepSpeed's default)", dict(experiment="stage2", check_grad_overflow=True)),
    # the default collates in 2 data loader workers (since 2026-11-27, lab/findings/h100/bench-collation-gc-loss);
    # each experiment's A/B collates in the training loop, as the default did before
    ("A/B: ZeRO-2, collation in the training loop", dict(experiment="stage2", dataloader_num_workers=0)),
    (
        "A/B: ZeRO-2 + CPU offload, collation in the training loop",
        dict(experiment="stage2_offload", dataloader_num_workers=0),
    ),
    ("A/B: ZeRO-3, collation in the training loop", dict(experiment="stage3", dataloader_num_workers=0)),
    ("A/B: ZeRO-2, gradient buckets hidden² (auto)", dict(experiment="stage2", reduce_bucket_size=0)),
    (
        "A/B: ZeRO-3, every parameter persistent (one GPU)",
        dict(experiment="stage3", ds_config=["zero_optimization.stage3_param_persistence_threshold=1000000000"]),
    ),
    (
        "A/B: ZeRO-2 + CPU offload, 4 x 32k tokens (accumulation 4)",
        dict(experiment="stage2_offload", gradient_accumulation_steps=4),
    ),
    # The levers of the profile (lab/findings/h100/bench-gap): ZeRO-2's per-tensor gradient norms and the clipping's
    # read-back, the device-wide syncs of overlap_comm (nothing to overlap with on one GPU). The Trainer's per-step
    # reads from the GPU (logging every 8 steps) and all three together had rows until 2026-11-29: within the noise
    # (lab/findings/h100/bench)
    ("A/B: ZeRO-2, no gradient norm (max_grad_norm 0: no clipping)", dict(experiment="stage2", max_grad_norm=0)),
    ("A/B: ZeRO-2, overlap_comm off (one GPU)", dict(experiment="stage2", ds_config=NO_OVERLAP)),
    ("A/B: ZeRO-3, torch.compile", dict(experiment="stage3", torch_compile_zero3=True)),
    # issue 42's levers not in the rows above: Python's cyclic garbage collector off for the run (DeepSpeed's own
    # setting); DeepSpeed's chunked cross-entropy (every position's logits, never in fp32) against the workshop's
    # logits at the labelled positions only ("A/B: ZeRO-2, 16k tokens") and the stock loss ("..., all logits")
    (
        "A/B: ZeRO-2, Python's garbage collector off (disable_python_gc)",
        dict(experiment="stage2", ds_config=["disable_python_gc=true"]),
    ),
    (CHUNKED, dict(experiment="stage2", max_tokens_per_micro_batch=16384, logits_on="all")),
    # if ZeRO-2's per-parameter gradient hooks are the floor (lab/findings/h100/bench): one hook per bucket
    (BUCKETED, dict(experiment="stage2")),
    # ZeRO-3 runs eager (torch.compile is slower under it): its profile's GPU time goes to unfused elementwise
    # kernels (lab/findings/h100/bench); Liger-Kernel's Triton kernels fuse them without torch.compile
    (LIGER_LAYERS, dict(experiment="stage3", liger=LIGER_FUSED_LAYERS)),
    # fixed shapes: every micro-batch one row of 32k tokens, questions end to end, FlexAttention (lab/packing.py)
    (PACKED, dict(experiment="stage2")),
    (PACKED_NO_GC, dict(experiment="stage2", ds_config=["disable_python_gc=true"])),
    (CORES_BOUND, dict(experiment="stage2_offload")),
    # The peers (issues 42, 56): what a practitioner writes without the workshop's engine, run by `peer` (`PEERS`)
    *[(label, dict(experiment="stage2", liger={}, logits_on="all")) for label in PEERS],
]
# The table's figures: results.json keys, shown under their `results.title`
COLUMNS = [
    "steady_train_tokens_per_second",
    "steady_train_samples_per_second",
    "steady_step_time_s",
    "mfu",
    "gpu_util_pct",
    "gpu_peak_allocated_mib",
    "gpu_peak_mib",
    "host_peak_rss_mib",
    "train_loss",
]


def run_dir_name(label: str) -> str:
    """A row's run directory under OUT/runs: "A/B: ZeRO-2, 16k tokens" -> A_B_ZeRO-2_16k_tokens,
    "default ZeRO-2 + CPU offload" -> default_ZeRO-2_plus_CPU_offload."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", label.replace("+", "plus")).strip("_")


@contextmanager
def cores_bound(on: bool = True):
    """DeepSpeed's `--bind_cores_to_rank` for this one process (rank 0 of 1), within the block: the cores and
    thread count DeepSpeed's launcher gives that rank (`deepspeed.utils.numa.get_numactl_cmd`: `numactl -C`
    and OMP_NUM_THREADS = its cores), applied with `os.sched_setaffinity` and `torch.set_num_threads`; not
    its memory binding (`numactl -m`: one NUMA node on the machines measured). Restored on exit. Nothing
    when `on` is False."""
    if not on:
        yield
        return
    from deepspeed.utils.numa import get_numactl_cmd, parse_range_list  # the launcher's own rule

    cores_per_rank, cmd = get_numactl_cmd(None, 1, 0)
    affinity, threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, parse_range_list(cmd[cmd.index("-C") + 1]))
    torch.set_num_threads(cores_per_rank)
    print(f"cores bound as DeepSpeed's launcher would: {' '.join(cmd)}, {cores_per_rank} threads", flush=True)
    try:
        yield
    finally:
        os.sched_setaffinity(0, affinity)
        torch.set_num_threads(threads)


def ceiling(cfg: RunConfig, steps: int, packed: bool = False, liger: dict | None = None) -> dict:
    """A plain PyTorch training loop on the model and data of `cfg` (resolved): the weights in the run's
    16-bit type, the logits and compile settings of `cfg`, Liger-Kernel's `liger` kernels on a GPU, torch's fused
    AdamW, the same token-budget batches (with `packed`, `packing`'s rows, FlexAttention and blocks compiled for
    the one shape), no KV cache (as under the Trainer), no Trainer, no DeepSpeed, `steps` optimizer steps timed
    with a CUDA sync. The fastest this model and data train here without the workshop's machinery. Returns the
    same figures as a run's results.json."""
    cuda = torch.cuda.is_available()
    net, tok, info = load_model_and_tokenizer(
        cfg.model,
        tiny=cfg.tiny,
        random_weights=cfg.random_weights,
        attn_implementation=packing.ATTENTION if packed else None,
    )
    net.config.use_cache = False
    ds, stats = tokenize_squad(
        load_squad("train", cfg.num_train_samples, cfg.train_file, verbose=False), tok, cfg.max_length, cfg.loss_on
    )
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision, torch.float32)
    net = net.to("cuda" if cuda else "cpu", dtype).train()  # as the Trainer does (eval mode builds a KV cache)
    apply_speed_levers(net, replace(cfg, torch_compile=cfg.torch_compile and not packed))
    if packed and cfg.torch_compile:
        packing.compile_layers_static(net)
    if liger is not None and cuda:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance  # optional, GPU only (Triton)

        _apply_liger_kernel_to_instance(model=net, **liger)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay, fused=cuda)
    if packed:
        collate = packing.pack_collator(tok.pad_token_id, cfg.max_tokens_per_micro_batch, cfg.logits_on == "labelled")
    else:
        collate = make_collator(
            tok,
            cfg.padding,
            cfg.max_length,
            attention_mask=not cfg.drop_attention_mask,
            labelled_positions=cfg.logits_on == "labelled",
        )
    sampler = packing.PackedBatchSampler if packed else TokenBudgetBatchSampler
    batches = list(sampler.for_dataset(ds, cfg.max_tokens_per_micro_batch, cfg.seed))
    times, tokens = [], []
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for i in range(steps):
        batch = {k: v.to(net.device) for k, v in collate([ds[j] for j in batches[i % len(batches)]]).items()}
        t0 = time.perf_counter()
        net(**batch).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        tokens.append(int((batch["input_ids"] != tok.pad_token_id).sum()))  # non-padding, as the Trainer counts
    figures = steady_figures(cfg, info, stats, times, tokens, round(len(ds) / len(batches), 1))
    peak = round(torch.cuda.max_memory_allocated() / MiB, 1) if cuda else None
    del net, opt
    torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return figures | {"gpu_peak_allocated_mib": peak}


def steady_figures(
    cfg: RunConfig,
    info: dict,
    stats,
    times: list[float],
    tokens: list[int],
    global_batch: float,
    compiles: list[int] | None = None,
) -> dict:
    """The steady-state figures of a row that is no workshop run (the ceiling, a peer) from its step log, as
    `record.record` computes a run's: `metrics.steady_state` over each optimizer step's seconds and non-padding
    tokens (`global_batch`: sequences per step), MFU at its steady tokens/s (`run_mfu`, one GPU)."""
    steady = metrics.steady_state(times, tokens, global_batch, compiles)
    mfu, _ = run_mfu(cfg, info, stats, steady["steady_train_tokens_per_second"], 1)
    return steady | {"mfu": round(mfu, 4) if mfu is not None else None}


class ChunkedLoss(TrainerCallback):
    """`CHUNKED`'s loss: DeepSpeed's `install_chunked_causal_lm_loss` (deepspeed/runtime/chunked_cross_entropy.py,
    a Triton kernel on a GPU) makes the model's loss function a chunked cross-entropy that keeps one fp32
    log-sum-exp per token instead of fp32 [tokens, vocab] logits; installed as training begins, on the model the
    Trainer holds (its blocks compiled, its loss not)."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from deepspeed.runtime.chunked_cross_entropy import install_chunked_causal_lm_loss

        install_chunked_causal_lm_loss(model)


class Liger(TrainerCallback):
    """A workshop row's Liger-Kernel: its `kernels` (`LIGER_FUSED_LAYERS`, the default: the fused RMSNorm, SwiGLU MLP
    and rotary embedding, Triton kernels, no torch.compile needed; `LIGER_FLCE_ONLY`: the fused linear +
    cross-entropy; `liger_kernel.transformers.apply_liger_kernel_to_qwen3` and its kin) on the model the Trainer
    holds, as training begins; on a CPU (no Triton) nothing is patched. Liger also replaces the model classes'
    module globals: they are restored as training ends, for the rows after.

    Raises:
        WorkshopError: Liger-Kernel missing on a GPU."""

    def __init__(self, kernels: dict = LIGER_FUSED_LAYERS):
        self.kernels = kernels

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not torch.cuda.is_available():
            return
        try:
            from liger_kernel.transformers import _apply_liger_kernel_to_instance
        except ImportError as e:
            raise WorkshopError(
                f"Liger-Kernel is not installed ({e}): its row is skipped.",
                "pip install liger-kernel (0.8.5 measured) to run it.",
            ) from e
        self.module = sys.modules[type(model).__module__]
        self.saved = {k: getattr(self.module, k) for k in dir(self.module) if not k.startswith("_")}
        _apply_liger_kernel_to_instance(model=model, **self.kernels)

    def on_train_end(self, *args, **kwargs):
        for k, v in getattr(self, "saved", {}).items():
            setattr(self.module, k, v)


def hook_buckets(params: list, elements: int) -> list[list]:
    """`params` ((group index, parameter) pairs, in the order their gradients come) in consecutive buckets of up to
    `elements` elements; a parameter larger than that is a bucket of its own."""
    buckets, size = [[]], 0
    for i, p in params:
        if buckets[-1] and size + p.numel() > elements:
            buckets.append([])
            size = 0
        buckets[-1].append((i, p))
        size += p.numel()
    return buckets


def bucket_hooks(zero, elements: int = 50_000_000) -> int:
    """Replace ZeRO-1/2's gradient hook per parameter with one per bucket of parameters. DeepSpeed 0.19.8's hook
    (stage_1_and_2.py, `create_gradient_handling_hooks`) runs, for every parameter, the backward's bookkeeping
    (`should_refresh_expected_hook_count`, `update_hook_state_and_maybe_run_epilogue`) and then `process_gradients`,
    which copies the gradient into DeepSpeed's reduction bucket. Here the parameters are grouped in reverse order of
    registration (the backward's order) into buckets of up to `elements` elements; each parameter keeps only a
    counter, and when a bucket's last gradient is accumulated, DeepSpeed's own `process_gradients` runs for each of
    its parameters, so the reduction is DeepSpeed's. A bucket a backward left part-way (a parameter without a
    gradient) is processed at the backward's end, before the engine's epilogue, which the engine queues itself
    (`DeepSpeedEngine._backward_prologue`). The cost: a bucket's gradients stay allocated until it is complete, up
    to `elements` x 2 bytes in bf16. `zero`: the engine's ZeRO-1/2 optimizer (`DeepSpeedZeroOptimizer`).
    Returns the number of buckets."""
    for handle in zero._grad_acc_hooks:
        handle.remove()
    zero._grad_acc_hooks.clear()
    params = [(i, p) for i, group in enumerate(zero.bit16_groups) for p in group if p.requires_grad]
    buckets = hook_buckets(params[::-1], elements)
    left = [len(b) for b in buckets]

    def process(k: int) -> None:
        for i, p in buckets[k]:
            if p.grad is not None:
                zero.process_gradients(p, i)
        left[k] = len(buckets[k])

    def counter(k: int):
        def hook(_param) -> None:
            left[k] -= 1
            if left[k] == 0:
                process(k)

        return hook

    def flush() -> None:
        for k, n in enumerate(left):
            if n != len(buckets[k]):
                process(k)

    for k, bucket in enumerate(buckets):
        zero._grad_acc_hooks += [p.register_post_accumulate_grad_hook(counter(k)) for _, p in bucket]
    zero._backward_hook_state._grad_acc_post_hooks.insert(0, flush)
    return len(buckets)


class BucketHooks(TrainerCallback):
    """`BUCKETED`'s hooks: `bucket_hooks` on the ZeRO optimizer the Trainer holds, as training begins."""

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        while not hasattr(optimizer, "_grad_acc_hooks"):  # accelerate's wrapper, then DeepSpeed's optimizer
            optimizer = optimizer.optimizer
        print(f"{bucket_hooks(optimizer)} gradient hooks per bucket replace the per-parameter hooks", flush=True)


def row_error(e: Exception) -> str:
    """A failed or skipped row's entry in the table, one line: a `WorkshopError`'s problem and fix, else the error's
    first line."""
    text = f"{e.problem} To fix: {e.fix}" if isinstance(e, WorkshopError) else (str(e).splitlines() or [""])[0]
    return f"{type(e).__name__}: {text}"


class SyncedStepLog(StepLog):
    """The workshop's step log (train_log.csv, the same columns) for a peer's Trainer, each optimizer step's end
    waiting for the GPU first: the Trainer's own syncs (the tokens read back after each backward) come before the
    optimizer step, whose GPU time would otherwise fall into the next step's."""

    def on_step_end(self, args, state, control, **kw):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        super().on_step_end(args, state, control, **kw)


@contextmanager
def peer_process_state():
    """cuDNN's SDPA kernel as torch has it (on) within the block, and the environment as it was on entry after it:
    `apply_speed_levers` turns cuDNN's SDPA off process-wide for the workshop's rows and the ceiling, and a peer gets
    torch's defaults, as in a process of its own; an FSDP row's TrainingArguments set FSDP_* and ACCELERATE_USE_FSDP
    in os.environ, which would make the next Trainer in the process an FSDP one."""
    was, environ = torch.backends.cuda.cudnn_sdp_enabled(), dict(os.environ)
    torch.backends.cuda.enable_cudnn_sdp(True)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
        for k in set(os.environ) - set(environ):
            del os.environ[k]
        os.environ.update(environ)


def hf_collator(tok, collate: str):
    """A Trainer peer's collator: transformers' DataCollatorWithFlattening ("flatten"), or its DataCollatorForSeq2Seq
    (right padding to the batch's longest, labels padded with -100) with the attention mask dropped ("no_mask") or
    kept ("mask")."""
    from transformers import DataCollatorForSeq2Seq, DataCollatorWithFlattening

    if collate == "flatten":
        return DataCollatorWithFlattening()
    pad = DataCollatorForSeq2Seq(tok, padding="longest", label_pad_token_id=-100)
    if collate == "mask":
        return pad
    return lambda features: {k: v for k, v in pad(features).items() if k != "attention_mask"}


def peer_trainer(spec: Peer, net, tok, raw, ds, cfg: RunConfig, args: dict):
    """The Trainer of a peer row: transformers' Trainer on the questions tokenised as the workshop does (`ds`:
    `data.tokenize_squad` of `raw`, loss on the answer) with `hf_collator`; or TRL's SFTTrainer on prompt/completion
    pairs of `raw`, the workshop's prompt (`data.PROMPT`) cut before the answer, which TRL tokenises (truncated or
    packed at max_length), pads or flattens, and takes the loss on the completion (its default for such data).

    Raises:
        WorkshopError: TRL is not installed, for a TRL row."""
    from transformers import Trainer, TrainingArguments

    if spec.sharding == "fsdp2":
        layers = list(getattr(net, "_no_split_modules", None) or [])  # the decoder layer's class: one unit each
        args = {k: v for k, v in args.items() if k != "deepspeed"} | dict(
            fsdp="full_shard auto_wrap",
            fsdp_config={"fsdp_version": 2, "transformer_layer_cls_to_wrap": layers, "reshard_after_forward": True},
            optim="adamw_torch_fused",
        )
    if spec.trainer == "hf":
        return Trainer(
            model=net,
            args=TrainingArguments(**args, torch_compile=spec.torch_compile),
            train_dataset=ds,
            processing_class=tok,
            data_collator=hf_collator(tok, spec.collate),
        )
    try:
        from trl import SFTConfig, SFTTrainer
    except ImportError as e:
        raise WorkshopError(
            f"TRL is not installed ({e}): its row is skipped.", "pip install trl (1.16.0 measured) to run it."
        ) from e

    def pair(ex):
        return {
            "prompt": PROMPT_HEAD.format(question=ex["question"]) + f" {ex['context']}" + PROMPT_TAIL,
            "completion": f" {ex['answers']['text'][0]}",
        }

    sft = dict(max_length=cfg.max_length, gradient_checkpointing=False, completion_only_loss=True) | dict(spec.sft)
    return SFTTrainer(
        model=net,
        args=SFTConfig(**args, **sft),
        processing_class=tok,
        train_dataset=raw.map(pair, remove_columns=raw.column_names),
    )


def peer(label: str, cfg: RunConfig, liger: dict | None = None) -> dict:
    """A peer's row: the Trainer `peer_trainer` builds for `PEERS[label]`, on the model and questions of `cfg`
    (stage2, checked as a workshop run is: `check_machine`), bf16, Liger-Kernel's `liger` kernels on a GPU (the
    Trainer's use_liger_kernel), `PEER_MICRO_BATCH` sequences a step (`PEER_PACKED_ROWS` packed rows), lengths grouped
    (transformers 5's train_sampling_strategy), no checkpoint; `cfg.max_steps` steps logged by `SyncedStepLog` into
    OUTPUT_DIR/train_log.csv (non-padding tokens: the Trainer's include_num_input_tokens_seen) and memory sampled
    into memory.csv, then the row's figures from that directory (`run_dir_figures`). Returns results.json's keys of
    `COLUMNS`.

    Raises:
        WorkshopError: what `check_machine` raises; Liger-Kernel missing on a GPU; TRL missing for its rows."""
    out, spec = Path(cfg.output_dir), PEERS[label]
    env.quiet_libraries()
    teardown.free_memory()  # as `run_experiment` starts: the rows before hold nothing while this one measures
    with teardown.restored_world():  # the rank variables of a world of one go when the row ends, as a run's
        cfg = check_machine(resolve(cfg), EXPERIMENTS[cfg.experiment])
        liger = liger if torch.cuda.is_available() else None  # Triton's kernels need a GPU
        if liger is not None and importlib.util.find_spec("liger_kernel") is None:
            raise WorkshopError(
                "Liger-Kernel is not installed: the peers' rows use it on a GPU.",
                "pip install liger-kernel (0.8.5 measured).",
            )
        if spec.sharding == "fsdp2" and not torch.cuda.is_available():
            raise WorkshopError(
                "accelerate shards with FSDP on GPUs only (on a CPU the Trainer would run DDP): the FSDP2 row is "
                "skipped.",
                "run the benchmark on a GPU.",
            )
        if spec.torch_compile and not torch.cuda.is_available():  # its first step took 7 min on a shared CPU
            raise WorkshopError(
                "the torch_compile row asks whether torch.compile works with Liger-Kernel's Triton kernels, which "
                "need a GPU: the row is skipped.",
                "run the benchmark on a GPU.",
            )
        set_seed(cfg.seed)  # the workshop rows' random init
        net, tok, info = load_model_and_tokenizer(
            cfg.model, tiny=cfg.tiny, random_weights=cfg.random_weights, attn_implementation=None
        )
        tok.padding_side = "right"  # labels -100 and no mask are exact only for right padding
        raw = load_squad("train", cfg.num_train_samples, cfg.train_file, verbose=False)
        ds, stats = tokenize_squad(raw, tok, cfg.max_length, "answer")  # the Trainer rows' data; MFU: mean length
        micro = spec.micro_batch(cfg.tiny)
        args = dict(
            output_dir=str(out / "checkpoints"),
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=1,
            learning_rate=cfg.learning_rate,
            weight_decay=cfg.weight_decay,
            max_steps=cfg.max_steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=cfg.seed,
            bf16=cfg.precision == "bf16",
            use_cpu=not torch.cuda.is_available(),
            deepspeed=PEER_ZERO2,
            use_liger_kernel=liger is not None,
            liger_kernel_config=liger or None,
            include_num_input_tokens_seen="non_padding",
            train_sampling_strategy="group_by_length",
        )
        with peer_process_state(), memory.MemorySampler(out / "memory.csv") as mem:
            trainer = peer_trainer(spec, net, tok, raw, ds, cfg, args)
            try:
                for callback in (SyncedStepLog(out / "train_log.csv", mem.t0), Phases(mem)):
                    trainer.add_callback(callback)
                trainer.train()
            finally:
                teardown.release(trainer)
    return run_dir_figures(out, cfg, info, stats, micro, mem)


def run_dir_figures(out: Path, cfg: RunConfig, info: dict, stats, global_batch: float, mem) -> dict:
    """A peer's figures from its run directory `out`: the steady state from train_log.csv's optimizer steps (the
    columns `StepLog` writes for every run: step_time_s, tokens, compiles) by `steady_figures`; NVML's mean GPU
    utilisation over the steady steps (time_s: the memory sampler's clock); the memory peaks
    (`MemorySampler.summary`); the mean logged loss."""
    log = pd.read_csv(out / "train_log.csv").dropna(subset=["step_time_s"])
    figures = steady_figures(
        cfg,
        info,
        stats,
        log["step_time_s"].tolist(),
        log["tokens"].astype(int).tolist(),
        global_batch,
        log["compiles"].astype(int).tolist(),
    )
    warm_end = log["time_s"].iloc[figures["warmup_steps"] - 1] if figures["warmup_steps"] else 0.0
    return (
        figures
        | mem.summary()
        | {
            "gpu_util_pct": memory.mean_gpu_util(mem.rows, warm_end, log["time_s"].iloc[-1]),
            "train_loss": round(log["loss"].mean(), 4),
        }
    )


def configuration(label: str, fields: dict, tiny: bool = False) -> str:
    """A row's settings in one line, the table's configuration column: a peer's `Peer.configuration`, the ceiling's
    loop, or a workshop row's `workshop run` experiment and the RunConfig fields it changes (`fields`: the row's
    entry in `VARIANTS`, its `liger` kernels among them)."""
    if label in PEERS:
        return PEERS[label].configuration(tiny)
    if label in (CEILING, CEILING_PACKED):
        rows = "packed rows, FlexAttention" if label == CEILING_PACKED else "the recipe's token-budget batches, SDPA"
        return f"plain PyTorch loop: bf16 weights, torch.compile, fused AdamW, {rows}; no Trainer, no DeepSpeed"
    fields = dict(fields)
    liger = fields.pop("liger", None)
    levers = {  # what the rows run by the lab's own code change, beyond their RunConfig fields
        PACKED: "packed rows (FlexAttention)",
        PACKED_NO_GC: "packed rows (FlexAttention)",
        CHUNKED: "DeepSpeed's chunked cross-entropy",
        BUCKETED: "one gradient hook per bucket",
        CORES_BOUND: "cores bound as --bind_cores_to_rank",
    }
    text = ", ".join(
        [f"workshop run {fields.pop('experiment')}", *(f"{k}={v}" for k, v in fields.items())]
        + ([levers[label]] if label in levers else [])
    )
    if liger is not None:
        text += ", Liger-Kernel: " + (" + ".join(k for k, on in liger.items() if on) or "its defaults")
    return text


def run_bench(
    out_dir: str | Path = "bench",
    model: str | None = None,
    max_steps: int = 30,
    tiny: bool = False,
    only: list[str] | None = None,
    num_train_samples: int | None = None,
) -> dict[str, Path]:
    """Run `VARIANTS` (or those whose labels are in `only`, plus `CEILING`; `CEILING_PACKED` too unless `only`
    leaves it out; the peers' by `peer`) for
    `max_steps` optimizer steps each on this machine's GPU, random weights, on the first `num_train_samples`
    questions (None: each recipe's), and write the table
    (bench.md, bench.csv) and a plot (bench.png: steady tokens/s and MFU per row) into `out_dir`, each run's
    directory beside them. bench.csv is rewritten after every row, so a benchmark stopped part-way (a time
    limit) keeps the rows it finished.
    Returns {name: path}. A row that fails (out of memory, say) is kept in the table with its error."""
    titles = {k: title(k) for k in COLUMNS}
    out = Path(out_dir)

    def pick(figures: dict) -> dict:
        return {k: figures.get(k) for k in COLUMNS}

    # the machine checked before the first row: nothing is written where the benchmark cannot run (no GPU)
    base = check_machine(
        resolve(
            RunConfig(
                "baseline",
                model=model,
                tiny=tiny,
                random_weights=not tiny,
                num_train_samples=num_train_samples,
                output_dir=str(out / "runs" / "ceiling"),
            )
        ),
        EXPERIMENTS["baseline"],
    )
    rows = []
    # the ceiling first: a peer's Liger-Kernel patches transformers' model classes for the rest of the process,
    # and torch.compile fails on those kernels (a ceiling made after the peers ran uncompiled, at 0.80x of a
    # workshop row, lab/findings/h100/bench-peers)
    for label in [CEILING] + ([CEILING_PACKED] if not only or CEILING_PACKED in only else []):
        print(f"\n=== {label} ===", flush=True)
        try:
            figures = ceiling(base, max_steps, packed=label == CEILING_PACKED)
            rows.append({"row": label, "configuration": configuration(label, {}, tiny)} | pick(figures))
        except Exception as e:  # noqa: BLE001 - kept in the table, like a row's
            rows.append({"row": label, "configuration": configuration(label, {}, tiny), "error": row_error(e)})
    for label, fields in VARIANTS:
        if only and label not in only:
            continue
        fields = dict(fields)
        conf = configuration(label, fields, tiny)
        liger = fields.pop("liger", None)  # the lab's own setting, not a RunConfig field
        cfg = RunConfig(
            **fields,
            model=model,
            tiny=tiny,
            random_weights=not tiny,
            max_steps=max_steps,
            num_train_samples=num_train_samples,
            output_dir=str(out / "runs" / run_dir_name(label)),
            overwrite=True,
            save_strategy="no",
            save_model=False,
        )  # no checkpoint (8-10 GB a row), no model
        print(f"\n=== {label} ===", flush=True)
        try:
            packed = packing.packed() if label in (PACKED, PACKED_NO_GC) else nullcontext()
            with cores_bound(label == CORES_BOUND), packed:
                callbacks = {CHUNKED: [ChunkedLoss()], BUCKETED: [BucketHooks()]}.get(label, [])
                callbacks += [Liger(liger)] if liger is not None else []
                r = peer(label, cfg, liger) if label in PEERS else run_experiment(cfg, callbacks=callbacks)
            rows.append({"row": label, "configuration": conf} | pick(r))
        except Exception as e:  # noqa: BLE001 - out of memory, a compile failure: the row says so, the rest run
            rows.append({"row": label, "configuration": conf, "error": row_error(e)})
        out.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).rename(columns=titles).to_csv(out / "bench.csv", index=False)
    df = pd.DataFrame(rows)
    # ratios of steady tokens/s (all steady tokens over their time, so also for a row whose steps are not alike)
    tps = df.set_index("row")["steady_train_tokens_per_second"]
    nan = float("nan")
    ours = tps.drop(["classic", CEILING, CEILING_PACKED, *PEERS], errors="ignore").dropna()
    best = ours.idxmax() if len(ours) else "default ZeRO-2"  # none: the peers alone (--only)
    target = "default ZeRO-2" if pd.notna(tps.get("default ZeRO-2", nan)) else best
    ratios = {
        f"{target} / classic": tps.get(target, nan) / tps.get("classic", nan),
        f"{target} / {CEILING}": tps.get(target, nan) / tps.get(CEILING, nan),
        "default / default before (4 x 4 sequences)": tps.get("default", nan)
        / tps.get("default before (4 x 4 sequences)", nan),
        f"fastest row ({best}) / classic": tps.get(best, nan) / tps.get("classic", nan),
        "default ZeRO-3 / default ZeRO-2": tps.get("default ZeRO-3", nan) / tps.get("default ZeRO-2", nan),
        "default FSDP2 / default ZeRO-3": tps.get("default FSDP2", nan) / tps.get("default ZeRO-3", nan),
        "default FSDP2 / default ZeRO-2": tps.get("default FSDP2", nan) / tps.get("default ZeRO-2", nan),
        f"{LIGER_LAYERS} / default ZeRO-3": tps.get(LIGER_LAYERS, nan) / tps.get("default ZeRO-3", nan),
        f"{LIGER_LAYERS} / default ZeRO-2": tps.get(LIGER_LAYERS, nan) / tps.get("default ZeRO-2", nan),
        # fixed shapes: what packing buys the plain loop, and the packed row against both ceilings
        f"{CEILING_PACKED} / {CEILING}": tps.get(CEILING_PACKED, nan) / tps.get(CEILING, nan),
        f"{PACKED} / {CEILING}": tps.get(PACKED, nan) / tps.get(CEILING, nan),
        f"{PACKED} / {CEILING_PACKED}": tps.get(PACKED, nan) / tps.get(CEILING_PACKED, nan),
        f"{PACKED} / default ZeRO-2": tps.get(PACKED, nan) / tps.get("default ZeRO-2", nan),
    }
    for name in [p for p in PEERS if not p.startswith("A/B")]:  # the lead over a practitioner's best (issue 56)
        ratios[f"default ZeRO-2 / {name}"] = tps.get("default ZeRO-2", nan) / tps.get(name, nan)
    ratios[f"{FSDP2_PEER} / {HF_PEER}"] = tps.get(FSDP2_PEER, nan) / tps.get(HF_PEER, nan)
    ratios[f"{FSDP2_PEER} / default ZeRO-3"] = tps.get(FSDP2_PEER, nan) / tps.get("default ZeRO-3", nan)
    offload = tps[[r for r in tps.index if "offload" in r.lower()]].dropna()
    if len(offload):
        ratios[f"fastest offload row ({offload.idxmax()}) / default ZeRO-2"] = offload.max() / tps.get(
            "default ZeRO-2", nan
        )
    table = df.rename(columns=titles)
    files = {"md": out / "bench.md", "csv": out / "bench.csv", "png": out / "bench.png"}
    out.mkdir(parents=True, exist_ok=True)
    files["md"].write_text(
        table.to_markdown(index=False)
        + "\n\n"
        + "\n".join(
            f"- {k} ({titles['steady_train_tokens_per_second']}): {v:.2f}x" for k, v in ratios.items() if pd.notna(v)
        )
        + "\n"
    )
    table.to_csv(files["csv"], index=False)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.barh(df["row"], df["steady_train_tokens_per_second"].fillna(0), color="tab:green")
    a.set(xlabel="steady-state training tokens/s (non-padding: all steady tokens / their time)", title="Throughput")
    b.barh(df["row"], 100 * df["mfu"].fillna(0))
    b.set(xlabel="MFU, % of the GPU's dense bf16 peak", title="Model FLOPs utilisation")
    b.set_yticklabels([])
    for ax in (a, b):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(files["png"], dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(files["md"].read_text())
    return files


@dataclass
class BenchConfig:
    """The benchmark's settings: every row of `VARIANTS` and the plain-PyTorch ceiling, one GPU, one process."""

    out: str = field(default="bench", metadata={"help": "where to write", "metavar": "DIR"})
    model: str | None = field(default=None, metadata={"help": "hub name or local directory (default: each recipe's)"})
    max_steps: int = field(default=30, metadata={"help": "optimizer steps per row", "metavar": "N"})
    tiny: bool = field(default=False, metadata={"help": "the tiny model (a CPU check of the benchmark itself)"})
    only: list[str] | None = field(
        default=None, metadata={"help": "only these rows (labels of VARIANTS)", "metavar": "ROW", "nargs": "+"}
    )


def main(argv: list[str] | None = None) -> int:
    from transformers import HfArgumentParser

    (cfg,) = HfArgumentParser(BenchConfig).parse_args_into_dataclasses(argv)
    try:
        run_bench(cfg.out, cfg.model, cfg.max_steps, cfg.tiny, cfg.only)
    except WorkshopError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
