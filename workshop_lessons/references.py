"""The GPU reference runs beside the learner's own and the tolerance band of those references.

- `reference(notebook)`: the committed GPU runs (workshop_lessons/reference/h200/course/runs/NAME/results.json) of a
  notebook's runs.
- `median_runs(root)`: of each configuration's rounds there, the run with the median speed, the protocol's figure.
- `band(metric)`: the relative spread of a metric over repeated runs of one configuration: the largest
  (max - min) / mean(max, min) over a reference run and its repeats (root/repeat/NAME, root/repeat/NAME-rK), as a
  fraction (0.05 = +-5%).
- `cpu_band()`: the spread between processes of a run's tokens/s relative to its process's baseline on a CPU
  (workshop_lessons/reference/cpu/run_order.csv), the band of a CPU run's speed verdicts.
- `table(notebook, runs_dir)`: the learner's exercise table (`results.exercise_table`) with the reference and its
  band beside each figure: what every learner notebook shows under its runs."""

import json
import os
import re
from pathlib import Path

import pandas as pd

from workshop_lib.results import exercise_table, find_runs, load_results, title

from .registry import COLUMNS, COURSE_RUNS, REFERENCE, REFERENCE_DIR


def _load(root: Path) -> pd.DataFrame:
    if not root.is_dir() or not find_runs(root)[0]:
        return pd.DataFrame()
    df = load_results(root)
    df["run"] = [Path(d).name for d in df["run_dir"]]
    return df.set_index("run")


def _configuration(run: str) -> str:
    """A repeat's configuration: its folder's name without the protocol's round suffix (NAME-rK -> NAME)."""
    return re.sub(r"-r\d+$", "", run)


def median_runs(root: Path, metric: str = "steady_train_tokens_per_second") -> pd.DataFrame | None:
    """The protocol's figure of each configuration under `root` (docs/measurement.md): of runs/NAME and its repeats
    (repeat/NAME, repeat/NAME-rK), the run whose `metric` is the median of its rounds (the lower of the two middle
    ones where their count is even, so that every figure of a row is one run's), as `load_results` rows indexed by
    NAME; None where root has no runs/. For references whose rounds are all made as the notebook makes its runs
    (04's, 03e's); `reference` reads the course's runs/ only, since its repeats are fresh processes where the
    notebook's runs share one (its README)."""
    df = _load(root / "runs")
    if df.empty:
        return None
    again = _load(root / "repeat").rename(index=_configuration)
    df = pd.concat([df, again]) if not again.empty else df
    return pd.concat([g.sort_values(metric).iloc[[(len(g) - 1) // 2]] for _, g in df.groupby(level=0, sort=False)])


def reference(notebook: str | None = None, root: Path = REFERENCE_DIR) -> pd.DataFrame:
    """The reference runs (one row per run name, indexed by it; results.json columns) of `notebook`'s runs,
    or all of them; an empty frame where none are on file (a copy of the lessons without their reference/)."""
    df = _load(root / "runs")
    if df.empty or notebook is None:
        return df
    return df.loc[[n for n in COURSE_RUNS[notebook] if n in df.index]]


def show_own_key_references(notebook: str, base: str, own_keys: dict[str, str], cols: list[str]) -> None:
    """The own-key exercise's GPU reference (02, 03): for each suggested key (`own_keys`: KEY=VALUE -> its
    reference-only run of `COURSE_RUNS`), the reference's `base` run beside that run, `cols` as a markdown table; a
    line instead where either is not on file."""
    from IPython.display import Markdown, display  # the notebooks' own dependency

    ref = reference(notebook)
    for key, run in own_keys.items():
        if {base, run} <= set(ref.index):
            print(f"Reference, {key} ({run}) against {base}:")
            display(Markdown(ref.loc[[base, run], cols].to_markdown()))
        else:
            print(f"No GPU reference on file yet for {key} ({run}).")


def _repeats(root: Path) -> dict[str, list[dict]]:
    """name -> the results.json of each run of that configuration measured again: root/repeat/NAME (made by
    `--repeat`) and root/repeat/NAME-rK (fresh-process repeats by the measurement protocol, `scripts/repeats.py`)."""
    found: dict[str, list[dict]] = {}
    for d in sorted((root / "repeat").glob("*")):
        if (d / "results.json").is_file():
            found.setdefault(_configuration(d.name), []).append(json.loads((d / "results.json").read_text()))
    return found


def band(metric: str, root: Path = REFERENCE_DIR, names: tuple[str, ...] | None = None) -> float | None:
    """The largest relative spread (max - min) / mean(max, min) of `metric` over each configuration's reference
    run and its repeats (`_repeats`), the measurement protocol's band (docs/measurement.md), a fraction: over the
    configurations `names` (those a comparison compares), else over every one; None where none of them was
    repeated or the metric is missing."""
    first, spreads = _load(root / "runs"), []
    for name, again in _repeats(root).items():
        if names is not None and name not in names:
            continue
        values = [r[metric] for r in again if pd.notna(r.get(metric))]
        if name in first.index and metric in first and pd.notna(first.at[name, metric]):
            values.append(first.at[name, metric])
        if len(values) > 1 and max(values) + min(values):
            spreads.append((max(values) - min(values)) / ((max(values) + min(values)) / 2))
    return max(spreads) if spreads else None


CPU_RUN_ORDER = REFERENCE / "cpu" / "run_order.csv"  # scripts/cpu_run_order.py: notebook 02's runs on a 2-core CPU


def cpu_band(measured: pd.DataFrame | None = None) -> float | None:
    """The band of a CPU run's speed verdicts: how much one of notebook 02's runs, relative to the baseline of its
    own process, varied between processes made after the warm-up (`CPU_RUN_ORDER`, or `measured` with its
    columns): the largest |a - b| / mean(a, b) of a run's tokens/s over its process's baseline's, a fraction;
    None where not measured. The notebooks compare runs of one kernel, whose machine load they share, so the
    spread of the ratio is the noise of a comparison; a shared 2-core machine's is far wider than an H100's
    (`band`)."""
    if measured is None:
        if not CPU_RUN_ORDER.is_file():
            return None
        measured = pd.read_csv(CPU_RUN_ORDER)
    tps = title("steady_train_tokens_per_second")
    warm = measured[measured["warm-up"].astype(bool)].copy()
    process = warm.groupby(["round", "order"])[tps]
    warm["ratio"] = warm[tps] / process.transform(lambda v: v[warm.loc[v.index, "run"] == "baseline"].iloc[0])
    spreads = [
        (v.max() - v.min()) / ((v.max() + v.min()) / 2)
        for run, v in warm.groupby("run")["ratio"]
        if run != "baseline" and len(v) > 1
    ]
    return max(spreads) if spreads else None


def reference_note(root: Path = REFERENCE_DIR) -> str:
    """One line naming the machine, model and steps the reference figures come from, and how bands are measured."""
    df = _load(root / "runs")
    if df.empty:
        return f"No GPU reference runs on file ({root} is missing): only your own figures are shown."
    r = df.iloc[0]
    repeated = sorted(set(df.index) & set(_repeats(root)))
    where = root.relative_to(REFERENCE.parents[1]) if root.is_relative_to(REFERENCE.parents[1]) else root
    budget = df.at["baseline", "config"]["max_tokens_per_micro_batch"] if "baseline" in df.index else None
    v = r["versions"]
    return (
        f"Reference: {r['device']}, {r['model']} ({'random weights' if r['random_weights'] else 'pretrained'}), "
        f"the {r['config']['recipe']} recipe"
        + (f", micro-batches of up to {budget:,} tokens" if budget else "")
        + f", {int(r['global_steps'])} optimizer steps, each notebook's runs in one process after its warm-up as a "
        f"kernel makes them (DeepSpeed {v['deepspeed']}, torch {v['torch']}, transformers {v['transformers']}); "
        f"steady state = each run's tokens over its time after the warm-up its log shows; runs in {where}/runs. "
        f"± band: the largest (max - min) / mean of a run and the same configuration measured again in other "
        f"processes ({', '.join(repeated) or 'none repeated'}; docs/measurement.md), as a percentage, one band per figure; "
        "figures without a band were measured once."
    )


def table(
    notebook: str,
    runs_dir: str | os.PathLike,
    columns: list[str] | None = None,
    root: Path = REFERENCE_DIR,
    runs: list[str] | None = None,
) -> pd.DataFrame:
    """The learner's exercise table for `notebook`: each of its runs (`runs`, default `COURSE_RUNS`) found finished in
    runs_dir/NAME, in that order, the `columns` (default `COLUMNS[notebook]`) with each figure's reference and
    band beside it (`results.exercise_table`). Data, not answers: the notebook shows it, the learner interprets it.

    Raises:
        WorkshopError: none of the notebook's runs has finished in runs_dir.
    """
    cols = columns or COLUMNS[notebook]
    dirs = [Path(runs_dir) / n for n in (runs or COURSE_RUNS[notebook]) if (Path(runs_dir) / n).is_dir()]
    df = load_results(dirs or [Path(runs_dir)])
    return exercise_table(df, cols, reference(notebook, root), {m: band(m, root) for m in cols})
