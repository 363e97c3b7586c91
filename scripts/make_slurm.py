"""Write the single-GPU batch scripts from one template and `ds_config.EXPERIMENTS`: slurm/one_gpu.slurm (any
experiment, named first: `sbatch slurm/one_gpu.slurm stage2_offload --epochs 1`) and slurm/<experiment>.slurm for
every experiment (`sbatch slurm/stage2_offload.slurm --epochs 1`, the same job). They differ only in their name,
description and last lines: the #SBATCH header and slurm/common.sh are the same for all. It copies slurm/common.sh
into workshop_lessons/slurm/ (package data: the notebooks show it from any folder). CI checks that they are up to
date (`python scripts/make_slurm.py --check`); change the template here, never a written file.

    python scripts/make_slurm.py            # write slurm/one_gpu.slurm and slurm/<experiment>.slurm
    python scripts/make_slurm.py --check    # exit 1 if a file is missing or differs from what would be written
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # run as a script or loaded by a test
from generated import write_or_check  # noqa: E402

from workshop_lib.ds_config import EXPERIMENTS, Experiment  # noqa: E402

# sbatch reads #SBATCH lines only above the first command: the header stays before {body}.
TEMPLATE = """\
#!/usr/bin/env bash
{about}
#   WORKSHOP_TINY=1 sbatch --gpus-per-node=0 slurm/{usage}      # tiny model on a CPU node
#   First, once, on a login node with internet: hf download <model>; SQuAD: see slurm/common.sh
# Results: runs/{run}-<job id>/results.json; log: logs/{run}-<job id>.out
# Written by scripts/make_slurm.py (one template for every single-GPU script): change it there, then run it.
#SBATCH --job-name={job}
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=01:00:00
#SBATCH --output=logs/%x-%j.out
# SIGUSR1 2 min before the time limit: checkpoint, requeue, resume (common.sh); one log for every start
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
# EDIT (or give on the sbatch command line): #SBATCH --account=... --partition=... --reservation=...
{body}
"""
ARGS = "[workshop run arguments, e.g. --recipe classic --epochs 1]"

# The experiment comes first; the job, its run and its log are named after it (runs/<experiment>-<job id>, as
# slurm/<experiment>.slurm names them) unless sbatch --job-name gave the job a name of its own.
ONE_GPU_BODY = """\
# ds_config.EXPERIMENTS, one of them first:
experiments="{names}"
exp=${{1:-}}
if [ "${{SLURM_JOB_NAME:-}}" = one_gpu ] && [[ " $experiments " == *" $exp "* ]]; then
  WORKSHOP_RUN_NAME=$exp  # common.sh: runs/$exp-<job id>, and logs/$exp-<job id>.out links to this job's log
fi
source slurm/common.sh
fix="name it first: sbatch slurm/one_gpu.slurm EXPERIMENT [workshop run arguments], one of: $experiments"
[ -n "$exp" ] || fail "no experiment given." "$fix"
[[ " $experiments " == *" $exp "* ]] || fail "unknown experiment '$exp'." "$fix"
workshop_launch "$@"
"""


def script(exp: Experiment) -> str:
    """slurm/<experiment>.slurm: the job of `sbatch slurm/one_gpu.slurm <experiment>`, named after it."""
    about = f"# {exp.name} on one GPU: {exp.summary}."
    about += (
        f"\n#   sbatch slurm/{exp.name}.slurm {ARGS}\n#   (the same job as: sbatch slurm/one_gpu.slurm {exp.name} ...)"
    )
    return TEMPLATE.format(
        about=about,
        usage=f"{exp.name}.slurm",
        run=exp.name,
        job=exp.name,
        body=f'source slurm/common.sh\nworkshop_launch {exp.name} "$@"',
    )


def one_gpu() -> str:
    """slurm/one_gpu.slurm: any experiment of ds_config.EXPERIMENTS, the first argument."""
    about = (
        "# Any experiment on one GPU, named first (one of $experiments below).\n"
        f"#   sbatch slurm/one_gpu.slurm EXPERIMENT {ARGS}\n"
        "#   sbatch slurm/one_gpu.slurm stage2_offload --epochs 1      # the job of slurm/stage2_offload.slurm"
    )
    return TEMPLATE.format(
        about=about,
        usage="one_gpu.slurm stage2",
        run="<experiment>",
        job="one_gpu",
        body=ONE_GPU_BODY.format(names=" ".join(EXPERIMENTS)).rstrip(),
    )


COMMON_SH = ROOT / "slurm" / "common.sh"  # hand-written; the notebooks show the package's copy


def scripts() -> dict[Path, str]:
    """Every file this writes, path -> text: the scripts, and the copy of slurm/common.sh that workshop_lessons ships
    (`lessons.BATCH_SCRIPTS`), so that a notebook copied out of the repository shows it too."""
    return {
        ROOT / "slurm" / "one_gpu.slurm": one_gpu(),
        **{ROOT / "slurm" / f"{e.name}.slurm": script(e) for e in EXPERIMENTS.values()},
        ROOT / "workshop_lessons" / "slurm" / "common.sh": COMMON_SH.read_text(),
    }


def main(check: bool) -> int:
    return write_or_check(scripts(), ROOT, check, "python scripts/make_slurm.py")


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
