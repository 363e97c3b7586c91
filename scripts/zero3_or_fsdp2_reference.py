"""Notebook 03e's reference on a machine with 2 GPUs: its runs (`fsdp.RUNS`: ZeRO-3 and FSDP2 on 1 and 2 GPUs, each
also compiled on one GPU, and the two short runs that count the collectives) made as the notebook makes them
(`fsdp.make_runs`: fresh `torchrun` processes, the course's length, micro-batches sized for this GPU), one at a time
(docs/measurement.md), into OUT/runs, then all but the counting runs again into OUT/repeat (their spread is the band,
`lessons.band(metric, OUT)`). A finished run is
skipped, so a call cut short resumes. Then copy OUT (its runs/ and repeat/) to the notebook's `fsdp.REFERENCE_RUNS`
(workshop_lessons/reference/h200/zero3_or_fsdp2) and write a README.md there naming the machine and the call.

    WORKSHOP_RANDOM_WEIGHTS=1 python scripts/zero3_or_fsdp2_reference.py OUT [runs | repeat]   # default: both
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import workshop_lessons as lessons  # noqa: E402
from workshop_lessons import fsdp  # noqa: E402

if __name__ == "__main__":
    out, folders = Path(sys.argv[1]), sys.argv[2:] or ["runs", "repeat"]
    gpus = torch.cuda.device_count()
    if gpus < 2:
        raise SystemExit(f"The reference needs 2 GPUs (this machine has {gpus}): run it on a machine of 2 or more.")
    for folder in folders:
        common = lessons.notebook_run_options()
        made = fsdp.make_runs(out / folder, gpus, common, skip_finished=True, count=folder == "runs")
        print(f"{out / folder}: made {', '.join(made) or 'nothing (all finished)'}", flush=True)
