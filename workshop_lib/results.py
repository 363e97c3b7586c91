"""Results: the exercise tables and plots from runs' results.json and memory.csv (introduced in
`01_baseline`; `workshop report` calls `write_report`)."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass, fields
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from . import rundir
from .errors import WorkshopError
from .units import ceil_div


@dataclass(frozen=True)
class Column:
    """How the tables show one results.json key: `title`, the unit in it where it has one ("torch peak alloc
    MiB"), and `unit`, what `lessons.compare` states ("MiB": 2**20 bytes; losses in "nats" per label token; MFU
    and HFU as a "fraction" of the GPUs' peak; "" for a name or a count). `default`: one of the exercise table's
    columns when none are named (`exercise_table`)."""

    title: str
    unit: str = ""
    default: bool = True


# The one home of the titles and units of results.json's figures: every table, plot and verdict takes them from
# here (`title`, `unit`), in this order in the exercise table. Adding a figure: its RunResults field, a line here.
COLUMNS = {
    "experiment": Column("experiment"),
    "model": Column("model"),
    "recipe": Column("recipe"),
    "precision": Column("precision"),
    "world_size": Column("world size"),
    "micro_batch_size_per_gpu": Column("micro-batch"),
    "global_batch_size": Column("global batch (questions)"),
    "tokens_per_step": Column("tokens/step"),
    "steps_per_epoch": Column("steps/epoch"),
    "train_loss": Column("train loss", "nats"),
    "eval_loss": Column("eval loss per epoch", "nats"),
    "train_tokens_per_second": Column("tokens/s", "tokens/s"),
    "steady_train_tokens_per_second": Column("steady tokens/s", "tokens/s"),
    "steady_train_samples_per_second": Column("steady questions/s", "questions/s"),
    "steady_step_time_s": Column("steady s/step", "s"),
    "mfu": Column("MFU", "fraction"),
    "hfu": Column("HFU", "fraction"),
    "gpu_util_pct": Column("GPU util %", "%"),
    "gpu_states_allocated_mib": Column("model states MiB (measured)", "MiB"),
    "estimated_model_states_gpu_mib": Column("est. model states GPU MiB", "MiB"),
    "estimated_model_states_cpu_mib": Column("est. model states CPU MiB", "MiB"),
    "gpu_peak_allocated_mib": Column("torch peak alloc MiB", "MiB"),
    "gpu_peak_reserved_mib": Column("torch peak reserved MiB", "MiB"),
    "gpu_peak_mib": Column("GPU peak MiB", "MiB"),  # NVML: all of the GPU's memory in use
    "gpu_mean_mib": Column("GPU mean MiB", "MiB"),
    "gpu_min_mib": Column("GPU min MiB", "MiB"),
    "host_states_rss_mib": Column("host RSS after step 1 MiB", "MiB"),
    "host_peak_rss_mib": Column("host peak RSS MiB", "MiB"),
    # shown only where a table names them
    "train_samples_per_second": Column("samples/s", "samples/s", default=False),
    "num_params": Column("parameters", "parameters", default=False),
    "em": Column("exact match (%)", "%", default=False),
    "f1": Column("F1 (%)", "%", default=False),  # SQuAD v1.1
}


def title(key: str) -> str:
    """The column title of results.json's `key` (`COLUMNS`), e.g. "steady tokens/s". Raises KeyError if none."""
    return COLUMNS[key].title


def unit(key: str) -> str:
    """The unit of results.json's `key` (`COLUMNS`), e.g. "tokens/s"; "" for a name or a count. KeyError if none."""
    return COLUMNS[key].unit


@dataclass
class RunResults:
    """What results.json holds: one finished run (written by `run_experiment`, rank 0). Memory in MiB
    (`memory` module: NVML, torch's allocator, host RSS), speeds per second of `train_runtime_seconds`,
    losses in nats per label token. `config` is the whole resolved `RunConfig`."""

    experiment: str
    recipe: str
    model: str  # hub name or path the architecture (and weights) came from; "<name> (tiny)" for --tiny
    tiny: bool  # the tiny model of `model`'s family (model.TINY_DIMS), built on the CPU
    random_weights: bool  # not pretrained: --random-weights, or the tiny model (always randomly initialised)
    zero_stage: int | None  # None: no DeepSpeed
    offload_optimizer: str  # none | cpu
    offload_param: str
    precision: str  # bf16 | fp16 | fp32, as run on this machine
    attn_implementation: str
    loss_on: str
    padding: str
    world_size: int
    micro_batch_size_per_gpu: int
    gradient_accumulation_steps: int
    # questions per optimizer step, micro x accumulation x world_size (train_batch_size); token budget: mean, rounded
    global_batch_size: int
    tokens_per_step: int  # non-padding tokens per optimizer step, the mean over an epoch
    epochs: float  # as configured, or the fraction reached when max_steps ended the run
    max_steps: int | None
    steps_per_epoch: int
    global_steps: int
    train_loss: float  # mean over all optimizer steps
    eval_loss: list[float]  # one per epoch (one at the end when max_steps ends the run first)
    # the HF Trainer's own, whole run, of the rounded mean micro-batch: the tables show the steady figure instead
    train_samples_per_second: float
    eval_samples_per_second: float
    train_tokens_per_second: float  # non-padding tokens, whole run (warm-up included)
    warmup_steps: int  # optimizer steps left out of the steady-state figures (metrics.steady_state)
    steady_steps: int
    # after the warm-up (metrics.steady_state; runs recorded before 2026-11-26: the median step after the first third)
    steady_step_time_s: float | None  # mean seconds per optimizer step
    steady_train_samples_per_second: float | None  # questions/s: questions per step (the mean) / mean step time
    steady_train_tokens_per_second: float | None  # all the steady steps' non-padding tokens / their time
    mfu: float | None  # of the GPUs' dense 16-bit peak, at the steady tokens/s (metrics.mfu); None on a CPU
    # hardware FLOPs utilisation: MFU plus the forward pass activation checkpointing recomputes (record.run_mfu)
    hfu: float | None
    gpu_util_pct: float | None  # NVML utilisation of rank 0's GPU over the steady steps, mean percent
    num_params: int
    # Memory by phase, rank 0 (`memory.MemorySampler.summary`): set-up ends when training begins; the
    # states are read after the first optimizer step; peaks, means and minima are over the training window.
    gpu_allocated_at_start_mib: float | None  # torch allocated before the run began (what else the process holds)
    setup_seconds: float | None  # sampler start (before the Trainer is built) to the first training step
    train_begin_s: float | None  # the training window on memory.csv's clock
    train_end_s: float | None
    gpu_states_allocated_mib: float | None  # torch.cuda.memory_allocated after step 1: model states, measured
    host_states_rss_mib: float | None  # this process's RSS after step 1
    gpu_peak_allocated_mib: float | None  # torch.cuda.max_memory_allocated over the training window
    gpu_peak_reserved_mib: float | None  # torch.cuda.max_memory_reserved (allocator cache included) over it
    gpu_peak_mib: float | None  # NVML (all of the GPU's memory in use) over the training window
    gpu_mean_mib: float | None
    gpu_min_mib: float | None
    host_peak_rss_mib: float
    per_rank_memory: list[dict]  # every rank's phases and peaks, with rank, local_rank and host
    # `memory.estimate_model_states` (the Trainer's or DeepSpeed's) per GPU and per node's host; no GPU: host holds both
    estimated_model_states_gpu_mib: float | None
    estimated_model_states_cpu_mib: float
    estimator: str  # which estimate: DeepSpeed's function, or the HF Trainer's 16 bytes/param
    data_stats: dict  # per split: total, used, dropped, context_shortened, answer_start_repaired, ... tokens
    device: str
    versions: dict
    wall_seconds: float
    train_runtime_seconds: float
    tokenizer: str
    output_dir: str
    config: dict
    # SQuAD v1.1 EM and F1 (%) on --score-questions dev questions, before and after training (`evaluation`); or None
    em: float | None = None
    f1: float | None = None
    em_before: float | None = None
    f1_before: float | None = None
    # rank 0's GPU: its memory as nvidia-smi prints it, and the share WORKSHOP_GPU_MEMORY_FRACTION let PyTorch use
    # (`env.gpu_memory_fraction`); None without a GPU or a limit, and in older runs
    gpu_total_mib: float | None = None
    gpu_memory_fraction: float | None = None


def find_runs(paths) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Finished run directories among `paths` and, one or two levels down, inside them; and the
    directories holding an unfinished run, each with a sentence on why it is left out.

    Raises:
        WorkshopError: a path does not exist.
    """
    runs, skipped = [], []
    for p in map(Path, [paths] if isinstance(paths, (str, Path)) else paths):
        if not p.exists():
            raise WorkshopError(f"{p} does not exist.", "give run directories (e.g. runs/*) or folders holding them.")
        found = {
            f.parent for pattern in ("", "*/", "*/*/") for name in rundir.RUN_FILES for f in p.glob(pattern + name)
        }
        for d in sorted(found):
            what, info = rundir.state(d)
            if what == "finished":
                runs.append(d)
            elif what == "unfinished":
                skipped.append((d, rundir.describe_unfinished(info)))
    return runs, skipped


NUMBERS = [f.name for f in fields(RunResults) if f.type.split(" |")[0] in ("int", "float")]  # results.json's figures


def load_results(paths) -> pd.DataFrame:
    """One row per finished run found under `paths` (see `find_runs`), columns = results.json keys +
    `run_dir`. Unfinished runs are named on stderr and left out.

    Raises:
        WorkshopError: a path does not exist, or no finished run is under any of `paths`.
    """
    runs, skipped = find_runs(paths)
    for d, why in skipped:
        print(f"skipped {d}: {why}", file=sys.stderr)
    where = ", ".join(map(str, [paths] if isinstance(paths, (str, Path)) else paths))
    fix = "give the output directories of finished `workshop run`s (e.g. runs/*)."
    if not runs:
        raise WorkshopError(f"No finished run (results.json) under {where}.", fix)
    rows = []
    for r in runs:
        try:
            row = json.loads((r / "results.json").read_text())
            if not isinstance(row, dict) or "experiment" not in row:
                raise ValueError("no experiment in it")
            if wrong := [k for k in NUMBERS if row.get(k) is not None and type(row[k]) not in (int, float)]:
                raise ValueError(f"its {wrong[0]} is {row[wrong[0]]!r}, not a number")  # edited: plots and sums fail
        except (OSError, ValueError, UnicodeDecodeError) as e:  # damaged by hand or a full disk: left out, named
            print(f"skipped {r}: its results.json cannot be read ({e})", file=sys.stderr)
            continue
        rows.append(row | {"run_dir": str(r)})
    if not rows:
        raise WorkshopError(f"No readable results.json under {where}.", fix)
    return pd.DataFrame(rows)


def hfu(row) -> float | None:
    """A run's HFU (see `RunResults.hfu`): results.json's own; for a run recorded before it was, MFU itself
    without activation checkpointing (the hardware does no more work than the model needs) and None with it.
    None where MFU is (a CPU)."""
    if row.get("hfu") is not None and pd.notna(row.get("hfu")):
        return row["hfu"]
    mfu, cfg = row.get("mfu"), row.get("config") or {}
    return None if mfu is None or pd.isna(mfu) or cfg.get("activation_checkpointing") else mfu


def fmt(value, metric: str) -> str:
    """One figure as the tables show it, by its unit (`COLUMNS`): fractions (MFU, HFU) as percentages, nats and
    seconds to 4 decimals, the rest (MiB, tokens/s) to whole units with thousands separators; "n/a" where missing
    (a GPU figure on a CPU)."""
    if isinstance(value, (list, tuple)):
        return " / ".join(fmt(v, metric) for v in value)
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "n/a"
    if not isinstance(value, (int, float)):
        return str(value)
    u = COLUMNS[metric].unit if metric in COLUMNS else ""
    if u == "fraction":
        return f"{value:.1%}"
    return f"{value:,.4f}" if u in ("nats", "s") else f"{value:,.0f}"


def exercise_table(
    df: pd.DataFrame,
    columns: list[str] | None = None,
    reference: pd.DataFrame | None = None,
    bands: dict[str, float | None] | None = None,
) -> pd.DataFrame:
    """The exercise table: one row per run of `df` (`load_results`), the `columns` (results.json keys; default every
    `default` key of `COLUMNS` the runs have) under their titles, units in them (losses in nats, memory in MiB). The
    micro-batch is in sequences, or in tokens for a token-budget run; HFU is filled in for older runs (`hfu`).

    With `reference` (reference runs indexed by run name, as `lessons.reference`), the figures are formatted,
    and under each run (measured "yours") comes the reference run of the same name (measured "reference"), each
    figure with its band from `bands` (metric -> relative spread, as `lessons.band`): "101,108 ± 9%". Each row
    says which weights the run started from (`weights`); a loss whose reference used another model or other
    weights is marked "not comparable" and gets no band (`not_comparable`). What `workshop report` writes
    and every learner notebook shows (through `lessons.table`)."""
    df = df.assign(hfu=[hfu(r) for _, r in df.iterrows()]) if "mfu" in df else df
    keys = [k for k in (columns or [k for k, col in COLUMNS.items() if col.default]) if k in df]
    titles = {k: COLUMNS[k].title if k in COLUMNS else k for k in keys}
    t = df[keys].copy()
    if "config" in df and "micro_batch_size_per_gpu" in t:
        t["micro_batch_size_per_gpu"] = [
            _micro_batch(c, mb) for c, mb in zip(df["config"], t["micro_batch_size_per_gpu"])
        ]
    if reference is None:
        if "eval_loss" in t:
            t["eval_loss"] = t["eval_loss"].map(
                lambda v: " / ".join(f"{x:.3f}" for x in v) if isinstance(v, list) else v
            )
        for k in [k for k in keys if COLUMNS.get(k, Column(k)).unit == "fraction"]:  # MFU, HFU: percentages
            t[k] = t[k].map(lambda v: f"{v:.1%}" if v is not None and pd.notna(v) else "n/a")
        return t.rename(columns=titles)
    ref = reference.assign(hfu=[hfu(r) for _, r in reference.iterrows()]) if "mfu" in reference else reference
    names = [Path(d).name for d in df["run_dir"]] if "run_dir" in df else list(df.index)
    rows = []
    for i, name in enumerate(names):
        mine = df.iloc[i]
        rows.append(
            {"run": name, "measured": "yours", "weights": weights(mine)}
            | {titles[k]: fmt(t[k].iloc[i], k) for k in keys}
        )
        if name in ref.index:
            other = ref.loc[name]
            apart = not_comparable(mine, other)
            cells = {}
            for k in keys:
                if k not in ref:
                    cells[titles[k]] = "n/a"
                    continue
                cell, b = fmt(other[k], k), (bands or {}).get(k)
                if apart and k in LOSSES:  # no band: the two losses do not measure the same thing
                    cell += f" (not comparable: {apart})"
                elif b is not None and not isinstance(other[k], list) and pd.notna(other[k]):
                    cell += f" ± {b:.0%}"
                cells[titles[k]] = cell
            rows.append({"run": name, "measured": "reference", "weights": weights(other)} | cells)
    return pd.DataFrame(rows)


LOSSES = ("train_loss", "eval_loss")  # figures that depend on the model and its starting weights, not the machine


def weights(row) -> str:
    """The weights a run started from (results.json's `random_weights`, `tiny`): "pretrained", "random" or
    "random, tiny model"."""
    if not row.get("random_weights"):
        return "pretrained"
    return "random, tiny model" if row.get("tiny") is True or str(row.get("model", "")).endswith("(tiny)") else "random"


def not_comparable(row, ref) -> str | None:
    """Why a run's losses cannot stand beside its reference run's, or None where they can: another model, or
    other starting weights. A random model starts near ln(vocabulary size) nats (Qwen3's 151,936 tokens: 11.9)
    and a pretrained one near its converged loss, so after 24 steps a pretrained run's 1-2 nats and a random
    run's 9.4 measure the weights, not the run; memory and speed do not depend on the weights' values."""
    if str(row.get("model")) != str(ref.get("model")):
        return f"another model ({ref.get('model')})"
    if weights(row) != weights(ref):
        return f"{weights(ref)} weights, yours {weights(row)}"
    return None


def _micro_batch(config, sequences) -> str:
    if isinstance(config, dict) and config.get("batching") == "token_budget":
        return f"≤{config['max_tokens_per_micro_batch']:,} tokens"
    return f"{sequences} seqs"


def _labels(df: pd.DataFrame) -> list[str]:
    """Short run names: the experiment, plus what differs between the runs (model, recipe, micro-batch, world
    size); where two runs would still share a name, the run directory's name instead ("baseline_ac"), or beside
    it where the directory's name does not contain it ("stage2 (x)")."""
    parts = [
        ("model", lambda v: str(v).split("/")[-1]),
        ("recipe", str),
        ("micro_batch_size_per_gpu", str),
        ("world_size", lambda v: f"x{v}"),
    ]
    varying = [(k, f) for k, f in parts if k in df and df[k].astype(str).nunique() > 1]
    df = df.copy()
    if "micro_batch_size_per_gpu" in df:  # in tokens for a token-budget run: its sequences vary in number
        df["micro_batch_size_per_gpu"] = [
            "mb" + _micro_batch(c, v).replace(" seqs", "").replace(",", "").replace("≤", "")
            for c, v in zip(df["config"] if "config" in df else [None] * len(df), df["micro_batch_size_per_gpu"])
        ]
    labels = [" ".join([str(r["experiment"]), *(f(r[k]) for k, f in varying)]) for _, r in df.iterrows()]
    if len(set(labels)) < len(labels) and "run_dir" in df:
        labels = [
            Path(d).name if label in Path(d).name else f"{label} ({Path(d).name})"
            for label, d in zip(labels, df["run_dir"])
        ]
    return labels


def _source(df: pd.DataFrame) -> str:
    """What a figure shows: the runs' model(s) and machine(s), "Qwen3-0.6B on NVIDIA H100 80GB HBM3"."""
    models = ", ".join(dict.fromkeys(str(m).split("/")[-1] for m in df["model"].dropna())) if "model" in df else ""
    devices = ", ".join(dict.fromkeys(df["device"].dropna().astype(str))) if "device" in df else ""
    return " on ".join(x for x in (models, devices) if x)


def _tiny_note(df: pd.DataFrame) -> str:
    """A figure's subtitle for runs of the tiny model: its numbers show the mechanisms, not a GPU's figures."""
    if "tiny" in df and (df["tiny"] == True).all():  # noqa: E712 - a column of bools (or None)
        return "\ntiny model (~0.35M parameters) on the CPU: the mechanisms, not the sizes or speeds of a real run"
    return ""


def cpu_memory_note(df: pd.DataFrame) -> str:
    """A banner for memory figures of runs without a GPU: what they measure (the whole process's host memory), how small
    the model states are in it (the estimate against the peak RSS), and where the lesson shows ("" for GPU runs)."""
    if _has_gpu(df) or "host_peak_rss_mib" not in df:
        return ""
    states = df["estimated_model_states_cpu_mib"].max() if "estimated_model_states_cpu_mib" in df else float("nan")
    peak = df["host_peak_rss_mib"].min()
    return (
        f"Not meaningful on a CPU: the model states (at most {states:,.1f} MiB estimated) are "
        f"{states / peak:.1%} of the process's {peak:,.0f} MiB, so what a ZeRO stage or offload saves cannot "
        "show here. The GPU reference shows it."
    )


def _has_gpu(df: pd.DataFrame) -> bool:
    return "gpu_peak_mib" in df and df["gpu_peak_mib"].notna().any()


MAX_PANELS = 24  # runs in the memory-over-time figure: 6 rows of 4


def plot_memory_over_time(df: pd.DataFrame):
    """Memory against time, one panel per run: NVML's GPU memory in use and PyTorch's allocated memory
    (MiB), or host RSS (MiB) on a CPU-only machine; the first MAX_PANELS runs, the title says so. Time 0 is the first training step (the end of model and
    engine set-up, the same event in every run; negative: set-up); the training window is shaded."""
    gpu = _has_gpu(df)
    cols = (
        [("gpu_used_mib", "GPU in use (NVML)"), ("torch_allocated_mib", "torch allocated")]
        if gpu
        else [("host_rss_mib", "host RSS")]
    )
    shown = df.head(MAX_PANELS)  # a figure of 1,000 panels takes matplotlib's layout most of an hour
    n = len(shown)
    per_row, rows = min(n, 4), ceil_div(n, min(n, 4))  # one panel per run, 4 a row
    fig, grid = plt.subplots(
        rows, per_row, figsize=(4.0 * per_row, 3.2 * rows + 0.6), squeeze=False, sharey=True, layout="constrained"
    )
    for ax in grid.flat[n:]:
        ax.set_visible(False)
    axes = list(grid.flat[:n])
    for ax, label, (_, row) in zip(axes, _labels(shown), shown.iterrows()):
        try:  # a run copied without it, or with one of another layout (an older workshop's, edited): no curve
            mem = pd.read_csv(Path(row["run_dir"]) / "memory.csv")[["time_s", *dict(cols)]]
        except (OSError, ValueError, KeyError):
            mem = pd.DataFrame(columns=["time_s", *dict(cols)])
        begin = row.get("train_begin_s")
        begin = float(begin) if pd.notna(begin) else 0.0
        for col, name in cols:
            ax.plot(mem["time_s"] - begin, mem[col], label=name)
        end = row.get("train_end_s")
        if pd.notna(end):
            ax.axvspan(0, float(end) - begin, color="tab:green", alpha=0.1, label="training steps")
        ax.set(title=label if len(mem) else f"{label}: no readable memory.csv", xlabel="s from the first step")
        ax.xaxis.set_major_locator(plt.MaxNLocator(4))
        ax.grid(alpha=0.3)
    # once all are drawn: the shared scale spans every run's curves (a panel's set_ylim froze it at the first run's)
    axes[0].set(ylabel="MiB (GPU)" if gpu else "MiB (host, no GPU)", ylim=(0, None))  # from zero: no wobble fills it
    axes[0].legend(fontsize=7)
    banner = cpu_memory_note(df)
    fig.suptitle(
        f"Memory over time, {_source(df)}"
        + (f", the first {n} of {len(df):,} runs" if len(df) > n else "")
        + ("" if gpu else " (no GPU: host memory)")
        + _tiny_note(df)
        + (f"\n{textwrap.fill(banner, 45 * per_row)}" if banner else ""),
        fontsize=9,
    )
    return fig


def plot_loss(df: pd.DataFrame):
    """Training loss per optimizer step (train_log.csv) of every run on one axis, each epoch's eval loss as
    a marker; nats per label token (which tokens are labelled depends on the recipe's `loss_on`)."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for label, (_, row) in zip(_labels(df), df.iterrows()):
        log = pd.read_csv(Path(row["run_dir"]) / "train_log.csv")
        train = log.dropna(subset=["loss"])
        (line,) = ax.plot(train["step"], train["loss"], label=f"{label} (train)")
        ev = log.dropna(subset=["eval_loss"])
        ax.plot(ev["step"], ev["eval_loss"], "o", color=line.get_color(), label=f"{label} (eval)")
    ax.set(xlabel="optimizer step", ylabel="loss, nats per label token", title="Training and eval loss")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.suptitle(_source(df) + _tiny_note(df), fontsize=9)
    fig.tight_layout()
    return fig


def plot_memory_and_throughput(df: pd.DataFrame):
    """Two bar charts side by side, per run: memory by phase (MiB: model states measured after the first
    step, torch's peak allocated and reserved and NVML's peak over the training steps, with the estimate of
    the model states as a dashed outline; host peak RSS on a CPU-only machine) and steady-state training
    tokens/s (`metrics.steady_state`; the whole run's where there is no steady state)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = _labels(df)
    x = range(len(df))
    if _has_gpu(df):
        bars = [
            (k, title(k))
            for k in ("gpu_states_allocated_mib", "gpu_peak_allocated_mib", "gpu_peak_reserved_mib", "gpu_peak_mib")
            if k in df
        ]
        w = 0.8 / len(bars)
        for i, (key, name) in enumerate(bars):
            a.bar([j + (i - (len(bars) - 1) / 2) * w for j in x], df[key], w, label=name)
        a.bar(
            x,
            df["estimated_model_states_gpu_mib"],
            0.8,
            fill=False,
            edgecolor="k",
            ls="--",
            label="estimated model states",
        )
        a.set(ylabel="GPU memory, MiB", title="GPU memory per run (training window)")
    else:
        a.bar(x, df["host_peak_rss_mib"], label="host peak RSS")
        a.set(ylabel="host memory, MiB", title="Memory per run (no GPU: host)")
        a.text(
            0.5,
            0.5,
            "\n".join(textwrap.wrap(cpu_memory_note(df), 48)),
            transform=a.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="tab:red",
            bbox={"facecolor": "white", "alpha": 0.9, "edgecolor": "tab:red"},
        )
    a.legend(fontsize=8)
    steady = df["steady_train_tokens_per_second"] if "steady_train_tokens_per_second" in df else None
    speed = steady.fillna(df["train_tokens_per_second"]) if steady is not None else df["train_tokens_per_second"]
    b.bar(x, speed, color="tab:green")
    b.set(ylabel="training tokens/s (steady state)", title="Throughput per run")
    for ax in (a, b):
        ax.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(_source(df) + _tiny_note(df), fontsize=9)
    fig.tight_layout()
    return fig


def _per_gpu_peak(row) -> float | None:
    """The largest rank's peak: GPU (NVML) MiB, or host RSS MiB on a CPU-only run."""
    ranks = row.get("per_rank_memory") if isinstance(row.get("per_rank_memory"), list) else [row]
    key = "gpu_peak_mib" if ranks[0].get("gpu_peak_mib") is not None else "host_peak_rss_mib"
    vals = [r[key] for r in ranks if r.get(key) is not None]
    return max(vals) if vals else None


# `scaling_table`'s own columns beside results.json's: the largest rank's peak, GPU (NVML) or host RSS.
PEAK_PER_GPU, PEAK_PER_RANK = "peak GPU MiB per GPU", "peak host RSS MiB per rank"


def per_gpu(key: str) -> str:
    """The scaling table's title of a speed divided by the GPUs: "steady tokens/s per GPU"."""
    return f"{title(key)} per GPU"


def scaling_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Runs of the same experiment, model and recipe side by side across world sizes (None if all runs have
    one world size). Scaling efficiency = (throughput per GPU) / (throughput per GPU at the smallest world
    size), from the steady-state tokens/s (`metrics.steady_state`) where the runs
    have it, else (runs made before it was recorded) from the whole-run samples/s, warm-up included. Beside it,
    questions/s: steady (questions per step / mean steady step time) where the runs have it, else the Trainer's
    samples/s (those older runs had fixed-size batches, so a sample is a question)."""
    if df["world_size"].nunique() < 2:
        return None
    steady = "steady_train_tokens_per_second" in df and df["steady_train_tokens_per_second"].notna().all()
    questions = "steady_train_samples_per_second" if steady else "train_samples_per_second"
    t = df.assign(per_gpu=df[questions] / df["world_size"], peak=[_per_gpu_peak(r) for _, r in df.iterrows()])
    if steady:
        t = t.assign(tok_per_gpu=t["steady_train_tokens_per_second"] / t["world_size"])
    t = t.sort_values(["model", "recipe", "experiment", "world_size"])
    speed = "tok_per_gpu" if steady else "per_gpu"
    base = t.groupby(["model", "recipe", "experiment"])[speed].transform("first")
    gpu = df["gpu_peak_mib"].notna().any()
    cols = {
        "experiment": t["experiment"],
        "model": t["model"],
        "recipe": t["recipe"],
        "GPUs": t["world_size"],
        title("global_batch_size"): t["global_batch_size"],
        title(questions): t[questions],
        per_gpu(questions): t["per_gpu"].round(2),
    }
    if steady:
        tokens = "steady_train_tokens_per_second"
        cols |= {title(tokens): t[tokens], per_gpu(tokens): t["tok_per_gpu"].round(1)}
    return pd.DataFrame(
        cols
        | {
            "scaling efficiency": (t[speed] / base).map("{:.0%}".format),
            (PEAK_PER_GPU if gpu else PEAK_PER_RANK): t["peak"],
            title("estimated_model_states_gpu_mib"): t["estimated_model_states_gpu_mib"],
            title("train_loss"): t["train_loss"],
        }
    )


def plot_scaling(df: pd.DataFrame):
    """Samples/s per GPU and peak memory per GPU against the number of GPUs, one line per experiment;
    dashed, DeepSpeed's estimate of the model states per GPU (the part ZeRO divides)."""
    t = scaling_table(df)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    mem_col = PEAK_PER_GPU if PEAK_PER_GPU in t else PEAK_PER_RANK
    speed = next(s for s in map(per_gpu, ("steady_train_tokens_per_second", "train_samples_per_second")) if s in t)
    est = title("estimated_model_states_gpu_mib")
    for label, g in t.groupby(_labels(t)):  # one line per experiment (and model, recipe where they vary)
        a.plot(g["GPUs"], g[speed], marker="o", label=label)
        (line,) = b.plot(g["GPUs"], g[mem_col], marker="o", label=label)
        if g[est].notna().all() and mem_col == PEAK_PER_GPU:
            b.plot(g["GPUs"], g[est], ls="--", color=line.get_color(), label=f"{label}: est. model states")
    a.set(xlabel="GPUs (ranks)", ylabel=speed, title="Throughput per GPU")
    b.set(xlabel="GPUs (ranks)", ylabel=mem_col, title="Peak memory per GPU")
    for ax in (a, b):
        ax.set_xticks(sorted(t["GPUs"].unique()))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write_report(paths, out_dir: str | Path = "report") -> dict[str, Path]:
    """Write the exercise table (report.md, report.csv) and the plots (memory_over_time.png,
    memory_throughput.png) for the runs under `paths` into `out_dir`, and, when the runs span several world
    sizes, the scaling table (scaling.md, scaling.csv) and plot (scaling.png); return {name: path}.

    Raises:
        WorkshopError: `out_dir` is a file or cannot be written; it or a file it would write is a link
            (`rundir.refuse_links`); no readable finished run under `paths` (see `load_results`).
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise WorkshopError(
            f"--out {out} is a file, not a directory; nothing was written.",
            "pass --out with a directory path (it is created if missing).",
        )
    rundir.refuse_links(
        out,
        (
            "report.md",
            "report.csv",
            "memory_over_time.png",
            "memory_throughput.png",
            "scaling.md",
            "scaling.csv",
            "scaling.png",
        ),
        "--out",
    )
    rundir.check_writable(out, "--out")
    df = load_results(paths)
    out.mkdir(parents=True, exist_ok=True)
    files = {}

    def save(key: str, name: str, write) -> None:  # never through a link, also one planted since refuse_links
        files[key] = out / name
        with open(files[key], "wb" if name.endswith(".png") else "w", opener=rundir.no_link) as f:
            write(f)

    table, scaling = exercise_table(df), scaling_table(df)
    save("table_md", "report.md", lambda f: f.write(table.to_markdown(index=False) + "\n"))
    save("table_csv", "report.csv", lambda f: table.to_csv(f, index=False))
    png = dict(format="png", dpi=120, bbox_inches="tight")
    save("memory_over_time", "memory_over_time.png", lambda f: plot_memory_over_time(df).savefig(f, **png))
    save("memory_throughput", "memory_throughput.png", lambda f: plot_memory_and_throughput(df).savefig(f, **png))
    if scaling is not None:  # runs at several world sizes: the scaling table and plot too
        save("scaling_md", "scaling.md", lambda f: f.write(scaling.to_markdown(index=False) + "\n"))
        save("scaling_csv", "scaling.csv", lambda f: scaling.to_csv(f, index=False))
        save("scaling", "scaling.png", lambda f: plot_scaling(df).savefig(f, **png))
    plt.close("all")
    return files
