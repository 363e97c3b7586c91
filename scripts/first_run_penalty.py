"""A process's first run against the same runs later in it, on a GPU: one process runs notebook 02's stage2,
baseline, stage1, stage3, baseline_no_compile, stage2 and stage3 (16 optimizer steps each, micro-batches of
16,384 tokens, random weights), and prints each run's steady tokens/s, steady step time and wall seconds, with
torch.compile's counters (graphs captured so far). With RESET=1, torch._dynamo.reset() before each run.
Behind docs/h100/first-run:

    python scripts/first_run_penalty.py > first_run.log; RESET=1 python scripts/first_run_penalty.py > reset.log
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    import torch
    from torch._dynamo.utils import counters

    from workshop_lib import lessons
    from workshop_lib.train import run_experiment

    reset = os.environ.get("RESET") == "1"
    common = {"random_weights": True, "overwrite": True, "max_steps": 16, "max_tokens_per_micro_batch": 16384,
              "save_model": False}
    for i, name in enumerate(["stage2", "baseline", "stage1", "stage3", "baseline_no_compile", "stage2", "stage3"]):
        if reset:
            torch._dynamo.reset()
        t = time.time()
        r = run_experiment(lessons.run_config("02_zero_stages", name, f"/tmp/first_run{int(reset)}/{i}", **common))
        print("DIAG", i, name, round(r["steady_train_tokens_per_second"]), round(r["steady_step_time_s"], 4),
              round(time.time() - t), dict(counters["stats"]), flush=True)


if __name__ == "__main__":
    main()
