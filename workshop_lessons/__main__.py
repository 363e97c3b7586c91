"""`python -m workshop_lessons OUT_DIR [--repeat] [--notebook NB]...`: the GPU reference runs of the course (`main`)."""

import subprocess
import sys
from pathlib import Path

from workshop_lib.errors import WorkshopError
from workshop_lib.rundir import state
from workshop_lib.train import run_experiment

from .registry import COURSE_RUNS
from .runs import notebook_run_options, run_config
from .warmup import warm_up


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


raise SystemExit(main())
