"""Notebook 03e's runs and its decision table (`03e_zero3_or_fsdp2`): ZeRO-3 (DeepSpeed's engine) against FSDP2
(PyTorch's `fully_shard` through the HF Trainer, experiment fsdp2), with and without torch.compile, on one GPU and
on two: memory per GPU by phase, steady tokens/s, and the collectives each makes per optimizer step (comms.json of
the two-rank runs). A figure comes from the learner's runs where they measure it (memory and speed on a GPU; the
collectives on any device), else from the reference runs (`REFERENCE_RUNS`, made on 2 GPUs by
`python scripts/zero3_or_fsdp2_reference.py OUT`), each comparison with the band measured there."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workshop_lib import launch
from workshop_lib.rundir import state

from .comparisons import Comparison, compare
from .multi_gpu import BYTES_PER_ELEMENT, COMM_TOLERANCE, comm_measured, read_comms, run_options
from .references import band, median_runs
from .registry import REFERENCE

REFERENCE_RUNS = REFERENCE / "h200" / "zero3_or_fsdp2"  # runs/NAME, and repeat/NAME: the same again (the band)
# run name -> (experiment, ranks, `workshop run` options beyond `multi_gpu.run_options`). ZeRO-3 compiles only with
# --torch-compile-zero3 (preflight.check_machine); FSDP2 takes the recipe's torch_compile, on by default.
RUNS = {
    "stage3-1": ("stage3", 1, []),
    "fsdp2-1": ("fsdp2", 1, ["--torch-compile", "false"]),
    "stage3_compiled-1": ("stage3", 1, ["--torch-compile-zero3", "true"]),
    "fsdp2_compiled-1": ("fsdp2", 1, ["--torch-compile", "true"]),
    "stage3-2": ("stage3", 2, []),
    "fsdp2-2": ("fsdp2", 2, ["--torch-compile", "false"]),
}
# On GPUs the collectives are counted in short runs of their own (the comms logger synchronises after each one),
# COMMS_DIR/EXPERIMENT; on a CPU the two-rank runs count them
COMMS_DIR = "comms"
COMMS_ARGS = ["--max-steps", "2", "--comms-logger", "--max-tokens-per-micro-batch", "4096", "--torch-compile", "false"]
# The memory by phase (results.json, rank 0's): before the run, model states after step 1, peaks over the steps
PHASES = [
    "gpu_allocated_at_start_mib",
    "gpu_states_allocated_mib",
    "gpu_peak_allocated_mib",
    "gpu_peak_reserved_mib",
    "gpu_peak_mib",
    "host_states_rss_mib",
    "host_peak_rss_mib",
]
SPEED = ["steady_train_tokens_per_second", "steady_step_time_s", "mfu", "train_loss"]
# torch's c10d op names (FSDP2's comms.json) -> DeepSpeed's comms-logger names (`multi_gpu.VOLUME_PER_BYTE`)
TORCH_OPS = {
    "_allgather_base_": "all_gather_into_tensor",
    "_reduce_scatter_base_": "reduce_scatter_tensor",
    "allgather_": "all_gather",
    "allreduce_": "all_reduce",
    "broadcast_": "broadcast",
}


def runs_here(gpus: int) -> list[str]:
    """The runs of `RUNS` this machine makes: every one with 2+ GPUs, the one-rank ones with one GPU; on a CPU the
    two-rank ones only, 2 gloo ranks of the tiny model uncompiled (they count the collectives; a CPU's memory and
    speed leave the other questions to the reference)."""
    if not gpus:
        return [n for n in RUNS if RUNS[n][1] == 2]
    return [n for n, (_, ranks, _) in RUNS.items() if ranks <= gpus]


def make_runs(out: Path, gpus: int, common: dict, skip_finished: bool = False, count: bool = True) -> list[str]:
    """Makes `runs_here(gpus)` into out/NAME, each in fresh `torchrun` processes (`launch.run_local`) with the
    options of notebook 04 (`multi_gpu.run_options`; `common`: `lessons.notebook_run_options()`); on a CPU the
    two-rank runs with the comms logger, on 2+ GPUs short runs of their own into out/COMMS_DIR/EXPERIMENT unless
    `count` is False (a repeat: the counts do not vary). Returns the runs made. Raises WorkshopError: a run failed
    (`launch.run_local`)."""
    args, env = run_options(gpus > 0, common, gpus > 0), {} if gpus else {"CUDA_VISIBLE_DEVICES": ""}
    todo = [
        (n, *RUNS[n][:2], [*RUNS[n][2], *([] if gpus or RUNS[n][1] < 2 else ["--comms-logger"])])
        for n in runs_here(gpus)
    ]
    todo += [(f"{COMMS_DIR}/{e}", e, 2, COMMS_ARGS) for e in ("stage3", "fsdp2")] if count and gpus >= 2 else []
    made = []
    for name, experiment, ranks, extra in todo:
        if not (skip_finished and state(out / name)[0] == "finished"):
            launch.run_local(experiment, ranks, out / name, *args, *extra, "--overwrite", env=env)
            made.append(name)
    return made


def collectives(root: Path, experiment: str) -> tuple[dict, dict] | None:
    """(comms.json with torch's op names turned into DeepSpeed's, `TORCH_OPS`; its run's results.json) of
    `experiment`'s collectives under `root`: root/COMMS_DIR/EXPERIMENT, else its two-rank run; None where neither
    has a comms.json."""
    for d in (root / COMMS_DIR / experiment, root / f"{experiment}-2"):
        if (c := read_comms(d)) is not None:
            ops = {TORCH_OPS.get(op, op): v for op, v in c["ops"].items()}
            return c | {"ops": ops}, json.loads((d / "results.json").read_text())
    return None


def collective_table(root: Path) -> pd.DataFrame:
    """Per collective, per optimizer step on rank 0, ZeRO-3's and FSDP2's calls and volume (Ψ-sized transfers,
    `multi_gpu.comm_measured`) from `collectives(root, ...)`; "total" last. Empty where neither has a record."""
    parts = []
    for e, name in (("stage3", "ZeRO-3"), ("fsdp2", "FSDP2")):
        if found := collectives(root, e):
            c, r = found
            m = comm_measured(c, int(r["num_params"]), BYTES_PER_ELEMENT[r["precision"]]).set_index("collective")
            parts.append(m[["calls per step", "volume (Ψ)"]].add_prefix(f"{name} "))
    t = pd.concat(parts, axis=1).fillna(0) if parts else pd.DataFrame()
    return t.sort_index(key=lambda i: i == "total", kind="stable").reset_index() if parts else t  # "total" last


def results_of(root: Path) -> dict[str, dict]:
    """results.json of each run of `RUNS` finished under `root`, by run name."""
    return {
        n: json.loads((root / n / "results.json").read_text()) for n in RUNS if (root / n / "results.json").is_file()
    }


# The decision table's rows: (question, results.json metric, ZeRO-3's run, FSDP2's run, higher is better)
QUESTIONS = [
    ("model states per GPU after step 1, 1 GPU", "gpu_states_allocated_mib", "stage3-1", "fsdp2-1", False),
    ("peak memory per GPU, 1 GPU", "gpu_peak_allocated_mib", "stage3-1", "fsdp2-1", False),
    ("peak memory per GPU, 2 GPUs", "gpu_peak_allocated_mib", "stage3-2", "fsdp2-2", False),
    ("steady tokens/s, 1 GPU", "steady_train_tokens_per_second", "stage3-1", "fsdp2-1", True),
    (
        "steady tokens/s, 1 GPU, compiled",
        "steady_train_tokens_per_second",
        "stage3_compiled-1",
        "fsdp2_compiled-1",
        True,
    ),
    ("steady tokens/s, 2 GPUs", "steady_train_tokens_per_second", "stage3-2", "fsdp2-2", True),
]


@dataclass(frozen=True)
class Row:
    """One question of the decision table: FSDP2's figure against ZeRO-3's (`comparison`: value FSDP2's, other
    ZeRO-3's, with the band), where it was measured (`source`: "your runs", "the reference" or "not measured", then
    `comparison` is None), and which is better: "FSDP2", "ZeRO-3", or "within the noise"."""

    question: str
    source: str
    comparison: Comparison | None
    higher_is_better: bool

    @property
    def better(self) -> str:
        c = self.comparison
        if c is None:
            return "not measured"
        if c.verdict in ("within the band", "equal"):
            return "within the noise"
        return "FSDP2" if (c.verdict == "higher") == self.higher_is_better else "ZeRO-3"


def decision(mine: Path, ref: Path = REFERENCE_RUNS) -> list[Row]:
    """The decision table's rows (`QUESTIONS`, then the collectives' volume per step), each from the runs under
    `mine` where both ran on a GPU (a CPU's memory is the whole process's and its speed not a GPU's), else from
    the reference's (of each run's rounds, the median one: `median_runs`); the collectives from `mine` on any
    device. Bands: `band(metric, ref, (the two runs))`, the wider of the two runs' own spreads; the collectives'
    `multi_gpu.COMM_TOLERANCE`."""
    ref_runs = median_runs(ref)  # of each run's rounds, the median one
    ref_runs = {} if ref_runs is None else {n: r.dropna().to_dict() for n, r in ref_runs.iterrows() if n in RUNS}
    sources = [("your runs", results_of(mine)), ("the reference", ref_runs)]
    rows = []
    for question, metric, z3, f2, higher in QUESTIONS:
        found = next(
            (
                (s, r)
                for s, r in sources
                if all(r.get(n, {}).get(m) is not None for n in (z3, f2) for m in (metric, "gpu_peak_mib"))
            ),
            None,
        )
        c = found and compare(metric, found[1][f2][metric], found[1][z3][metric], noise=band(metric, ref, (z3, f2)))
        rows.append(Row(question, found[0] if found else "not measured", c or None, higher))
    volume = {s: collective_table(root) for s, root in (("your runs", mine), ("the reference", ref / "runs"))}
    s = next((s for s, t in volume.items() if {"ZeRO-3 volume (Ψ)", "FSDP2 volume (Ψ)"} <= set(t)), None)
    total = s and volume[s].set_index("collective").loc["total"]
    c = s and compare("volume per step", total["FSDP2 volume (Ψ)"], total["ZeRO-3 volume (Ψ)"], "Ψ", COMM_TOLERANCE)
    return [*rows, Row("collectives' volume per optimizer step, 2 ranks", s or "not measured", c or None, False)]


def decision_table(rows: list[Row]) -> pd.DataFrame:
    """`decision`'s rows as the notebook shows them: each figure, FSDP2 / ZeRO-3, the band, the better one, the source."""
    return pd.DataFrame(
        [
            {
                "question": r.question,
                "ZeRO-3": r.comparison.figure(r.comparison.other) if r.comparison else "n/a",
                "FSDP2": r.comparison.figure(r.comparison.value) if r.comparison else "n/a",
                "FSDP2 / ZeRO-3": f"{r.comparison.ratio:.2f}x" if r.comparison else "n/a",
                "band": r.comparison.band_text if r.comparison else "n/a",
                "better": r.better,
                "from": r.source,
            }
            for r in rows
        ]
    )
