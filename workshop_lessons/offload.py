"""Notebook 03's figures and verdicts, computed from its runs (results.json dicts by run name): stage2,
stage2_offload, stage3 and stage3_offload (`figures`). The solution notebook writes the answers from them. ZenFlow's
run against stage2_offload is the appendix's, 03e (`workshop_lessons.zenflow`)."""

from __future__ import annotations

from dataclasses import dataclass

from workshop_lib.units import MiB

from . import Comparison, compare
from .baseline import compare_speed, number

RUNS = ("stage2", "stage2_offload", "stage3", "stage3_offload")


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
    peak_beyond_states_mib: float | None  # the offload run's peak less its model states: what the steps add


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


def _offload(s: str, r: dict[str, dict]) -> Offload:
    o, n = r[f"{s}_offload"], r[s]
    p = o["num_params"]
    gpu = states(o) is not None
    peak = number(o.get("gpu_peak_allocated_mib"))
    return Offload(
        stage=s, speed=compare_speed(o, n),
        gpu_states=compare("gpu_states_allocated_mib", states(o), states(n)) if gpu else None,
        gpu_peak=compare("gpu_peak_allocated_mib", peak, n["gpu_peak_allocated_mib"]) if gpu else None,
        held_at_start_mib=number(o.get("gpu_allocated_at_start_mib")),
        host_states_bytes_per_param=(o["host_states_rss_mib"] - n["host_states_rss_mib"]) * MiB / p,
        host_peak_bytes_per_param=(o["host_peak_rss_mib"] - n["host_peak_rss_mib"]) * MiB / p,
        estimated_host_bytes_per_param=o["estimated_model_states_cpu_mib"] * MiB / p,
        peak_beyond_states_mib=peak - states(o) if gpu else None)


def reference_runs(ref) -> dict[str, dict] | None:
    """The GPU reference runs (`lessons.reference("03_cpu_offload")`, a DataFrame by run name) as results
    dicts by run name, or None unless all four runs are on file."""
    return {n: ref.loc[n].to_dict() for n in RUNS} if all(n in ref.index for n in RUNS) else None


def figures(r: dict[str, dict], ref: dict[str, dict] | None = None) -> Offloads:
    """Notebook 03's figures from its runs `r` (results.json dicts by run name); without a GPU, exercise 3's
    from the GPU reference runs `ref` (the same form, `reference_runs`) where given."""
    on_gpu = states(r["stage2"]) is not None
    src, runs = ("yours", r) if on_gpu else ("reference", ref) if ref else (None, None)
    peaks = {s: _offload(s, runs) for s in ("stage2", "stage3")} if runs else None
    return Offloads(
        on_gpu=on_gpu, num_params=r["stage2"]["num_params"], stage2=_offload("stage2", r), stage3=_offload("stage3", r),
        peaks_from=src, peaks=peaks,
        stage3_over_stage2_peak=compare("gpu_peak_allocated_mib", runs["stage3"]["gpu_peak_allocated_mib"],
                                        runs["stage2"]["gpu_peak_allocated_mib"]) if runs else None,
        offload_peaks=compare("gpu_peak_allocated_mib", runs["stage3_offload"]["gpu_peak_allocated_mib"],
                              runs["stage2_offload"]["gpu_peak_allocated_mib"]) if runs else None)
