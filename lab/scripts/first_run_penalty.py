"""A process's first run against the same runs later in it, on a GPU: one process runs notebook 02's stage2,
baseline, stage1, stage3, baseline_no_compile, stage2 and stage3 (16 optimizer steps each, micro-batches of
16,384 tokens, random weights), and prints each run's steady tokens/s, steady step time and wall seconds, with
torch.compile's counters (graphs captured so far). With RESET=1, torch._dynamo.reset() before each run.
RUNS=a,b,c replaces the list of runs; STEPS=N their length; WARM_UP=N first makes `lessons.warm_up`'s run of
N steps (its output thrown away), as the notebooks do. OUT=DIR keeps each run's train_log.csv there.
Behind lab/findings/h100/first-run (before 2026-11-27: `lessons.warm_up` now makes no run on a GPU, so WARM_UP
changes nothing; lab/findings/h100/new-shapes found the first-run cause):

    python lab/scripts/first_run_penalty.py > first_run.log; RESET=1 python lab/scripts/first_run_penalty.py > reset.log
    WARM_UP=4 RUNS=stage2,baseline,stage2 STEPS=24 python lab/scripts/first_run_penalty.py > warm_up4.log
"""

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    import torch
    from torch._dynamo.utils import counters

    import workshop_lessons as lessons
    from workshop_lib.train import run_experiment

    reset = os.environ.get("RESET") == "1"
    runs = os.environ.get("RUNS", "stage2,baseline,stage1,stage3,baseline_no_compile,stage2,stage3").split(",")
    warm, out = int(os.environ.get("WARM_UP", 0)), os.environ.get("OUT")
    common = {
        "random_weights": True,
        "overwrite": True,
        "max_steps": int(os.environ.get("STEPS", 16)),
        "max_tokens_per_micro_batch": 16384,
        "save_model": False,
    }
    root = Path(f"/tmp/first_run{int(reset)}_{warm}")
    if warm:
        t = time.time()
        lessons.warm_up("02_zero_stages", root, steps=warm, **common)
        print("DIAG warm-up", warm, "steps", round(time.time() - t), "s", dict(counters["stats"]), flush=True)
    for i, name in enumerate(runs):
        if reset:
            torch._dynamo.reset()
        t = time.time()
        r = run_experiment(lessons.run_config("02_zero_stages", name, root / str(i), **common))
        print(
            "DIAG",
            i,
            name,
            round(r["steady_train_tokens_per_second"]),
            round(r["steady_step_time_s"], 4),
            round(time.time() - t),
            dict(counters["stats"]),
            flush=True,
        )
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            shutil.copy(root / str(i) / name / "train_log.csv", Path(out) / f"{i}_{name}.csv")


if __name__ == "__main__":
    main()
