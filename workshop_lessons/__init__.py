"""What the notebooks share: the runs each one makes, the GPU reference runs beside the learner's own, and
the tolerance band of those references (used by every notebook 01-04). Each notebook's figures and verdicts,
computed from its runs, come from this package's modules (`setup`, `baseline`, `zero_stages`, `offload`,
`fine_tuned`, `large_models`, `drills`, `multi_gpu`) as typed records; the sentences that answer an
exercise are written in the solution notebook, from those records.

- `COURSE_RUNS`: per notebook, run name -> (experiment, settings). The notebooks and the reference command
  (`python -m workshop_lessons OUT_DIR`, on a GPU) run exactly these, so each learner run has a reference.
- `reference(notebook)`: the committed GPU runs (workshop_lessons/reference/h100/course/runs/NAME/results.json) of a notebook's runs.
- `warm_up(notebook, runs_dir)`: on a CPU, the short runs made and thrown away before those a notebook measures
  (none on a GPU).
- `cpu_band()`: the spread between processes of a run's tokens/s relative to its process's baseline on a CPU
  (workshop_lessons/reference/cpu/run_order.csv), the band of a CPU run's speed verdicts.
- `band(metric)`: the relative spread of a metric over repeated runs of one configuration: the largest
  |a - b| / mean over the reference runs measured again (`REPEATS`: the same configuration in an earlier call
  on another H100, workshop_lessons/reference/h100/runs; and any OUT_DIR/repeat/NAME of `--repeat`), as a fraction (0.05 = +-5%).
- `table(notebook, runs_dir)`: the learner's exercise table (`results.exercise_table`) with the reference and its
  band beside each figure: what every learner notebook shows under its runs.
- `Comparison` and `compare(...)`: one figure against another (a run against the baseline, or against its
  reference), the measured band that decides, and the verdict: "higher", "lower" or "within the band". The lesson
  modules return these records; the solution notebooks write the sentences from them.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import pandas as pd
import torch

from workshop_lib import env, results, variables
from workshop_lib.config import TINY, RunConfig, recipe_settings
from workshop_lib.ds_config import EXPERIMENTS
from workshop_lib.errors import WorkshopError
from workshop_lib.fit import micro_batch_budget
from workshop_lib.results import exercise_table, find_runs, load_results, title
from workshop_lib.rundir import state
from workshop_lib.train import run_experiment
from workshop_lib.units import MiB

# The reference runs the notebooks show beside the learner's, shipped with the package (pyproject's package-data)
REFERENCE = Path(__file__).resolve().parent / "reference"
REFERENCE_DIR = REFERENCE / "h100" / "course"  # runs/NAME: one reference run each; repeat/NAME: the same again
# Reference runs measured again: the same model, recipe, data, steps and experiment in workshop_lessons/reference/h100/runs
# (scripts/gpu_benchmark.sh with MAX_STEPS=24, another call on another H100 instance).
REPEATS = {
    "baseline": REFERENCE / "h100/runs/Qwen3-0.6B-default-baseline",
    "stage2": REFERENCE / "h100/runs/Qwen3-0.6B-default-stage2",
    "stage2_offload": REFERENCE / "h100/runs/Qwen3-0.6B-default-stage2_offload",
    "stage3_offload": REFERENCE / "h100/runs/Qwen3-0.6B-default-stage3_offload",
    "baseline_classic": REFERENCE / "h100/runs/bloom-560m-classic-baseline",
}
# What those earlier runs measured as the reference runs do; their memory was taken over another window (set-up
# included), so memory has no band until a run is repeated with `--repeat`.
REPEATS_METRICS = {"steady_train_tokens_per_second", "steady_step_time_s", "mfu", "gpu_util_pct", "train_loss"}

QUARTER = "quarter"  # a quarter of the recipe's max_tokens_per_micro_batch (its --tiny value with the tiny model)
# run name -> (experiment, RunConfig settings beyond the notebook's common options)
COURSE_RUNS: dict[str, dict[str, tuple[str, dict]]] = {
    "01_baseline": {
        "baseline": ("baseline", {}),
        "baseline_classic": ("baseline", {"recipe": "classic"}),
        # the same tokens per optimizer step, in 4 micro-batches of a quarter the size
        "baseline_accum4": ("baseline", {"max_tokens_per_micro_batch": QUARTER, "gradient_accumulation_steps": 4}),
    },
    "02_zero_stages": {
        "baseline": ("baseline", {}),
        "stage1": ("stage1", {}),
        "stage2": ("stage2", {}),
        "stage3": ("stage3", {}),
        "baseline_ac": ("baseline", {"activation_checkpointing": True}),
        # ZeRO-3 runs without torch.compile (preflight.check_machine): the baseline the same way, to compare like
        # with like, and the compilation's own effect beside it
        "baseline_no_compile": ("baseline", {"torch_compile": False}),
        # one key of stage 2's ds_config.json changed (--ds-config): one gradient bucket instead of two
        "stage2_no_overlap": ("stage2", {"ds_config": ["zero_optimization.overlap_comm=false"]}),
    },
    "03_cpu_offload": {
        "stage2": ("stage2", {}),
        "stage2_offload": ("stage2_offload", {}),
        "stage3": ("stage3", {}),
        "stage3_offload": ("stage3_offload", {}),
    },
}
# The notebooks and the reference stop after this many optimizer steps (the warm-up found in each run's log),
# the tiny CPU runs too (6 epochs of the tiny data). WORKSHOP_MAX_STEPS changes it (0: the recipe's epochs).
GPU_MAX_STEPS = 24
# The columns of each notebook's exercise table (results.json keys; titles and units from `results.COLUMNS`).
_SPEED = ["train_loss", "steady_train_tokens_per_second", "steady_step_time_s", "mfu", "hfu", "gpu_util_pct"]
COLUMNS = {
    "01_baseline": [
        *_SPEED,
        "tokens_per_step",
        "gpu_states_allocated_mib",
        "estimated_model_states_gpu_mib",
        "gpu_peak_allocated_mib",
        "gpu_peak_reserved_mib",
        "gpu_peak_mib",
        "host_peak_rss_mib",
    ],
    "02_zero_stages": [
        *_SPEED,
        "gpu_states_allocated_mib",
        "estimated_model_states_gpu_mib",
        "gpu_peak_allocated_mib",
        "gpu_peak_reserved_mib",
        "gpu_peak_mib",
        "host_peak_rss_mib",
    ],
    "03_cpu_offload": [
        *_SPEED,
        "gpu_states_allocated_mib",
        "estimated_model_states_gpu_mib",
        "estimated_model_states_cpu_mib",
        "gpu_peak_allocated_mib",
        "gpu_peak_mib",
        "host_states_rss_mib",
        "host_peak_rss_mib",
    ],
}

Verdict = Literal["higher", "lower", "equal", "within the band"]


@dataclass(frozen=True)
class Comparison:
    """`value` against `other`, one metric in one unit (MiB, tokens/s, s, nats, a fraction for MFU), and
    the verdict. `band` is the relative spread measured between two runs of one configuration (`band()`), a
    fraction; a difference no larger than it is "within the band" (noise, not a finding). None: no band was
    measured for this metric, and the verdict is the plain "higher" / "lower" / "equal"."""

    metric: str
    unit: str
    value: float
    other: float
    band: float | None = None

    @property
    def ratio(self) -> float:
        """value / other (NaN where other is 0)."""
        return self.value / self.other if self.other else float("nan")

    @property
    def difference(self) -> float:
        """value - other, in `unit`."""
        return self.value - self.other

    @property
    def spread(self) -> float:
        """|value - other| / mean(value, other), a fraction: what the band is measured in."""
        mean = (abs(self.value) + abs(self.other)) / 2
        return abs(self.value - self.other) / mean if mean else 0.0

    @property
    def verdict(self) -> Verdict:
        if self.band is not None and self.spread <= self.band:
            return "within the band"
        return "higher" if self.value > self.other else "lower" if self.value < self.other else "equal"

    @property
    def band_text(self) -> str:
        """ "±8.7%", or "no band measured"."""
        return f"±{self.band:.1%}" if self.band is not None else "no band measured"

    @property
    def ratio_text(self) -> str:
        """The ratio and the verdict, naming the band: "1.02x, within the band (±8.7%): the same within the
        noise", or "0.36x (lower; band ±8.7%)"."""
        if self.verdict == "within the band":
            return f"{self.ratio:.2f}x, within the band ({self.band_text}): the same within the noise"
        return f"{self.ratio:.2f}x ({self.verdict}; band {self.band_text})"

    @property
    def difference_text(self) -> str:
        """The difference in `unit` and the verdict, naming the band: "+0.912 nats (higher; band ±0.6%)", or
        "+0.001 nats, within the band (±0.6%): the same within the noise"."""
        d = f"{self.difference:+,.3f} {self.unit}".rstrip()
        if self.verdict == "within the band":
            return f"{d}, within the band ({self.band_text}): the same within the noise"
        return f"{d} ({self.verdict}; band {self.band_text})"


def compare(
    metric: str,
    value: float,
    other: float,
    unit: str | None = None,
    noise: float | None | Literal["reference"] = "reference",
) -> Comparison:
    """`value` against `other` for results.json's `metric`: its unit from `results.COLUMNS` unless given, and
    as band the spread measured on the reference runs (`band(metric)`) unless `noise` gives one (None: none)."""
    spread = band(metric) if noise == "reference" else noise
    unit = unit or (results.COLUMNS[metric].unit if metric in results.COLUMNS else "")
    return Comparison(metric, unit, float(value), float(other), None if spread is None else float(spread))


def beside_prediction(predicted: dict[str, float | None], measured: dict[str, float], unit: str) -> pd.DataFrame:
    """A prediction exercise's table: per name of `measured`, the learner's prediction and the measurement (both in
    `unit`), and measured / predicted; "not written" where the prediction is None or missing."""
    rows = []
    for name, m in measured.items():
        p = predicted.get(name)
        rows.append(
            {
                "run": name,
                f"your prediction ({unit})": "not written" if p is None else p,
                f"measured ({unit})": round(m, 2),
                "measured / predicted": f"{m / p:.2f}x" if p else "n/a",
            }
        )
    return pd.DataFrame(rows)


def gpu_results(
    notebook: str, runs: str | Path, names: list[str], key: str = "gpu_states_allocated_mib"
) -> tuple[dict[str, dict], str]:
    """results.json of the runs `names` in `runs` where every one finished and measured GPU memory (`key`), else of
    `notebook`'s GPU reference runs of the same names, those it has (a CPU's memory is the whole process's:
    00_setup); and which of the two it is ("your runs", "the GPU reference")."""
    files = [Path(runs) / n / "results.json" for n in names]
    mine = {n: json.loads(f.read_text()) for n, f in zip(names, files) if f.is_file()}
    if len(mine) == len(names) and all(r.get(key) is not None for r in mine.values()):
        return mine, "your runs"
    ref = reference(notebook)
    return {n: ref.loc[n].to_dict() for n in names if n in ref.index}, "the GPU reference"


def states_per_param(notebook: str, runs: str | Path, names: list[str]) -> tuple[dict[str, float], str]:
    """Model states on the GPU per parameter, bytes (`gpu_states_allocated_mib` x MiB / `num_params`), of the runs
    `names` as `gpu_results` picks them; and which runs they are."""
    rows, source = gpu_results(notebook, runs, names)
    return {n: r["gpu_states_allocated_mib"] * MiB / r["num_params"] for n, r in rows.items()}, source


def budget_setups() -> dict[str, dict]:
    """`fit.estimate`'s settings (zero_stage, offload) of each run of `COURSE_RUNS` that batches by a token
    budget (the default recipe's runs; not the classic recipe's, nor the quarter-budget one, which a full budget
    bounds), by run name. A run with activation checkpointing counts as without it: checkpointing only lowers
    the peak, and fit's estimate with it fell below the measured peak (workshop_lessons/reference/h100/course/runs/baseline_ac)."""
    setups = {}
    for runs in COURSE_RUNS.values():
        for name, (experiment, settings) in runs.items():
            recipe = recipe_settings(settings.get("recipe", "default"))
            if recipe["batching"] != "token_budget" or "max_tokens_per_micro_batch" in settings:
                continue
            setups[name] = EXPERIMENTS[experiment].fit_setup | {"logits_on": recipe["logits_on"]}
    return setups


def course_budget(free_mib: float):
    """`fit.Budget` of the micro-batch token budget every run of notebooks 01-03 gets on a GPU with `free_mib`
    MiB usable (`env.gpu_free_mib`): the default recipe's `max_tokens_per_micro_batch`, halved until
    `fit.estimate` of every run (`budget_setups`) fits (`fit.micro_batch_budget`). One budget for all: the
    notebooks share runs (02's baseline is 01's), and a comparison needs the same micro-batches on both sides.
    A pure function of `free_mib`."""
    r = recipe_settings("default")
    return micro_batch_budget(
        r["model"], budget_setups(), free_mib, most=r["max_tokens_per_micro_batch"], least=r["max_length"]
    )


def notebook_run_options(size_micro_batches: bool = False) -> dict:
    """The `run_experiment` options every notebook uses: {"tiny", "random_weights", "overwrite", "max_steps"},
    and with `size_micro_batches` (notebooks 01-03b, and 04 on a machine's own GPUs) "max_tokens_per_micro_batch"
    on a GPU.

    tiny: WORKSHOP_TINY=1 or 0 forces it; by default the tiny model runs exactly when no GPU is visible.
    random_weights: WORKSHOP_RANDOM_WEIGHTS=1 for the real architecture without a download.
    overwrite: re-running a notebook replaces its own runs under runs/<notebook>/.
    max_steps: `GPU_MAX_STEPS` optimizer steps per run (the reference runs' length), on a GPU and for
    the tiny model alike, so that the CPU runs the path a GPU learner runs and has as many steady steps;
    WORKSHOP_MAX_STEPS sets another number (0: None, the recipe's epochs).
    max_tokens_per_micro_batch: the budget `course_budget` sizes for this GPU's usable memory
    (`env.gpu_free_mib`, WORKSHOP_GPU_MEMORY_FRACTION included); absent for the tiny model (its recipe's). The
    choice and its reason are printed, one line.

    Raises:
        WorkshopError: with `size_micro_batches`, the GPU's free memory holds no run even at the smallest budget.
    """
    tiny = variables.get("WORKSHOP_TINY", "auto")
    tiny = (not torch.cuda.is_available()) if tiny == "auto" else tiny == "1"
    steps = variables.get("WORKSHOP_MAX_STEPS", GPU_MAX_STEPS) or None
    options = {
        "tiny": tiny,
        "random_weights": variables.get("WORKSHOP_RANDOM_WEIGHTS", False),
        "overwrite": True,
        "max_steps": steps,
    }
    if not size_micro_batches:
        return options
    if tiny or not torch.cuda.is_available():
        print(
            f"Micro-batches of up to {TINY['max_tokens_per_micro_batch']:,} tokens: the tiny model's (--tiny), "
            "no GPU to size them for." + (" The tiny model starts from random weights." if tiny else "")
        )
        return options
    budget, fraction = course_budget(env.gpu_free_mib()), env.gpu_memory_fraction()
    line = budget.line("every course run (the experiments of notebooks 01-03)")
    print(
        line
        + (f" (WORKSHOP_GPU_MEMORY_FRACTION={fraction}: PyTorch may use that share of the GPU)" if fraction else "")
    )
    if budget.tokens is None:
        raise WorkshopError(
            line,
            "free the GPU (`nvidia-smi` lists what holds it), use a GPU with more memory, or set "
            "WORKSHOP_TINY=1 for the tiny model.",
        )
    return options | {"max_tokens_per_micro_batch": budget.tokens}


def run_config(notebook: str, name: str, runs_dir: str | os.PathLike, **common):
    """The `RunConfig` of run `name` of `notebook`, writing to runs_dir/name, with the notebook's `common`
    options (`notebook_run_options()`; its max_tokens_per_micro_batch, the GPU's budget, goes to the
    runs that batch by tokens, a quarter of it to the quarter-budget run). No checkpoints: these runs measure (a Qwen3-0.6B checkpoint is
    8-10 GB); the fine-tuned model is still saved in runs_dir/name/model."""
    experiment, settings = COURSE_RUNS[notebook][name]
    if settings.get("max_tokens_per_micro_batch") == QUARTER:
        budget = (
            common.get("max_tokens_per_micro_batch")
            or recipe_settings("default", common.get("tiny", False))["max_tokens_per_micro_batch"]
        )
        settings = settings | {"max_tokens_per_micro_batch": budget // 4}
    if (
        recipe_settings(settings.get("recipe", "default"))["batching"] != "token_budget"
    ):  # the budget means nothing there
        common = {k: v for k, v in common.items() if k != "max_tokens_per_micro_batch"}
    return RunConfig(experiment, output_dir=str(Path(runs_dir) / name), **({"save_strategy": "no"} | common | settings))


WARM_UP_STEPS = 4  # optimizer steps of each warm-up run


class _Held(io.StringIO):
    """A warm-up's output, held back, except the lines a learner waiting on the cell must see at once, written to
    `shown` (the cell's own output): a DeepSpeed op being compiled, or a wait for another process's build
    (`env.build_ops`: minutes, not a hang)."""

    SHOWN = ("Compiling DeepSpeed's", "  compiled in ", "Waiting for ")

    def __init__(self, shown):
        super().__init__()
        self.shown, self.line = shown, ""

    def write(self, text: str) -> int:
        *done, self.line = (self.line + text).split("\n")
        for line in done:
            if line.startswith(self.SHOWN):
                self.shown.write(line + "\n")
                self.shown.flush()
        return super().write(text)


def warm_up(
    notebook: str, runs_dir: str | os.PathLike, steps: int | None = None, experiments: list[str] | None = None, **common
) -> float:
    """Without a GPU, short runs (`WARM_UP_STEPS` optimizer steps, `steps` if given) of each experiment of
    `notebook`'s runs (`COURSE_RUNS`; `experiments` instead, where given: 03c), made before those the notebook
    measures and thrown away (into runs_dir/warm-up, removed afterwards, their output shown only if one fails):
    on a CPU each run is faster than the one before, so without it the run order decided the ranking
    (scripts/cpu_run_order.py: workshop_lessons/reference/cpu/run_order.md). On a GPU nothing: a process's first
    run measures as its later ones (scripts/run_order.py: docs/h100/run-order). Prints one line; returns the
    seconds it took.

    Raises:
        WorkshopError: a warm-up run failed (its output is printed first).
    """
    if torch.cuda.is_available():
        print("No warm-up run on a GPU: a process's first run measures as its later ones (docs/h100/run-order).")
        return 0.0
    out, t0 = Path(runs_dir) / "warm-up", time.perf_counter()
    for e in dict.fromkeys(experiments or [e for e, _ in COURSE_RUNS[notebook].values()]):
        cfg = RunConfig(e, output_dir=str(out / e), **common | {"max_steps": steps or WARM_UP_STEPS})
        held = _Held(sys.stdout)
        try:
            with contextlib.redirect_stdout(held), contextlib.redirect_stderr(held):
                run_experiment(replace(cfg, save_strategy="no", save_model=False))
        except WorkshopError:
            print(held.getvalue())
            raise
    shutil.rmtree(out, ignore_errors=True)
    print(f"warm-up: {time.perf_counter() - t0:.0f} s, not measured")
    return time.perf_counter() - t0


def _load(root: Path) -> pd.DataFrame:
    if not root.is_dir() or not find_runs(root)[0]:
        return pd.DataFrame()
    df = load_results(root)
    df["run"] = [Path(d).name for d in df["run_dir"]]
    return df.set_index("run")


def reference(notebook: str | None = None, root: Path = REFERENCE_DIR) -> pd.DataFrame:
    """The reference runs (one row per run name, indexed by it; results.json columns) of `notebook`'s runs,
    or all of them; an empty frame where none are on file (a copy of the lessons without their reference/)."""
    df = _load(root / "runs")
    if df.empty or notebook is None:
        return df
    return df.loc[[n for n in COURSE_RUNS[notebook] if n in df.index]]


def _repeats(root: Path) -> dict[str, dict]:
    """name -> results.json of the runs measured again: root/repeat/NAME, and `REPEATS` for the committed reference."""
    earlier = {n: d for n, d in REPEATS.items() if (d / "results.json").is_file()} if root == REFERENCE_DIR else {}
    found = {
        n: {k: v for k, v in json.loads((d / "results.json").read_text()).items() if k in REPEATS_METRICS}
        for n, d in earlier.items()
    }
    return found | {
        d.name: json.loads((d / "results.json").read_text())
        for d in (root / "repeat").glob("*")
        if (d / "results.json").is_file()
    }


def band(metric: str, root: Path = REFERENCE_DIR) -> float | None:
    """The largest relative spread |a - b| / mean(a, b) of `metric` over the reference runs measured again
    (`_repeats`), a fraction; None where no run was repeated or the metric is missing in the repeats."""
    first, spreads = _load(root / "runs"), []
    for name, again in _repeats(root).items():
        a = first.at[name, metric] if name in first.index and metric in first else None
        b = again.get(metric)
        if a is not None and b is not None and pd.notna(a) and pd.notna(b) and (a + b):
            spreads.append(abs(a - b) / ((a + b) / 2))
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
    return (
        f"Reference: {r['device']}, {r['model']} ({'random weights' if r['random_weights'] else 'pretrained'}), "
        + (f"micro-batches of up to {budget:,} tokens, " if budget else "")
        + f"{int(r['global_steps'])} optimizer steps, steady state = each run's tokens over its time after the "
        f"warm-up its log shows; runs in {where}/runs. ± band: the largest spread between two measurements of the "
        f"same run ({', '.join(repeated) or 'none repeated'}; the second from another call), as a percentage; "
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


def run_own_key(
    notebook: str, run: str, override: str | None, runs_dir: str | os.PathLike, **common
) -> list[str] | None:
    """The exercise "a key of your own" (02, 03): run `run` of `notebook` again with the learner's `--ds-config`
    `override` ("KEY=VALUE") into runs_dir/<run>_mine, replacing only that run's earlier attempt. Returns the two
    run names, for `table(..., runs=)`; None, after saying what to write, while `override` is None.

    Raises:
        WorkshopError: an override DeepSpeed refuses (`ds_config.check_overrides`: the nearest valid key named).
    """
    if override is None:
        print(
            "Write your KEY=VALUE in MY_OVERRIDE and your prediction in MY_PREDICTION above, then run this cell again."
        )
        return None
    mine = f"{run}_mine"
    run_experiment(
        replace(
            run_config(notebook, run, runs_dir, **common),
            output_dir=str(Path(runs_dir) / mine),
            ds_config=[override],
            overwrite=True,
        )
    )
    return [run, mine]


WORDS_PER_MINUTE = 200  # reading speed of technical prose, a common rule of thumb


def markdown_cells(path: Path) -> list[tuple[str, list[str]]]:
    """The markdown cells of a py:percent notebook: (its `# %% [markdown]` line, its lines without the leading '# ')."""
    out, lines = [], None
    for line in path.read_text().splitlines():
        if line.startswith("# %%"):
            lines = [] if "[markdown]" in line else None
            if lines is not None:
                out.append((line, lines))
        elif lines is not None:
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    return out


def prose_paragraphs(path: Path) -> list[list[str]]:
    """The words of each paragraph (ending at a blank line) of the markdown a learner reads: the notebook's markdown
    cells but those tagged "solution". What the headers' and the README timetable's reading times count."""
    paras = []
    for head, lines in markdown_cells(path):
        if '"solution"' in head:
            continue
        words: list[str] = []
        for line in [*lines, ""]:
            if line.strip():
                words += line.split()
            elif words:
                paras.append(words)
                words = []
    return paras


def reading_minutes(words: int) -> int:
    """Minutes to read `words` of prose at `WORDS_PER_MINUTE`, rounded up."""
    return math.ceil(words / WORDS_PER_MINUTE)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def header(notebook: str) -> str:
    """The line at the top of every notebook: reading time (its prose, `prose_paragraphs`, at
    `WORDS_PER_MINUTE`) and run time on each machine it was timed on (workshop_lessons/reference/notebook_times.json, written by
    scripts/time_notebooks.py), with the DeepSpeed ops it compiled there (once per machine), as Markdown."""
    # the notebook beside the kernel (course/ or solutions/, its working folder), else the checkout's solution
    src = next(
        (
            p
            for p in (Path.cwd() / f"{notebook}.py", REFERENCE.parents[1] / "solutions" / f"{notebook}.py")
            if p.is_file()
        ),
        None,
    )
    words = sum(map(len, prose_paragraphs(src))) if src else 0
    parts = [f"**Reading:** about {reading_minutes(words)} min ({words:,} words of prose)."]
    times = REFERENCE / "notebook_times.json"
    runs = json.loads(times.read_text()) if times.exists() else {}
    timed = [
        f"{_duration(t['seconds'])} on {device} ({t['model']}, {t['date']}"
        + (f"; it compiled DeepSpeed's {', '.join(t['ops_built'])}, once per machine" if t.get("ops_built") else "")
        + ")"
        for device, nbs in sorted(runs.items())
        if (t := nbs.get(notebook)) and t["returncode"] == 0
    ]
    parts.append(
        "**Running:** "
        + ("; ".join(timed) if timed else "not timed yet")
        + " (`python scripts/time_notebooks.py` times it on yours)."
    )
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """`python -m workshop_lessons OUT_DIR [--repeat] [--notebook NB]...`: every run of `COURSE_RUNS` as the
    notebooks run it on this GPU (random weights, GPU_MAX_STEPS steps, the micro-batch budget `course_budget`
    sizes for it) into OUT_DIR/runs (OUT_DIR/repeat with --repeat). Each notebook's runs are made as its kernel
    makes them: in a process of their own, after `warm_up`; --notebook NB makes only NB's, in this process. A
    finished run is skipped, so an interrupted call resumes. Returns 1 if any run failed, else 0."""
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) / ("repeat" if "--repeat" in argv else "runs")
    only = [argv[i + 1] for i, a in enumerate(argv) if a == "--notebook"]
    if not only:
        codes = [
            subprocess.run([sys.executable, "-m", "workshop_lessons", *argv, "--notebook", nb]).returncode
            for nb in COURSE_RUNS
        ]
        return max(codes)
    common = notebook_run_options(size_micro_batches=True) | {"random_weights": True}
    failed = []
    for notebook in only:
        todo = [name for name in COURSE_RUNS[notebook] if state(out / name)[0] != "finished"]
        if todo:
            warm_up(notebook, out, **common)
        for name in todo:
            try:
                run_experiment(run_config(notebook, name, out, **common))
            except WorkshopError as e:  # an out-of-memory run is a result too; the others still run
                print(f"{name} failed: {e}", file=sys.stderr)
                failed.append(name)
    return 1 if failed else 0
