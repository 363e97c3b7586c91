"""Notebook 03's figures and verdicts, computed from its runs (results.json dicts by run name): stage2,
stage2_offload, stage3 and stage3_offload (`figures`); and ZenFlow's run, stage2_zenflow, against stage2_offload
(`zenflow`, `plot_loss`), from their run directories. The solution notebook writes the answers from them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from workshop_lib.errors import WorkshopError
from workshop_lib.units import MiB

from . import Comparison, compare
from .baseline import compare_speed, number, speed_band

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


# ---- ZenFlow (stage2_zenflow) against plain ZeRO-2 offload (stage2_offload): the same data, settings and steps


def train_log(run_dir: str | Path) -> pd.DataFrame:
    """The run's optimizer steps from its train_log.csv (evaluation rows left out), indexed by step: loss
    (nats), step_time_s, tokens (non-padding, all ranks)."""
    log = pd.read_csv(Path(run_dir) / "train_log.csv")
    return log.dropna(subset=["loss", "step_time_s"]).set_index("step")


def window_tokens_per_second(log: pd.DataFrame, warmup_steps: int) -> float:
    """Tokens/s of the steps after the first `warmup_steps` (results.json's): all their tokens over their summed
    times, the steady-state figure (`metrics.steady_state`) computed again from the log, also for runs recorded
    when results.json held the median step (a median lands on one of ZenFlow's two kinds of step)."""
    steady = log.iloc[warmup_steps:]
    return round(steady["tokens"].sum() / steady["step_time_s"].sum(), 1)


def last_steps(steps: int, update_interval: int) -> int:
    """How many of the last steps the losses are compared over: the last third of `steps`, in whole ZenFlow
    cycles of `update_interval` steps (so that each phase of the cycle counts alike), at least one cycle."""
    return max(update_interval, steps // 3 // update_interval * update_interval)


@dataclass(frozen=True)
class ZenFlow:
    """stage2_zenflow against stage2_offload (notebook 03's ZenFlow exercise)."""

    on_gpu: bool
    overlap_step: bool  # the CPU update ran in a process of its own beside the GPU's steps (ds_config.json)
    topk_ratio: float  # share of the gradient columns updated on the GPU every step
    update_interval: int  # steps between two CPU updates of the other columns
    window: tuple[int, int]  # first and last optimizer step of the steady window
    speed: Comparison  # tokens/s over the steady window (`window_tokens_per_second`), ZenFlow against offload
    last: int  # the losses' steps: the last `last` of them (`last_steps`)
    loss: Comparison  # mean train loss over those steps, nats, ZenFlow against offload
    gpu_peak: Comparison | None  # torch's peak allocated over the steps, MiB; None without a GPU
    host_peak: Comparison  # the training process's peak RSS, MiB (not a process of ZenFlow's own)
    # step 1's loss (nats), ZenFlow's and offload's: computed on the same batch before any update, so from the same
    # model unless DeepSpeed's engine start changed it (ZenFlow 0.19.8 does: scripts/zenflow_init_check.py)
    first_loss: tuple[float, float]
    same_start: bool  # the two first losses within START_TOLERANCE


# Two runs of the same model and first batch: their step-1 losses agree to this (nats). Measured: identical for
# ZeRO-2 with and without offload, 5e-4 apart for ZeRO-3's bf16 arithmetic; ZenFlow's 0.01 off (lab/findings/h100/bench)
START_TOLERANCE = 1e-3


def zenflow(offload_dir: str | Path, zenflow_dir: str | Path) -> ZenFlow:
    """`ZenFlow` from the two runs' directories (results.json, train_log.csv, ds_config.json), made with the same
    settings and steps.

    Raises:
        WorkshopError: the runs' steps differ (then nothing compares).
    """
    runs = {k: json.loads((Path(d) / "results.json").read_text()) for k, d in (("off", offload_dir), ("zf", zenflow_dir))}
    logs = {"off": train_log(offload_dir), "zf": train_log(zenflow_dir)}
    zf = json.loads((Path(zenflow_dir) / "ds_config.json").read_text())["zero_optimization"]["zenflow"]
    if list(logs["off"].index) != list(logs["zf"].index):
        raise WorkshopError(f"{offload_dir} and {zenflow_dir} ran different steps ({len(logs['off'])} and "
                            f"{len(logs['zf'])}): their losses and speeds do not compare.",
                            "run both with the same settings (lessons.run_config with the notebook's options).")
    warm, n = runs["zf"]["warmup_steps"], last_steps(len(logs["zf"]), zf["update_interval"])
    tps = {k: window_tokens_per_second(logs[k], warm) for k in logs}
    loss = {k: float(logs[k]["loss"].iloc[-n:].mean()) for k in logs}
    gpu = {k: r.get("gpu_peak_allocated_mib") for k, r in runs.items()}
    on_gpu = number(gpu["zf"]) is not None
    first = (float(logs["zf"]["loss"].iloc[0]), float(logs["off"]["loss"].iloc[0]))
    return ZenFlow(
        on_gpu=on_gpu, overlap_step=bool(zf["overlap_step"]), topk_ratio=zf["topk_ratio"],
        update_interval=zf["update_interval"], window=(int(logs["zf"].index[warm]), int(logs["zf"].index[-1])),
        speed=compare("steady_train_tokens_per_second", tps["zf"], tps["off"], noise=speed_band(runs["zf"])),
        last=n, loss=compare("train_loss", loss["zf"], loss["off"]),
        gpu_peak=compare("gpu_peak_allocated_mib", gpu["zf"], gpu["off"]) if on_gpu else None,
        host_peak=compare("host_peak_rss_mib", runs["zf"]["host_peak_rss_mib"], runs["off"]["host_peak_rss_mib"]),
        first_loss=first, same_start=abs(first[0] - first[1]) <= START_TOLERANCE)


def plot_loss(runs: dict[str, str | Path], f: ZenFlow):
    """Each run's training loss per optimizer step (`runs`: label -> run directory), the last `f.last` steps, over
    which `f.loss` compares them, shaded. Returns the figure."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, d in runs.items():
        log = train_log(d)
        ax.plot(log.index, log["loss"], marker=".", label=label)
    ax.axvspan(log.index[-f.last] - 0.5, log.index[-1] + 0.5, color="grey", alpha=0.15,
               label=f"last {f.last} steps (mean compared)")
    ax.set(xlabel="optimizer step", ylabel="training loss (nats per labelled token)",
           title="ZenFlow against plain CPU offload: the same data, settings and steps")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
