"""Notebook 04's reference on a machine with 2 GPUs, by the measurement protocol (docs/measurement.md): its scaling
runs (ZeRO-2 and ZeRO-3 on 1 and 2 GPUs) made as the notebook makes them (`multi_gpu.run_options`: the course's
length, micro-batches sized for this GPU, fresh `torchrun` processes, one at a time) in ROUNDS rounds, every run once
per round: OUT/runs/NAME, then OUT/repeat/NAME, then OUT/repeat/NAME-rK (their spread is the band, `lessons.band`).
Each round also makes the recipe's FSDP2 (compiled, as ZeRO-2) on 1 and 2 GPUs into OUT/fsdp2/... the same way, so
that FSDP2 is measured against ZeRO-2 and ZeRO-3 at each GPU count in one call (notebook 03e's question). Then
exercise 7's A/B into OUT/ab (`multi_gpu.bucket_ab` reads it): ZeRO-2 on 2 GPUs with `--reduce-bucket-size
50000000` (10x smaller buckets) and with the recipe's, a pair into OUT/ab/runs, then one into OUT/ab/repeat. A
finished run is skipped, so a call cut short resumes.

    WORKSHOP_RANDOM_WEIGHTS=1 python scripts/two_gpu_reference.py OUT [--rounds 3] [--ab-only | --no-ab] [--no-fsdp2]
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


def round_dir(root: Path, k: int, name: str) -> Path:
    """Round k's (1, 2, ...) folder of run `name` under root: runs/NAME, repeat/NAME, repeat/NAME-r{k-1}."""
    return root / "runs" / name if k == 1 else root / "repeat" / (name if k == 2 else f"{name}-r{k - 1}")


def main(out: Path, flags: list[str]) -> None:
    args = lesson.run_options(True, lessons.notebook_run_options(), size_micro_batches=True)
    rounds = int(flags[flags.index("--rounds") + 1]) if "--rounds" in flags else 3
    runs = [(out, e, n) for e, n in SCALING]
    runs += [] if "--no-fsdp2" in flags else [(out / "fsdp2", "fsdp2", n) for n in (1, 2)]
    if "--ab-only" not in flags:
        for k in range(1, rounds + 1):
            for root, e, n in runs:
                run(round_dir(root, k, f"{e}-{n}"), e, n, *args)
    if "--no-ab" not in flags:
        for folder in ("runs", "repeat"):
            run(out / "ab" / folder / "stage2-small-buckets", "stage2", 2, *args, *SMALL_BUCKETS)
            run(out / "ab" / folder / "stage2-recipe-buckets", "stage2", 2, *args)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
