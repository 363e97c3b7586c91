"""Results: the exercise tables and plots from runs' results.json and memory.csv (introduced in
`01_baseline`; `workshop report` calls `write_report`)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from .errors import WorkshopError

# The columns of the exercise table: results.json key -> column title (units in the title).
TABLE = {
    "experiment": "experiment", "model": "model", "recipe": "recipe", "precision": "precision",
    "world_size": "GPUs", "micro_batch_size_per_gpu": "micro-batch", "global_batch_size": "global batch",
    "steps_per_epoch": "steps/epoch",
    "train_loss": "train loss", "eval_loss": "eval loss per epoch",
    "train_samples_per_second": "samples/s", "train_tokens_per_second": "tokens/s", "mfu": "MFU",
    "gpu_peak_mib": "GPU peak MiB", "gpu_mean_mib": "GPU mean MiB", "gpu_min_mib": "GPU min MiB",
    "gpu_peak_allocated_mib": "torch peak alloc MiB",
    "estimated_model_states_gpu_mib": "DS est. model states GPU MiB", "host_peak_rss_mib": "host peak RSS MiB",
}


def find_runs(paths) -> list[Path]:
    """Run directories (holding results.json) among `paths` and, one or two levels down, inside them."""
    runs: list[Path] = []
    for p in map(Path, [paths] if isinstance(paths, (str, Path)) else paths):
        if (p / "results.json").is_file():
            runs.append(p)
        elif p.is_dir():
            runs += sorted(q.parent for q in [*p.glob("*/results.json"), *p.glob("*/*/results.json")])
    return runs


def load_results(paths) -> pd.DataFrame:
    """One row per run found under `paths` (see `find_runs`), columns = results.json keys + `run_dir`.

    Raises:
        WorkshopError: no results.json under any of `paths`.
    """
    runs = find_runs(paths)
    if not runs:
        raise WorkshopError(f"No results.json found under {paths}.",
                            "give the output directories of finished `workshop run`s (e.g. runs/*).")
    rows = [json.loads((r / "results.json").read_text()) | {"run_dir": str(r)} for r in runs]
    return pd.DataFrame(rows)


def exercise_table(df: pd.DataFrame) -> pd.DataFrame:
    """The exercise table: one row per run, the columns of `TABLE` (losses rounded, memory in MiB)."""
    t = df[[c for c in TABLE if c in df]].copy()
    t["eval_loss"] = t["eval_loss"].map(lambda v: " / ".join(f"{x:.3f}" for x in v) if isinstance(v, list) else v)
    t["mfu"] = t["mfu"].map(lambda v: f"{v:.1%}" if pd.notna(v) else "n/a")
    return t.rename(columns=TABLE)


def _labels(df: pd.DataFrame) -> list[str]:
    """Short run names: experiment, plus model, recipe, micro-batch or GPUs where the runs differ in them."""
    parts = [("model", lambda v: str(v).split("/")[-1]), ("recipe", str),
             ("micro_batch_size_per_gpu", lambda v: f"mb{v}"), ("world_size", lambda v: f"x{v}")]
    varying = [(k, f) for k, f in parts if k in df and df[k].nunique() > 1]
    return [" ".join([r["experiment"], *(f(r[k]) for k, f in varying)]) for _, r in df.iterrows()]


def plot_memory_over_time(df: pd.DataFrame, ax=None):
    """GPU memory used (NVML, MiB; host RSS on a CPU-only machine) against seconds, one line per run."""
    ax = ax or plt.subplots(figsize=(9, 4.5))[1]
    gpu = df["gpu_peak_mib"].notna().any()
    col = "gpu_used_mib" if gpu else "host_rss_mib"
    if len(df) > 10:
        ax.set_prop_cycle(color=plt.cm.tab20.colors)
    for label, (_, row) in zip(_labels(df), df.iterrows()):
        mem = pd.read_csv(Path(row["run_dir"]) / "memory.csv")
        ax.plot(mem["time_s"], mem[col], label=label)
    ax.set(xlabel="seconds since training started", ylabel=("GPU used (NVML), MiB" if gpu else "host RSS, MiB"),
           title="Memory over time" + ("" if gpu else " (no GPU: host memory)"))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax.figure


def plot_memory_and_throughput(df: pd.DataFrame):
    """Two bar charts side by side: GPU peak/mean/min memory (MiB) and training samples/s, per run."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = _labels(df)
    x = range(len(df))
    if df["gpu_peak_mib"].notna().any():
        w = 0.27
        for i, (key, name) in enumerate([("gpu_peak_mib", "peak"), ("gpu_mean_mib", "mean"), ("gpu_min_mib", "min")]):
            a.bar([j + (i - 1) * w for j in x], df[key], w, label=name)
        a.bar(x, df["estimated_model_states_gpu_mib"], 0.8, fill=False, edgecolor="k", ls="--",
              label="DeepSpeed estimate, model states")
        a.set(ylabel="GPU memory, MiB", title="GPU memory per experiment")
    else:
        a.bar(x, df["host_peak_rss_mib"], label="host peak RSS")
        a.set(ylabel="host memory, MiB", title="Memory per experiment (no GPU: host)")
    a.legend(fontsize=8)
    b.bar(x, df["train_samples_per_second"], color="tab:green")
    b.set(ylabel="training samples/s", title="Throughput per experiment")
    for ax in (a, b):
        ax.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def _per_gpu_peak(row) -> float | None:
    """The largest rank's peak: GPU (NVML) MiB, or host RSS MiB on a CPU-only run."""
    ranks = row.get("per_rank_memory") if isinstance(row.get("per_rank_memory"), list) else [row]
    key = "gpu_peak_mib" if ranks[0].get("gpu_peak_mib") is not None else "host_peak_rss_mib"
    vals = [r[key] for r in ranks if r.get(key) is not None]
    return max(vals) if vals else None


def scaling_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Runs of the same experiment, model and recipe side by side across world sizes (None if all runs have
    one world size). Scaling efficiency = (samples/s per GPU) / (samples/s per GPU at the smallest world size)."""
    if df["world_size"].nunique() < 2:
        return None
    t = df.assign(per_gpu=df["train_samples_per_second"] / df["world_size"],
                  peak=[_per_gpu_peak(r) for _, r in df.iterrows()])
    t = t.sort_values(["model", "recipe", "experiment", "world_size"])
    base = t.groupby(["model", "recipe", "experiment"])["per_gpu"].transform("first")
    gpu = df["gpu_peak_mib"].notna().any()
    return pd.DataFrame({
        "experiment": t["experiment"], "model": t["model"], "recipe": t["recipe"], "GPUs": t["world_size"],
        "global batch": t["global_batch_size"], "samples/s": t["train_samples_per_second"],
        "samples/s per GPU": t["per_gpu"].round(2), "scaling efficiency": (t["per_gpu"] / base).map("{:.0%}".format),
        ("peak GPU MiB per GPU" if gpu else "peak host RSS MiB per rank"): t["peak"],
        "DS est. model states GPU MiB": t["estimated_model_states_gpu_mib"], "train loss": t["train_loss"],
    })


def plot_scaling(df: pd.DataFrame):
    """Samples/s per GPU and peak memory per GPU against the number of GPUs, one line per experiment;
    dashed, DeepSpeed's estimate of the model states per GPU (the part ZeRO divides)."""
    t = scaling_table(df)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    mem_col = next(c for c in t.columns if c.startswith("peak "))
    for label, g in t.groupby(_labels(t)):  # one line per experiment (and model, recipe where they vary)
        a.plot(g["GPUs"], g["samples/s per GPU"], marker="o", label=label)
        line, = b.plot(g["GPUs"], g[mem_col], marker="o", label=label)
        if g["DS est. model states GPU MiB"].notna().all() and mem_col.startswith("peak GPU"):
            b.plot(g["GPUs"], g["DS est. model states GPU MiB"], ls="--", color=line.get_color(),
                   label=f"{label}: DS est. model states")
    a.set(xlabel="GPUs (ranks)", ylabel="samples/s per GPU", title="Throughput per GPU")
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
    sizes, the scaling table (scaling.md, scaling.csv) and plot (scaling.png); return {name: path}."""
    df = load_results(paths)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = exercise_table(df)
    files = {"table_md": out / "report.md", "table_csv": out / "report.csv",
             "memory_over_time": out / "memory_over_time.png", "memory_throughput": out / "memory_throughput.png"}
    files["table_md"].write_text(table.to_markdown(index=False) + "\n")
    table.to_csv(files["table_csv"], index=False)
    plot_memory_over_time(df).savefig(files["memory_over_time"], dpi=120, bbox_inches="tight")
    plot_memory_and_throughput(df).savefig(files["memory_throughput"], dpi=120, bbox_inches="tight")
    scaling = scaling_table(df)
    if scaling is not None:  # runs at several world sizes: the scaling table and plot too
        files |= {"scaling_md": out / "scaling.md", "scaling_csv": out / "scaling.csv", "scaling": out / "scaling.png"}
        files["scaling_md"].write_text(scaling.to_markdown(index=False) + "\n")
        scaling.to_csv(files["scaling_csv"], index=False)
        plot_scaling(df).savefig(files["scaling"], dpi=120, bbox_inches="tight")
    plt.close("all")
    return files
