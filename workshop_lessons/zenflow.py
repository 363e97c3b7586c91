"""Notebook 03e's figures and verdicts (`03e_zenflow`, the ZenFlow appendix): ZenFlow's run, stage2_zenflow,
against plain ZeRO-2 offload, stage2_offload, made with the same data, settings and steps (`zenflow`, `plot_loss`),
and the check of DeepSpeed's weight scrambling at engine start (`first_loss_check`), from the runs' directories.
The solution notebook writes the answers from them."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from workshop_lib.errors import WorkshopError

from . import Comparison, compare
from .baseline import number, speed_band

# Two runs of the same model and first batch: their step-1 losses agree to this (nats). Measured: identical for
# ZeRO-2 with and without offload, 5e-4 apart for ZeRO-3's bf16 arithmetic; ZenFlow's 0.01 off (lab/findings/h100/bench)
START_TOLERANCE = 1e-3

# DeepSpeed 0.19.8 print()s this at each clear of ZenFlow's selective optimizer states (ops/adam/zenflow_torch_adam.py)
STATE_CLEARS = "Zenflow: clearing selective optimizer states..."


class _WithoutStateClears:
    """A stdout passing every write on to `out` but `STATE_CLEARS` and the newline print() writes after it."""

    def __init__(self, out):
        self.out, self.dropped = out, False

    def write(self, s: str) -> int:
        drop = s == STATE_CLEARS or (s == "\n" and self.dropped)
        self.dropped = s == STATE_CLEARS
        return len(s) if drop else self.out.write(s)

    def __getattr__(self, name):  # flush, fileno, isatty...: stdout's own
        return getattr(self.out, name)


@contextmanager
def without_state_clears():
    """stdout without DeepSpeed's `STATE_CLEARS` line (six of them in the notebook's ZenFlow run), every other line
    as it comes; stderr, and so errors and warnings, untouched."""
    out, sys.stdout = sys.stdout, _WithoutStateClears(sys.stdout)
    try:
        yield
    finally:
        sys.stdout = out


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
class FirstLoss:
    """Step 1's training loss (nats) of ZenFlow's run and of plain offload's: both computed on the same batch before
    any update, so from the same model unless DeepSpeed's engine start changed ZenFlow's (0.19.7 and 0.19.8 do:
    `_update_model_bit16_weights`, notebook 03e; scripts/zenflow_init_check.py reproduces it)."""

    zenflow: float
    offload: float
    deepspeed: str | None  # the DeepSpeed version ZenFlow's run recorded (results.json's versions), None if absent

    @property
    def same_start(self) -> bool:
        """The two losses within `START_TOLERANCE`: the same model went in."""
        return abs(self.zenflow - self.offload) <= START_TOLERANCE


def first_loss_check(offload_dir: str | Path, zenflow_dir: str | Path) -> FirstLoss:
    """`FirstLoss` from the two runs' train_log.csv and ZenFlow's results.json (a learner's runs or the reference's)."""
    run = json.loads((Path(zenflow_dir) / "results.json").read_text())
    return FirstLoss(
        zenflow=float(train_log(zenflow_dir)["loss"].iloc[0]),
        offload=float(train_log(offload_dir)["loss"].iloc[0]),
        deepspeed=(run.get("versions") or {}).get("deepspeed"),
    )


@dataclass(frozen=True)
class ZenFlow:
    """stage2_zenflow against stage2_offload (notebook 03e's exercise)."""

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
    start: FirstLoss  # step 1's losses: did both runs start from the same model?


def zenflow(offload_dir: str | Path, zenflow_dir: str | Path) -> ZenFlow:
    """`ZenFlow` from the two runs' directories (results.json, train_log.csv, ds_config.json), made with the same
    settings and steps.

    Raises:
        WorkshopError: the runs' steps differ (then nothing compares).
    """
    runs = {
        k: json.loads((Path(d) / "results.json").read_text()) for k, d in (("off", offload_dir), ("zf", zenflow_dir))
    }
    logs = {"off": train_log(offload_dir), "zf": train_log(zenflow_dir)}
    zf = json.loads((Path(zenflow_dir) / "ds_config.json").read_text())["zero_optimization"]["zenflow"]
    if list(logs["off"].index) != list(logs["zf"].index):
        raise WorkshopError(
            f"{offload_dir} and {zenflow_dir} ran different steps ({len(logs['off'])} and "
            f"{len(logs['zf'])}): their losses and speeds do not compare.",
            "run both with the same settings (lessons.run_config with the notebook's options).",
        )
    warm, n = runs["zf"]["warmup_steps"], last_steps(len(logs["zf"]), zf["update_interval"])
    tps = {k: window_tokens_per_second(logs[k], warm) for k in logs}
    loss = {k: float(logs[k]["loss"].iloc[-n:].mean()) for k in logs}
    gpu = {k: r.get("gpu_peak_allocated_mib") for k, r in runs.items()}
    on_gpu = number(gpu["zf"]) is not None
    return ZenFlow(
        on_gpu=on_gpu,
        overlap_step=bool(zf["overlap_step"]),
        topk_ratio=zf["topk_ratio"],
        update_interval=zf["update_interval"],
        window=(int(logs["zf"].index[warm]), int(logs["zf"].index[-1])),
        speed=compare("steady_train_tokens_per_second", tps["zf"], tps["off"], noise=speed_band(runs["zf"])),
        last=n,
        loss=compare("train_loss", loss["zf"], loss["off"]),
        gpu_peak=compare("gpu_peak_allocated_mib", gpu["zf"], gpu["off"]) if on_gpu else None,
        host_peak=compare("host_peak_rss_mib", runs["zf"]["host_peak_rss_mib"], runs["off"]["host_peak_rss_mib"]),
        start=first_loss_check(offload_dir, zenflow_dir),
    )


def plot_loss(runs: dict[str, str | Path], f: ZenFlow):
    """Each run's training loss per optimizer step (`runs`: label -> run directory), the last `f.last` steps, over
    which `f.loss` compares them, shaded. Returns the figure."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, d in runs.items():
        log = train_log(d)
        ax.plot(log.index, log["loss"], marker=".", label=label)
    ax.axvspan(
        log.index[-f.last] - 0.5,
        log.index[-1] + 0.5,
        color="grey",
        alpha=0.15,
        label=f"last {f.last} steps (mean compared)",
    )
    ax.set(
        xlabel="optimizer step",
        ylabel="training loss (nats per labelled token)",
        title="ZenFlow against plain CPU offload: the same data, settings and steps",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
