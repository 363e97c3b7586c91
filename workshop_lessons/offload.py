"""Notebook 03's figures and verdicts, computed from its runs (results.json dicts by run name): stage2,
stage2_offload, stage3 and stage3_offload (`figures`), and for why ZeRO-3 peaks above ZeRO-2, notebook 02's runs
that show compilation apart (`compile_runs`); the figures of its own-key exercise with pageable buffers (`pinning`).
The solution notebook writes the answers from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workshop_lib.config import recipe_settings
from workshop_lib.units import MiB

from .baseline import compare_peak, compare_speed, number
from .comparisons import Comparison, compare, gpu_results
from .zero_stages import compiled

RUNS = ("stage2", "stage2_offload", "stage3", "stage3_offload")
# Notebook 02's runs that part compilation from ZeRO in stage 3's peak over stage 2's: the baseline with and
# without torch.compile, and the two stages
COMPILE_RUNS = ("baseline", "baseline_no_compile", "stage2", "stage3")


def states(run: dict) -> float | None:
    """Model states the run kept on the GPU (MiB): torch allocated after the first optimizer step, less what
    the process already held when the run began (`gpu_allocated_at_start_mib`, where recorded); None without
    a GPU."""
    if number(run.get("gpu_states_allocated_mib")) is None:
        return None
    return run["gpu_states_allocated_mib"] - (number(run.get("gpu_allocated_at_start_mib")) or 0)


@dataclass(frozen=True)
class Offload:
    """One stage with and without CPU offload. Memory in MiB, host growth in bytes per parameter."""

    stage: str  # "stage2" or "stage3"
    speed: Comparison  # the offload run's tokens/s against the run without offload
    gpu_states: Comparison | None  # model states kept on the GPU (`states`), offload against not; None without a GPU
    gpu_peak: Comparison | None  # torch's peak allocated over the steps, offload against not; None without a GPU
    held_at_start_mib: float | None  # what the process held before the offload run began (subtracted from states)
    host_states_bytes_per_param: float  # host RSS after step 1, offload run less the run without, per parameter
    host_peak_bytes_per_param: float  # the same for the peak RSS over the steps
    # DeepSpeed's own budget for the offload run's host memory (`estimate_zero{2,3}_model_states_mem_needs`,
    # its buffer factor included), per parameter: what "expected" means here
    estimated_host_bytes_per_param: float
    host_states_mib: float  # host RSS after step 1, offload run less the run without, MiB
    estimated_host_mib: float  # DeepSpeed's budget above, MiB
    peak_beyond_states_mib: float | None  # the offload run's peak less its model states: what the steps add


@dataclass(frozen=True)
class Compilation:
    """Why ZeRO-3 peaks above ZeRO-2 (exercise 3): which of notebook 03's runs compiled their transformer blocks,
    and, where the ZeRO-2 and ZeRO-3 runs differ in that, notebook 02's runs (`COMPILE_RUNS`) taken apart: stage 3's
    peak over stage 2's = compilation's own effect on the baseline (`without`: baseline_no_compile against the
    baseline) + each stage against the baseline of its own compile setting (`stage3`, `stage2`). MiB."""

    compiled: dict[str, bool]  # notebook 03's run -> it compiled its blocks (its resolved config's torch_compile)
    zero3_default: bool  # the recipe's torch_compile_zero3: ZeRO-3 compiles only with it (preflight.check_machine)
    runs_from: str | None  # whose notebook 02 runs: "your notebook 02 runs", "notebook 02's GPU reference"; None
    gap: Comparison | None  # 02's stage 3 peak against its stage 2's
    without: Comparison | None  # 02's baseline_no_compile peak against its baseline's: compilation alone
    states: Comparison | None  # model states of baseline_no_compile against the baseline's (only compile differs)
    stage3: Comparison | None  # 02's stage 3 against baseline_no_compile (neither compiled)
    stage2: Comparison | None  # 02's stage 2 against the baseline (both compiled)

    @property
    def differs(self) -> bool:
        """The ZeRO-2 runs compiled and the ZeRO-3 runs did not, or the other way round."""
        two, three = ({self.compiled[n] for n in RUNS if n.startswith(s)} for s in ("stage2", "stage3"))
        return len(two) == len(three) == 1 and two != three

    @property
    def zero_mib(self) -> float:
        """The gap less compilation's part: stage 3's difference less stage 2's, each against its baseline."""
        return self.stage3.difference - self.stage2.difference


@dataclass(frozen=True)
class Offloads:
    """Notebook 03's exercises 1-3."""

    on_gpu: bool
    num_params: int
    stage2: Offload
    stage3: Offload
    # exercise 3 on a GPU's runs: the learner's own, else the GPU reference's ("reference"), else none on file
    peaks_from: str | None  # "yours", "reference" or None
    peaks: dict[str, Offload] | None  # stage -> its Offload on those runs
    stage3_over_stage2_peak: Comparison | None  # ZeRO-3's peak allocated against ZeRO-2's, no offload
    offload_peaks: Comparison | None  # ZeRO-3 offload's peak against ZeRO-2 offload's
    compilation: Compilation | None  # why ZeRO-3 peaks above ZeRO-2, on the same runs as `peaks`; None without them


def _offload(s: str, r: dict[str, dict]) -> Offload:
    o, n = r[f"{s}_offload"], r[s]
    p = o["num_params"]
    gpu = states(o) is not None
    peak = number(o.get("gpu_peak_allocated_mib"))
    return Offload(
        stage=s,
        speed=compare_speed(o, n),
        gpu_states=compare("gpu_states_allocated_mib", states(o), states(n)) if gpu else None,
        gpu_peak=compare("gpu_peak_allocated_mib", peak, n["gpu_peak_allocated_mib"]) if gpu else None,
        held_at_start_mib=number(o.get("gpu_allocated_at_start_mib")),
        host_states_bytes_per_param=(o["host_states_rss_mib"] - n["host_states_rss_mib"]) * MiB / p,
        host_peak_bytes_per_param=(o["host_peak_rss_mib"] - n["host_peak_rss_mib"]) * MiB / p,
        estimated_host_bytes_per_param=o["estimated_model_states_cpu_mib"] * MiB / p,
        host_states_mib=o["host_states_rss_mib"] - n["host_states_rss_mib"],
        estimated_host_mib=o["estimated_model_states_cpu_mib"],
        peak_beyond_states_mib=peak - states(o) if gpu else None,
    )


def reference_runs(ref) -> dict[str, dict] | None:
    """The GPU reference runs (`lessons.reference("03_cpu_offload")`, a DataFrame by run name) as results
    dicts by run name, or None unless all four runs are on file."""
    return {n: ref.loc[n].to_dict() for n in RUNS} if all(n in ref.index for n in RUNS) else None


def compile_runs(runs02: str | Path) -> tuple[dict[str, dict], str] | None:
    """Notebook 02's `COMPILE_RUNS` as results.json dicts by run name, and whose: the learner's in `runs02` (its
    runs folder) where all four finished with GPU memory measured ("your notebook 02 runs"), else notebook 02's
    GPU reference runs ("notebook 02's GPU reference"; `lessons.gpu_results`); None where neither has all four."""
    rows, who = gpu_results("02_zero_stages", runs02, COMPILE_RUNS, "gpu_peak_allocated_mib")
    if len(rows) < len(COMPILE_RUNS):
        return None
    return rows, "your notebook 02 runs" if who == "your runs" else "notebook 02's GPU reference"


def compilation(runs: dict[str, dict], r02: tuple[dict[str, dict], str] | None) -> Compilation:
    """`Compilation` of notebook 03's `runs` (the four of `RUNS`), with notebook 02's (`compile_runs`) taken apart
    where the ZeRO-2 and ZeRO-3 runs differ in compilation and 02's runs differ in it as those do (its baseline and
    stage 2 compiled alike, its baseline_no_compile and stage 3 alike, the two baselines not)."""
    c = {n: compiled(runs[n]) for n in RUNS}
    default = bool(recipe_settings(runs["stage3"]["config"].get("recipe", "default"))["torch_compile_zero3"])
    z, who = r02 if r02 else ({}, None)
    apart = bool(z) and (
        compiled(z["baseline"]) == compiled(z["stage2"]) == c["stage2"]
        and compiled(z["baseline_no_compile"]) == compiled(z["stage3"]) == c["stage3"] != c["stage2"]
    )
    base, bare = (z["baseline"], z["baseline_no_compile"]) if apart else (None, None)
    return Compilation(
        compiled=c,
        zero3_default=default,
        runs_from=who if apart else None,
        gap=compare_peak(z["stage3"], z["stage2"]) if apart else None,
        without=compare_peak(bare, base) if apart else None,
        states=compare("gpu_states_allocated_mib", bare["gpu_states_allocated_mib"], base["gpu_states_allocated_mib"])
        if apart
        else None,
        stage3=compare_peak(z["stage3"], bare) if apart else None,
        stage2=compare_peak(z["stage2"], base) if apart else None,
    )


def figures(
    r: dict[str, dict], ref: dict[str, dict] | None = None, r02: tuple[dict[str, dict], str] | None = None
) -> Offloads:
    """Notebook 03's figures from its runs `r` (results.json dicts by run name); without a GPU, exercise 3's
    from the GPU reference runs `ref` (the same form, `reference_runs`) where given; and why ZeRO-3 peaks above
    ZeRO-2 on those runs, with notebook 02's runs `r02` (`compile_runs`) where given."""
    on_gpu = states(r["stage2"]) is not None
    src, runs = ("yours", r) if on_gpu else ("reference", ref) if ref else (None, None)
    peaks = {s: _offload(s, runs) for s in ("stage2", "stage3")} if runs else None
    return Offloads(
        on_gpu=on_gpu,
        num_params=r["stage2"]["num_params"],
        stage2=_offload("stage2", r),
        stage3=_offload("stage3", r),
        peaks_from=src,
        peaks=peaks,
        stage3_over_stage2_peak=compare(
            "gpu_peak_allocated_mib", runs["stage3"]["gpu_peak_allocated_mib"], runs["stage2"]["gpu_peak_allocated_mib"]
        )
        if runs
        else None,
        offload_peaks=compare(
            "gpu_peak_allocated_mib",
            runs["stage3_offload"]["gpu_peak_allocated_mib"],
            runs["stage2_offload"]["gpu_peak_allocated_mib"],
        )
        if runs
        else None,
        compilation=compilation(runs, r02) if runs else None,
    )


@dataclass(frozen=True)
class Pinning:
    """The exercise "a key of your own" with zero_optimization.offload_optimizer.pin_memory=false: the host's RSS
    after step 1 (`host_states_rss_mib`) of stage2_offload (pinned buffers) and of the same run with pageable ones,
    each less stage2's, beside DeepSpeed's budget for the host side. MiB."""

    pinned_mib: float
    pageable_mib: float
    budget_mib: float
    pinning: Comparison  # the pinned run's host RSS after step 1 against the pageable run's: what pinning changes


PIN_MEMORY = ("zero_optimization.offload_optimizer.pin_memory", False)  # the override `pinning` reads
# Notebook 03's own-key exercise: the key its answer sets, and the GPU reference run made with it (`COURSE_RUNS`)
OWN_KEYS = {"zero_optimization.offload_optimizer.pin_memory=false": "stage2_offload_pageable"}


def pinning(stage2: dict, pinned: dict, pageable: dict) -> Pinning:
    """`Pinning` from the runs' results.json: stage2, stage2_offload and stage2_offload with `PIN_MEMORY`."""
    key = "host_states_rss_mib"
    return Pinning(
        pinned[key] - stage2[key],
        pageable[key] - stage2[key],
        pinned["estimated_model_states_cpu_mib"],
        compare(key, pinned[key], pageable[key]),
    )
