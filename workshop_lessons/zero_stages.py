"""Notebook 02's figures and verdicts, computed from its runs (results.json dicts by run name): baseline,
stage1, stage2, stage3, baseline_ac (the baseline with activation checkpointing) and, where it ran,
baseline_no_compile (the baseline without torch.compile, as ZeRO-3 runs). The solution notebook writes the
answers from them."""

from __future__ import annotations

from dataclasses import dataclass

from workshop_lib.results import hfu

from . import Comparison, compare
from .baseline import (NvmlSplit, compare_peak, compare_speed, gpu_share, gpu_total_mib, number, nvml_split, peak,
                       speed)

STAGES = ["stage1", "stage2", "stage3"]
LOSS_AGREE = 0.01  # relative spread of the ZeRO stages' train losses below which we call them in agreement
NEAR_LIMIT = 0.95  # an NVML peak above this share of the GPU's memory is at its limit (4 GiB from it on 80 GB)


def compiled(r: dict) -> bool:
    """Whether the run compiled its transformer blocks (the resolved config's torch_compile)."""
    return bool(r["config"].get("torch_compile"))


def _gpu(r: dict, key: str) -> float | None:
    return number(r.get(key))


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
    baseline_peak_mib: float
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
            s, compare_peak(r[s], base), _gpu(r[s], "gpu_states_allocated_mib"),
            r[s]["estimated_model_states_gpu_mib"] or r[s]["estimated_model_states_cpu_mib"], r[s]["estimator"], n,
            bool(n and nb and n.allocated_mib < nb.allocated_mib and n.nvml_mib > nb.nvml_mib),
            compare_speed(r[s], base), compiled(r[s]))
    speeds = {s: speed(r[s])[0] for s in ["baseline", *STAGES]}
    slow = min(speeds, key=speeds.get)
    others = [compare_speed(r[s], r[slow]) for s in speeds if s != slow]
    losses = {s: r[s]["train_loss"] for s in ["baseline", *STAGES]}
    ds = [losses[s] for s in STAGES]
    ac = r["baseline_ac"]
    ac_mfu, base_mfu = _gpu(ac, "mfu"), _gpu(base, "mfu")
    ac_hfu = hfu(ac)
    uncompiled = r.get("baseline_no_compile")
    like = ("baseline" if compiled(base) == compiled(r["stage3"]) else
            "baseline_no_compile" if uncompiled and not compiled(uncompiled) and not compiled(r["stage3"]) else None)
    return ZeroStages(
        on_gpu=_gpu(base, "gpu_peak_mib") is not None, peak_what=peak(base)[1], baseline_peak_mib=peak(base)[0],
        baseline_states_mib=_gpu(base, "gpu_states_allocated_mib"), baseline_nvml=nvml_split(base), stages=stages,
        slowest=slow, slowest_apart=all(c.verdict == "higher" for c in others), speed_kind=speed(base)[1],
        stage3_uncompiled=compiled(base) and not compiled(r["stage3"]),
        stage3_like=like, stage3_like_peak=compare_peak(r["stage3"], r[like]) if like else None,
        stage3_like_speed=compare_speed(r["stage3"], r[like]) if like else None,
        compile_peak=compare_peak(base, uncompiled) if uncompiled else None,
        compile_speed=compare_speed(base, uncompiled) if uncompiled else None,
        stage3_gpu_share=gpu_share(r["stage3"]), stage3_gpu_total_mib=gpu_total_mib(r["stage3"]),
        losses=losses, loss_spread=max(ds) - min(ds), losses_agree=max(ds) - min(ds) <= LOSS_AGREE * min(ds),
        ac_peak=compare_peak(ac, base), ac_speed=compare_speed(ac, base),
        ac_mfu=compare("mfu", ac_mfu, base_mfu) if ac_mfu is not None and base_mfu is not None else None,
        ac_hfu_over_mfu=ac_hfu / ac_mfu if ac_hfu is not None and ac_mfu else None)
