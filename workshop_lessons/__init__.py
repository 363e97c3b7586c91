"""What the notebooks share, one module per concern, and per notebook a module of its figures and verdicts (`setup`,
`baseline`, `zero_stages`, `offload`, `fine_tuned`, `large_models`, `drills`, `multi_gpu`) as typed records; the
sentences that answer an exercise are written in the solution notebook, from those records.

- `registry`: `COURSE_RUNS`, per notebook, run name -> (experiment, settings), and `COLUMNS`, its exercise table's;
  `BATCH_SCRIPTS`, the package's copy of slurm/common.sh, which 02 and 04 show.
- `runs`: how a notebook makes those runs (`notebook_run_options`, `course_budget`, `run_config`, `run_own_key`).
- `warmup`: `warm_up(notebook, runs_dir)`, on a CPU the short runs made and thrown away before those a notebook
  measures (none on a GPU).
- `references`: the GPU reference runs (`reference`, `median_runs`), their tolerance bands (`band`, `cpu_band`) and
  the learner's exercise table with both beside each figure (`table`).
- `comparisons`: `Comparison` and `compare(...)`, one figure against another and the verdict, "higher", "lower" or
  "within the band".
- `headers`: the reading and run times at the top of every notebook (`header`).

The GPU reference runs these read are made by `python scripts/make_references.py` (maintainers only).

`from workshop_lessons import X` gives each module's public names, imported on first use (PEP 562): importing the
package alone, as Jupyter does for `workshop_lessons.jupyter`, imports no torch, transformers or DeepSpeed.
"""

import importlib

# name -> the module of this package that defines it
_HOMES = {
    **dict.fromkeys(
        ["REFERENCE", "REFERENCE_DIR", "BATCH_SCRIPTS", "COURSE_RUNS", "QUARTER", "GPU_MAX_STEPS", "COLUMNS"],
        "registry",
    ),
    **dict.fromkeys(["budget_setups", "course_budget", "notebook_run_options", "run_config", "run_own_key"], "runs"),
    **dict.fromkeys(["WARM_UP_STEPS", "warm_up"], "warmup"),
    **dict.fromkeys(
        # _repeats: lab/tests and tests/test_docs read the repeated runs as `band` groups them
        [
            "CPU_RUN_ORDER",
            "reference",
            "median_runs",
            "band",
            "cpu_band",
            "reference_note",
            "show_own_key_references",
            "table",
            "_repeats",
        ],
        "references",
    ),
    **dict.fromkeys(
        ["Verdict", "Comparison", "compare", "beside_prediction", "gpu_results", "states_per_param"], "comparisons"
    ),
    **dict.fromkeys(["WORDS_PER_MINUTE", "markdown_cells", "prose_paragraphs", "reading_minutes", "header"], "headers"),
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
