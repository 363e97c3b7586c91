"""How a notebook makes its runs: the options every notebook uses (`notebook_run_options`), the micro-batch budget
sized for this GPU (`course_budget`), the `RunConfig` of one run of `COURSE_RUNS` (`run_config`), and the exercise
"a key of your own" (`run_own_key`)."""

import os
from dataclasses import replace
from pathlib import Path

import torch

from workshop_lib import env, variables
from workshop_lib.config import TINY, RunConfig, recipe_settings
from workshop_lib.ds_config import EXPERIMENTS
from workshop_lib.errors import WorkshopError
from workshop_lib.fit import micro_batch_budget
from workshop_lib.train import run_experiment

from .registry import COURSE_RUNS, GPU_MAX_STEPS, QUARTER


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
