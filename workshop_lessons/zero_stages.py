"""Notebook 02's figures and verdicts, computed from its runs (results.json dicts by run name): baseline,
stage1, stage2, stage3, baseline_ac (the baseline with activation checkpointing) and, where it ran,
baseline_no_compile (the baseline without torch.compile, as ZeRO-3 runs). The solution notebook writes the
answers from them.

What DeepSpeed 0.19.8 does on one GPU, as notebook 02 states it (each function cited as module:qualname;
tests/test_deepspeed_citations.py resolves every such citation in the lessons' docstrings in the installed DeepSpeed):
- ZeRO-3 never gathers on one rank: its all_gather_coalesced sees a partition world of one and returns
  `deepspeed.runtime.zero.partition_parameters:_no_gather_coalesced`, whose
  `deepspeed.runtime.zero.partition_parameters:NoGatherCoalescedHandle` points param.data at the rank's own
  ds_tensor: no collective, no copy. Its cost on one GPU is host work: hooks on every module
  (`deepspeed.runtime.zero.parameter_offload:DeepSpeedZeRoOffload.setup_zero_stage3_hooks`) that fetch and release
  each module's parameters, in
  `deepspeed.runtime.zero.partitioned_param_coordinator:PartitionedParameterCoordinator.fetch_sub_module`,
  and, as ZeRO-3 runs without torch.compile here, uncompiled elementwise kernels
  (lab/findings/h100/bench-zero3-offload profiles both).
- stage3_param_persistence_threshold: a parameter of at most that many elements persists
  (`deepspeed.runtime.zero.partition_parameters:Init._convert_to_deepspeed_param`): it stays whole between uses,
  still has a partition for the optimizer step and is all-gathered after every step
  (`deepspeed.runtime.zero.stage3:DeepSpeedZeroOptimizer_Stage3._post_step`). On one GPU neither moves anything.
- What stage 3 keeps from its start
  (`deepspeed.runtime.zero.stage3:DeepSpeedZeroOptimizer_Stage3._setup_for_real_optimizer`): with
  contiguous_gradients one bucket of reduce_bucket_size elements per communication dtype, and a gradient
  partition for every parameter; overlap_comm chooses only the stream the
  bucket is reduced on (`deepspeed.runtime.zero.stage3:DeepSpeedZeroOptimizer_Stage3.__init__`). Hence `OWN_KEYS`.
- Stages 1-2 (`OVERLAP_COMM`): `deepspeed.runtime.zero.stage_1_and_2:DeepSpeedZeroOptimizer.setup_buckets`."""

from __future__ import annotations

from dataclasses import dataclass, fields

from workshop_lib.config import RunConfig
from workshop_lib.ds_config import EXPERIMENTS, apply_overrides, build_ds_config, gradient_bucket_mib
from workshop_lib.results import hfu
from workshop_lib.units import MiB

from .baseline import NvmlSplit, compare_peak, compare_speed, gpu_share, gpu_total_mib, number, nvml_split, peak, speed
from .comparisons import Comparison, compare

STAGES = ["stage1", "stage2", "stage3"]
LOSS_AGREE = 0.01  # relative spread of the ZeRO stages' train losses below which we call them in agreement
NEAR_LIMIT = 0.95  # an NVML peak above this share of the GPU's memory is at its limit (4 GiB from it on 80 GB)


def compiled(r: dict) -> bool:
    """Whether the run compiled its transformer blocks (the resolved config's torch_compile)."""
    return bool(r["config"].get("torch_compile"))


@dataclass(frozen=True)
class Stage:
    """One ZeRO stage against the baseline, on one GPU. Memory in MiB."""

    name: str
    peak: Comparison  # its peak (GPU allocated, else host RSS) against the baseline's
    states_mib: float | None  # model states measured after step 1 (None without a GPU)
    estimated_states_mib: float
    estimator: str
    nvml: NvmlSplit | None
    cache_inflated: bool  # lower peak allocated than the baseline but higher NVML peak: allocator cache
    speed: Comparison  # its tokens/s against the baseline's
    compiled: bool


@dataclass(frozen=True)
class ZeroStages:
    """Notebook 02's exercises 1-4."""

    on_gpu: bool
    peak_what: str  # what `peak` measured: torch's peak allocated GPU memory, or the host's peak RSS
    baseline_states_mib: float | None
    baseline_nvml: NvmlSplit | None
    stages: dict[str, Stage]
    slowest: str  # of baseline and the three stages, by tokens/s
    slowest_apart: bool  # the slowest is slower than the others by more than the band (else: within the noise)
    speed_kind: str  # "steady-state" or "whole-run"
    stage3_uncompiled: bool  # the baseline compiled its blocks and stage 3 did not: not only ZeRO differs
    # stage 3 against the baseline run with its own compile setting: "baseline", or "baseline_no_compile" where
    # the baseline compiled and stage 3 did not; None (and the two comparisons None) where that run is missing
    stage3_like: str | None
    stage3_like_peak: Comparison | None
    stage3_like_speed: Comparison | None
    # the compilation's own effect: the baseline against baseline_no_compile (None where that did not run)
    compile_peak: Comparison | None
    compile_speed: Comparison | None
    stage3_gpu_share: float | None  # stage 3's NVML peak / the GPU's memory (`baseline.gpu_share`)
    stage3_gpu_total_mib: float | None
    losses: dict[str, float]  # run -> train loss, nats
    loss_spread: float  # max - min over the three stages, nats
    losses_agree: bool  # loss_spread within `LOSS_AGREE` of the smallest
    ac_peak: Comparison  # baseline_ac's peak against the baseline's
    ac_speed: Comparison  # baseline_ac's tokens/s against the baseline's
    ac_mfu: Comparison | None  # baseline_ac's MFU against the baseline's (None without a GPU's peak FLOP/s)
    ac_hfu_over_mfu: float | None  # baseline_ac's HFU / MFU: the recomputed forward pass


def figures(r: dict[str, dict]) -> ZeroStages:
    """Notebook 02's figures from its runs `r` (results.json dicts by run name)."""
    base = r["baseline"]
    stages = {}
    for s in STAGES:
        n, nb = nvml_split(r[s]), nvml_split(base)
        stages[s] = Stage(
            s,
            compare_peak(r[s], base),
            number(r[s].get("gpu_states_allocated_mib")),
            r[s]["estimated_model_states_gpu_mib"] or r[s]["estimated_model_states_cpu_mib"],
            r[s]["estimator"],
            n,
            bool(n and nb and n.allocated_mib < nb.allocated_mib and n.nvml_mib > nb.nvml_mib),
            compare_speed(r[s], base),
            compiled(r[s]),
        )
    speeds = {s: speed(r[s])[0] for s in ["baseline", *STAGES]}
    slow = min(speeds, key=speeds.get)
    others = [compare_speed(r[s], r[slow]) for s in speeds if s != slow]
    losses = {s: r[s]["train_loss"] for s in ["baseline", *STAGES]}
    ds = [losses[s] for s in STAGES]
    ac = r["baseline_ac"]
    ac_mfu, base_mfu = number(ac.get("mfu")), number(base.get("mfu"))
    ac_hfu = hfu(ac)
    uncompiled = r.get("baseline_no_compile")
    like = (
        "baseline"
        if compiled(base) == compiled(r["stage3"])
        else "baseline_no_compile"
        if uncompiled and not compiled(uncompiled) and not compiled(r["stage3"])
        else None
    )
    return ZeroStages(
        on_gpu=number(base.get("gpu_peak_mib")) is not None,
        peak_what=peak(base)[1],
        baseline_states_mib=number(base.get("gpu_states_allocated_mib")),
        baseline_nvml=nvml_split(base),
        stages=stages,
        slowest=slow,
        slowest_apart=all(c.verdict == "higher" for c in others),
        speed_kind=speed(base)[1],
        stage3_uncompiled=compiled(base) and not compiled(r["stage3"]),
        stage3_like=like,
        stage3_like_peak=compare_peak(r["stage3"], r[like]) if like else None,
        stage3_like_speed=compare_speed(r["stage3"], r[like]) if like else None,
        compile_peak=compare_peak(base, uncompiled) if uncompiled else None,
        compile_speed=compare_speed(base, uncompiled) if uncompiled else None,
        stage3_gpu_share=gpu_share(r["stage3"]),
        stage3_gpu_total_mib=gpu_total_mib(r["stage3"]),
        losses=losses,
        loss_spread=max(ds) - min(ds),
        losses_agree=max(ds) - min(ds) <= LOSS_AGREE * min(ds),
        ac_peak=compare_peak(ac, base),
        ac_speed=compare_speed(ac, base),
        ac_mfu=compare("mfu", ac_mfu, base_mfu) if ac_mfu is not None and base_mfu is not None else None,
        ac_hfu_over_mfu=ac_hfu / ac_mfu if ac_hfu is not None and ac_mfu else None,
    )


# What zero_optimization.overlap_comm changes at stage 2 (notebook 02's stage2_no_overlap), in DeepSpeed 0.19.8's
# zero/stage_1_and_2.py: (DeepSpeedZeroOptimizer's method, line, what the line holds). Each gradient's hook
# (process_gradients) adds it to the bucket at stage 2 (partition_gradients) with or without overlap_comm, and a full
# bucket is reduced there, during the backward pass; average_tensor reduces it on reduction_stream with overlap_comm,
# else on the current (compute) stream; only with overlap_comm does setup_buckets allocate the second buffer, which
# the next bucket fills meanwhile.
OVERLAP_COMM = (
    ("create_gradient_handling_hooks", 1372, "self.process_gradients(param, i)"),  # in each gradient's hook
    ("__init__", 267, "self.partition_gradients = partition_grads"),  # True at stage 2 (runtime/engine.py 2696)
    ("process_gradients", 2290, "if self.partition_gradients or self.overlap_comm:"),
    (
        "reduce_independent_p_g_buckets_and_remove_grads",
        1422,
        "if bucket.elements + param.numel() > self.reduce_bucket_size:",
    ),
    ("reduce_independent_p_g_buckets_and_remove_grads", 1424, "self.reduce_ipg_grads(comm_dtype=comm_dtype)"),
    ("average_tensor", 1601, "stream = self.reduction_stream"),
    ("average_tensor", 1614, "stream = get_accelerator().current_stream()"),
    ("setup_buckets", 3273, "if self.overlap_comm:"),
)

# Bytes per parameter that DeepSpeed 0.19.8 keeps for Adam in fp32 on the GPU without offload: master weights, and
# exp_avg + exp_avg_sq (the baseline's torch AdamW keeps the same moments beside its fp32 weights)
FP32_WEIGHTS, ADAM_MOMENTS = 4, 8


def ds_config_of(r: dict) -> dict | None:
    """The DeepSpeed config run `r` (a results.json) handed to DeepSpeed, built again from its resolved settings
    as `train.build_trainer` builds it (`RunConfig.ds_settings`, reduce_bucket_size capped at the model's size, its
    --ds-config overrides); the batch sizes stay "auto". None for a run without DeepSpeed."""
    exp = EXPERIMENTS[r["experiment"]]
    if not exp.deepspeed:
        return None
    cfg = RunConfig(**{k: v for k, v in r["config"].items() if k in {f.name for f in fields(RunConfig)}})
    return apply_overrides(build_ds_config(exp, cfg.ds_settings(r["num_params"])), cfg.ds_config)


@dataclass(frozen=True)
class StatesAccount:
    """What one run kept on its one GPU after its first optimizer step (`gpu_states_allocated_mib`), bytes per
    parameter: the buffers that stay allocated between steps, by name; what the process held before the run
    (`gpu_allocated_at_start_mib`: earlier runs' leftovers, not model states); and the rest, which neither
    accounts for (not broken down by the runs)."""

    measured: float
    parts: dict[str, float]
    held_before: float
    num_params: int

    @property
    def predicted(self) -> float:
        return sum(self.parts.values())

    @property
    def rest(self) -> float:
        return self.measured - self.predicted - self.held_before

    @property
    def rest_mib(self) -> float:
        return self.rest * self.num_params / MiB


def account_states(r: dict) -> StatesAccount:
    """Run `r`'s (a results.json, no offload) model states after step 1 by buffer, bytes per parameter, from its
    DeepSpeed config (`ds_config_of`) and DeepSpeed 0.19.8's source. Every stage keeps the 16-bit weights (2 with
    bf16/fp16, else 4), fp32 master weights and Adam's two moments (`FP32_WEIGHTS`, `ADAM_MOMENTS`); the baseline
    keeps its fp32 weights and the moments. Stages 1-2 allocate their gradient buckets and contiguous gradient
    buffer at each backward pass and free them at its end (zero/stage_1_and_2.py: `setup_buckets`, 3259-3279;
    `_release_ipg_buffers`, 924-932, from `independent_gradient_partition_epilogue`, 1061), and the fp32
    gradients after the update (3141). Stage 3 allocates two more at its start and keeps them (zero/stage3.py):
    one reduce bucket of reduce_bucket_size elements per communication dtype (781-784; `ds_config.
    gradient_bucket_mib`) and `grad_partitions_flat_buffer`, a gradient for every parameter it owns (all of them
    on one GPU) in the gradient-accumulation dtype (791-793), which is the training dtype while data_types.
    grad_accum_dtype is unset (runtime/engine.py `get_data_types`, 1806-1807).

    Raises:
        ValueError: the run offloaded (its states are on the host, not in these buffers), or its config sets
            data_types.grad_accum_dtype (other buffers' dtypes, not counted here)."""
    n = r["num_params"]
    return StatesAccount(
        r["gpu_states_allocated_mib"] * MiB / n, states_parts(r), r["gpu_allocated_at_start_mib"] * MiB / n, n
    )


def states_parts(r: dict) -> dict[str, float]:
    """`account_states`'s buffers of run `r` (a results.json), bytes per parameter by name, from its config alone:
    what a run keeps can be predicted before it runs (the stage-3 bucket is 0 without contiguous_gradients).
    Raises ValueError as `account_states`."""
    n, ds = r["num_params"], ds_config_of(r)
    exp = EXPERIMENTS[r["experiment"]]
    if exp.offload_optimizer != "none" or exp.offload_param != "none":
        raise ValueError(f"{r['experiment']} offloads: account_states counts the buffers of runs without offload")
    if ds is not None and ds.get("data_types", {}).get("grad_accum_dtype") is not None:
        raise ValueError(f"{r['experiment']} sets data_types.grad_accum_dtype: account_states assumes it unset")
    if ds is None:
        return {"fp32 weights": FP32_WEIGHTS, "Adam moments": ADAM_MOMENTS}
    low = 2 if any(ds[k].get("enabled") is True for k in ("bf16", "fp16")) else 4
    parts = {"16-bit weights": low, "fp32 master weights": FP32_WEIGHTS, "Adam moments": ADAM_MOMENTS}
    if exp.zero_stage == 3:
        parts["gradient partitions"] = low
        parts["reduce bucket"] = float(gradient_bucket_mib(ds)) * MiB / n
    return parts


# Notebook 02's own-key exercise: each key it suggests acts on one GPU at stage 3 and its effect follows from the
# config (module docstring), and the GPU reference run made with it (`COURSE_RUNS`, reference only).
OWN_KEYS = {
    "zero_optimization.contiguous_gradients=false": "stage3_no_contiguous",  # no reduce bucket: states fall by it
    "zero_optimization.overlap_comm=false": "stage3_no_overlap",  # another stream, the same buffers: no change
}


def states_change_mib(r: dict, other: dict) -> float:
    """How much more run `r` keeps than `other` after its first step, MiB, predicted from their configs
    (`states_parts`); the two runs must have the same model."""
    return (sum(states_parts(r).values()) - sum(states_parts(other).values())) * r["num_params"] / MiB


def explain_states(rows: dict[str, dict]) -> str:
    """Notebook 02's account of its bytes/param table, two sentences computed from `rows` (results.json by run
    name: baseline, stage1 and stage3 at least; `lessons.gpu_results`): what each stage keeps by buffer
    (`account_states`), stage 3's bucket from its config (`ds_config_of`), and what the runs leave unexplained."""
    acct, z3 = {n: account_states(r) for n, r in rows.items()}, ds_config_of(rows["stage3"])
    one, three, base = acct["stage1"], acct["stage3"], acct["baseline"]

    def parts(a: StatesAccount, skip=()) -> str:
        return ", ".join(f"{k} {v:.3g}" for k, v in a.parts.items() if k not in skip)

    worst = max(acct, key=lambda n: acct[n].rest)
    return (
        f"Why not 16 (lesson.account_states, from DeepSpeed 0.19.8's source): stages 1-2 keep {parts(one)} "
        f"bytes/param ({one.predicted:.2f}) and free gradients and buckets after each backward pass; stage 3 also "
        f"keeps {parts(three, one.parts)} from its start (a gradient for every parameter; one bucket of "
        f"{z3['zero_optimization']['reduce_bucket_size']:,} elements, {gradient_bucket_mib(z3):,.1f} MiB): "
        f"{three.predicted:.2f}; the baseline {parts(base)} ({base.predicted:.2f}).\n"
        f"Beside them, what the process held before the run ({three.held_before * three.num_params / MiB:,.0f} "
        f"MiB at stage 3, {three.held_before:.2f} bytes/param) and at most {acct[worst].rest_mib:,.1f} MiB "
        f"({acct[worst].rest:.3f} bytes/param, {worst}) that the runs do not break down."
    )
