"""Notebook 04's reference on a machine with 2 GPUs: its scaling runs (ZeRO-2 and ZeRO-3 on 1 and 2 GPUs) made as
the notebook makes them (`multi_gpu.run_options`: the course's length, micro-batches sized for this GPU, fresh
`torchrun` processes) into OUT/runs, then all again into OUT/repeat (their spread is the band, `lessons.band`),
then exercise 7's A/B into OUT/ab (`multi_gpu.bucket_ab` reads it): ZeRO-2 on 2 GPUs with
`--reduce-bucket-size 50000000` (10x smaller buckets) and with the recipe's, one pair into OUT/ab/runs, then
one into OUT/ab/repeat (their spread is its band). A finished run is skipped: copy the notebook's own runs
(solutions/runs/04_multi_gpu/stage*-[12]) into OUT/runs to keep them as the first measurement.

    WORKSHOP_RANDOM_WEIGHTS=1 python scripts/two_gpu_reference.py OUT [--ab-only | --no-ab]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import workshop_lessons as lessons  # noqa: E402
from workshop_lessons import multi_gpu as lesson  # noqa: E402
from workshop_lib import launch  # noqa: E402
from workshop_lib.rundir import state  # noqa: E402

SCALING = [(e, n) for e in ("stage2", "stage3") for n in (1, 2)]
SMALL_BUCKETS = ["--reduce-bucket-size", "50000000"]


def run(out: Path, experiment: str, nproc: int, *args: str) -> None:
    if state(out)[0] == "finished":
        print(f"skip {out} (finished)")
        return
    r = launch.run_local(experiment, nproc, out, *args, "--overwrite")
    print(f"{out}: {r['steady_train_tokens_per_second']:,.0f} tokens/s", flush=True)


def main(out: Path, flags: list[str]) -> None:
    args = lesson.run_options(True, lessons.notebook_run_options(), size_micro_batches=True)
    if "--ab-only" not in flags:
        for folder in ("runs", "repeat"):
            for e, n in SCALING:
                run(out / folder / f"{e}-{n}", e, n, *args)
    if "--no-ab" not in flags:
        for folder in ("runs", "repeat"):
            run(out / "ab" / folder / "stage2-small-buckets", "stage2", 2, *args, *SMALL_BUCKETS)
            run(out / "ab" / folder / "stage2-recipe-buckets", "stage2", 2, *args)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
