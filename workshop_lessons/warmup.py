"""The warm-up: on a CPU, the short runs made and thrown away before those a notebook measures (none on a GPU)."""

import contextlib
import io
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from workshop_lib.config import RunConfig
from workshop_lib.errors import WorkshopError
from workshop_lib.train import run_experiment

from .registry import COURSE_RUNS

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
    """Without a GPU, short runs (`WARM_UP_STEPS` optimizer steps, `steps` if given) of each experiment of `notebook`'s
    runs (`COURSE_RUNS`; `experiments` instead, where given: 03c), made before those the notebook measures and thrown
    away (into runs_dir/warm-up, removed afterwards, their output, progress tables included, shown only if one fails):
    on a CPU each run is faster than the one before, so without it the run order decided the ranking
    (scripts/cpu_run_order.py: workshop_lessons/reference/cpu/run_order.md). On a GPU nothing: a process's first run
    measures as its later ones (scripts/run_order.py: docs/h100/run-order). Prints one line; returns the seconds it
    took.

    Raises:
        WorkshopError: a warm-up run failed (its output is printed first).
    """
    if torch.cuda.is_available():
        print("No warm-up run on a GPU: a process's first run measures as its later ones (docs/h100/run-order).")
        return 0.0
    from IPython.utils.capture import capture_output  # the notebooks' own dependency; a kernel's displays

    out, t0 = Path(runs_dir) / "warm-up", time.perf_counter()
    for e in dict.fromkeys(experiments or [e for e, _ in COURSE_RUNS[notebook].values()]):
        cfg = RunConfig(e, output_dir=str(out / e), **common | {"max_steps": steps or WARM_UP_STEPS})
        held = _Held(sys.stdout)
        try:
            # in a kernel the Trainer's progress table and datasets' bars are displays, not text: held back too
            with contextlib.redirect_stdout(held), contextlib.redirect_stderr(held), capture_output(False, False):
                run_experiment(replace(cfg, save_strategy="no", save_model=False))
        except WorkshopError:
            print(held.getvalue())
            raise
    shutil.rmtree(out, ignore_errors=True)
    print(f"warm-up: {time.perf_counter() - t0:.0f} s, not measured")
    return time.perf_counter() - t0
