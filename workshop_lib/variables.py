"""The `WORKSHOP_*` environment variables, in one table: each one's type, default, reader and meaning.

The library reads them only through `get`, which parses a value to its type and refuses a bad one with the fix; the
batch scripts, set-up and CI read theirs in bash, and are listed here too. The README's table of them is
written from `VARIABLES` into docs/guide.md by scripts/make_figures.py (checked by its --check), and tests/test_layers.py checks that every `WORKSHOP_*` name the
repository uses is in `VARIABLES` and that no other module reads one itself."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import WorkshopError


@dataclass(frozen=True)
class Variable:
    name: str
    kind: type  # str, int, float, or bool ("1" is true, "0" false)
    default: str  # as a person reads it
    read_by: str
    meaning: str
    choices: tuple[str, ...] = ()  # the values a str variable takes, where they are few


VARIABLES = {
    v.name: v
    for v in [
        # what learners and cluster users set
        Variable(
            "WORKSHOP_TINY",
            str,
            "auto",
            "notebooks (`lessons.notebook_run_options`), slurm/common.sh",
            "1: the tiny model on the CPU; 0: the recipe's model; auto: tiny exactly when no GPU is visible",
            choices=("auto", "1", "0"),
        ),
        Variable(
            "WORKSHOP_RANDOM_WEIGHTS",
            bool,
            "0",
            "notebooks",
            "1: the published architectures with random weights (no download; memory and speed only)",
        ),
        Variable(
            "WORKSHOP_MAX_STEPS",
            int,
            "24 (`lessons.GPU_MAX_STEPS`)",
            "notebooks",
            "optimizer steps per notebook run; 0: the recipe's epochs",
        ),
        Variable(
            "WORKSHOP_GPU_MEMORY_FRACTION",
            float,
            "unset (the whole GPU)",
            "`env.gpu_memory_fraction`",
            "a share in (0, 1] of the GPU's memory PyTorch may use: a smaller GPU on a larger one",
        ),
        Variable(
            "WORKSHOP_NOTEBOOK_SLURM",
            bool,
            "unset",
            "notebook 04",
            "1 (on a login node): submit 04's GPU runs as SLURM jobs; 0: never use SLURM",
        ),
        Variable(
            "WORKSHOP_CACHE",
            str,
            "~/.cache/workshop_lib",
            "`model`",
            "where the tiny model's tokenizer (trained on the bundled SQuAD text) is kept",
        ),
        Variable(
            "WORKSHOP_DIST_TIMEOUT_S",
            int,
            "1800 (300 in the batch scripts)",
            "`env`, `train`, slurm/common.sh",
            "seconds before a collective or the rendezvous times out: a dead rank fails the job",
        ),
        Variable(
            "WORKSHOP_OP_LOCK_TIMEOUT_S",
            float,
            "600",
            "`env.build_ops`",
            "seconds to wait for another process's build of a DeepSpeed op",
        ),
        # the batch scripts
        Variable(
            "WORKSHOP_ENV",
            str,
            "the active environment, else ./.venv",
            "slurm/common.sh",
            "the venv or conda environment a batch job activates",
        ),
        Variable(
            "WORKSHOP_MODULES", str, "none", "slurm/common.sh", 'environment modules to load, e.g. "gcc/12 cuda/12.4"'
        ),
        Variable(
            "WORKSHOP_LAUNCHER",
            str,
            "torchrun",
            "slurm/common.sh",
            "how a job starts its ranks",
            choices=("torchrun", "srun", "deepspeed"),
        ),
        Variable(
            "WORKSHOP_DIR",
            str,
            "the current folder or the first above it with slurm/",
            "`launch`",
            "the working folder batch jobs are submitted from (its slurm/, runs/, logs/)",
        ),
        Variable(
            "WORKSHOP_OUTPUT_DIR", str, "runs/<run name>-<job id>", "slurm/common.sh", "a batch job's run directory"
        ),
        Variable("WORKSHOP_RUN_NAME", str, "the job's name", "slurm/common.sh", "the run directory's and log's name"),
        Variable("WORKSHOP_MASTER_ADDR", str, "the job's first node", "slurm/common.sh", "the rendezvous host"),
        Variable("WORKSHOP_CPU_PROCS_PER_NODE", int, "1", "slurm/common.sh", "ranks per node on CPU nodes"),
        Variable(
            "WORKSHOP_MIG", bool, "0", "slurm/common.sh", "1: a rank per MIG instance of the node's GPUs, not per GPU"
        ),
        Variable("WORKSHOP_CONTAINER", str, "unset", "slurm/common.sh", "an image every rank runs inside"),
        Variable(
            "WORKSHOP_CONTAINER_RUNTIME",
            str,
            "pyxis",
            "slurm/common.sh",
            "what runs that image",
            choices=("pyxis", "apptainer", "podman"),
        ),
        Variable("WORKSHOP_PODMAN_RUNTIME", str, "runc", "container/podman_run.sh", "podman's OCI runtime"),
        # set-up, tests and CI
        Variable(
            "WORKSHOP_SETUP",
            str,
            "full",
            "scripts/setup.sh",
            "run: what `workshop run` needs; full: the notebooks and tests too",
            choices=("full", "run"),
        ),
        Variable(
            "WORKSHOP_TORCH_INDEX",
            str,
            "https://download.pytorch.org/whl/cpu",
            "scripts/setup.sh",
            "the index torch's CPU build comes from where no GPU is seen; empty: pip's configured index",
        ),
        Variable(
            "WORKSHOP_SETUP_TIMES",
            str,
            "unset",
            "scripts/setup.sh",
            "a file to write each part's seconds into (the measured fresh set-up: workshop_lessons/reference/setup_times.json)",
        ),
        Variable("WORKSHOP_TEST_WORKERS", int, "2", "scripts/test.sh", "pytest workers"),
        Variable(
            "WORKSHOP_REQUIRE_SLURM",
            bool,
            "unset (1 in CI)",
            "tests/test_slurm.py",
            "1: fail, rather than skip, the SLURM tests when no cluster answers",
        ),
        Variable(
            "WORKSHOP_WRITE_FINGERPRINT",
            bool,
            "unset",
            "tests/test_run_fingerprint.py",
            "1: write the tiny runs' fingerprint instead of comparing with it",
        ),
    ]
}


def get(name: str, default=None):
    """The value of environment variable `name` (a key of `VARIABLES`) parsed to its kind (str, int, float;
    bool: "1" true, "0" false), or `default` where it is unset or empty.

    Raises:
        WorkshopError: `name` is not in `VARIABLES` (a typo in the caller), or the value does not parse, is
            not one of the variable's choices, or is a number below 0 or not finite (every count, fraction and
            timeout here); the message names the variable and its meaning.
    """
    if name not in VARIABLES:
        raise WorkshopError(
            f"{name} is not one of the workshop's environment variables.",
            f"use one of: {', '.join(VARIABLES)} (workshop_lib/variables.py).",
        )
    v, raw = VARIABLES[name], os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = {bool: lambda r: {"1": True, "0": False}[r], int: int, float: float, str: str}[v.kind](raw)
    except (KeyError, ValueError):
        value = None
    if value is None or (v.choices and raw not in v.choices) or (v.kind in (int, float) and not 0 <= value < 1e308):
        expected = (
            " or ".join(v.choices)
            if v.choices
            else "1 or 0"
            if v.kind is bool
            else "a whole number, 0 or more"
            if v.kind is int
            else "a finite number, 0 or more"
        )
        raise WorkshopError(
            f"{name}={raw!r} is not {expected} ({v.meaning}).", f"set {name} to {expected}, or unset it."
        )
    return value
