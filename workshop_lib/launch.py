"""Starting several processes: torchrun on this machine, or SLURM batch jobs (introduced in
`04_multi_gpu`). The batch scripts themselves are in the working folder's slurm/ (`workdir`); this module submits
them from there and reads back what they wrote, so a notebook can drive a cluster as a terminal would. Nothing here
depends on where the package is installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from . import variables
from .env import threads_per_rank
from .errors import WorkshopError
from .rundir import no_link

# Why a pending job will never start (squeue's %r): the cluster refuses what it asks for, or holds it
REFUSED = (
    "PartitionConfig",
    "PartitionNodeLimit",
    "PartitionTimeLimit",
    "PartitionDown",
    "PartitionInactive",
    "BadConstraints",
    "ReqNodeNotAvail",
    "NodeDown",
    "InvalidAccount",
    "InvalidQOS",
    "DependencyNeverSatisfied",
    "JobHeldAdmin",
    "JobHeldUser",
    "AssocMaxJobsLimit",
    "QOSMaxJobsPerUserLimit",
)


def workdir() -> Path:
    """The working folder the batch jobs are submitted from (slurm/ in it; the jobs write runs/ and logs/ there):
    WORKSHOP_DIR where it is set, else the first of the current directory and its parents that holds
    slurm/common.sh (a notebook runs in course/, beside slurm/), else the current directory. Never the package's
    location: an installed package (`pip install .`) has no slurm/ beside it."""
    given = variables.get("WORKSHOP_DIR")
    if given:  # a folder without slurm/ is refused by `submit`, naming WORKSHOP_DIR
        return Path(given).expanduser().resolve()
    here = Path.cwd().resolve()
    return next((d for d in (here, *here.parents) if (d / "slurm" / "common.sh").is_file()), here)


def torchrun_command(experiment: str, nproc: int, output_dir: str | os.PathLike, *args: str) -> list[str]:
    """The command line of `workshop run EXPERIMENT --output-dir OUTPUT_DIR ARGS` on NPROC local ranks through
    torchrun (`--standalone`: a free local port for the rendezvous)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "-m",
        "workshop_lib.cli",
        "run",
        experiment,
        "--output-dir",
        str(output_dir),
        *args,
    ]


def run_local(experiment: str, nproc: int, output_dir: str | os.PathLike, *args: str, env: dict | None = None) -> dict:
    """`torchrun_command` run on this machine; returns rank 0's results dict. On a CPU the ranks
    talk through gloo; on GPUs one rank per GPU (NCCL). `env` adds variables (e.g. {"CUDA_VISIBLE_DEVICES": ""}
    to keep the ranks on the CPU); CPU ranks share this process's cores (OMP_NUM_THREADS: `env.threads_per_rank`).
    Every rank's output is appended to OUTPUT_DIR/launch.log.

    Raises:
        WorkshopError: the launch failed (its last output lines are in the message).
    """
    cmd = torchrun_command(experiment, nproc, output_dir, *args)
    # torchrun alone would give each rank 1 thread, whatever the cores
    cpu = {} if torch.cuda.is_available() else {"OMP_NUM_THREADS": str(threads_per_rank(nproc))}
    p = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ | cpu | (env or {})
    )
    log = Path(output_dir) / "launch.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", opener=no_link) as f:  # appended: an earlier launch's log stays
        f.write(f"$ {' '.join(cmd)}\n{p.stdout}\n")
    if p.returncode != 0:  # the ranks' own error lines first: torchrun's failure summary ends the output
        causes = [
            ln
            for ln in p.stdout.splitlines()
            if "error:" in ln.lower()
            or ln.startswith("To fix:")
            or ln.endswith(("Error", "Exception"))
            or "Error: " in ln
        ][:12]
        raise WorkshopError(
            f"{' '.join(cmd[2:])} failed (exit {p.returncode}); its output is in {log}.\n"
            + "\n".join(dict.fromkeys(causes))
            + f"\n... last lines:\n{p.stdout[-1200:]}",
            "read the error above; `workshop run` prints a 'To fix' line for bad input.",
        )
    return json.loads((Path(output_dir) / "results.json").read_text())


def slurm_available() -> bool:
    """True when `sbatch` is on the PATH and the controller answers `sinfo`."""
    return bool(shutil.which("sbatch")) and subprocess.run(["sinfo"], capture_output=True).returncode == 0


def submit(script: str, *args: str, sbatch_options: tuple[str, ...] = (), env: dict | None = None) -> str:
    """`sbatch [OPTIONS] slurm/SCRIPT.slurm ARGS` from the working folder (`workdir`); returns the job id.

    Raises:
        WorkshopError: no SLURM here, no slurm/SCRIPT.slurm in the working folder, or sbatch refused the job (its
            message says why).
    """
    if not slurm_available():
        raise WorkshopError(
            "No SLURM cluster answers here (sbatch/sinfo).",
            "run on a cluster login node, or use run_local() to start the ranks on this machine.",
        )
    where = workdir()
    if not (where / "slurm" / f"{script}.slurm").is_file():
        raise WorkshopError(
            f"No slurm/{script}.slurm in {where} (the working folder: WORKSHOP_DIR, else the current folder or one "
            "above it holding slurm/).",
            "run from the workshop folder (or a folder below it), or set WORKSHOP_DIR to it.",
        )
    (where / "logs").mkdir(exist_ok=True)  # the scripts' --output=logs/%x-%j.out: SLURM fails a job without it
    p = subprocess.run(
        ["sbatch", "--parsable", *sbatch_options, f"slurm/{script}.slurm", *args],
        cwd=where,
        capture_output=True,
        text=True,
        env=os.environ | (env or {}),
    )
    if p.returncode != 0:
        raise WorkshopError(
            f"sbatch refused slurm/{script}.slurm: {p.stderr.strip()}",
            "check the partition/account options (sbatch --partition=... --account=...).",
        )
    return p.stdout.strip().split(";")[0]


def job_state(job_id: str) -> tuple[str, str] | None:
    """The job's state and reason as squeue gives them (("PENDING", "Resources"), ("RUNNING", "None")), ("", "")
    once it has left the queue, or None when squeue did not answer (a controller too busy to reply in time)."""
    p = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True, text=True)
    if p.returncode != 0:  # squeue -j of a job that has left the queue answers 0 with nothing, or "Invalid job id"
        return ("", "") if "Invalid job id" in p.stderr else None
    state, _, reason = p.stdout.strip().partition(" ")
    return state, reason


def wait(
    job_id: str,
    job_name: str,
    output_dir: str | os.PathLike | None = None,
    poll_s: float = 5.0,
    start_within_s: float | None = None,
) -> dict:
    """Wait for a job to leave the queue and return its results.json (in output_dir, by default the batch
    scripts' runs/<job name>-<id>/ in the working folder). A job the cluster will never start (pending for a reason
    of `REFUSED`: its partition's limits, an unavailable node, a hold) is cancelled and reported at once. With
    `start_within_s`, so is a job left pending that long while the cluster runs no job at all (nothing ahead of it
    to wait for: a cluster that does not schedule it). A job waiting its turn behind running jobs waits on: a busy
    cluster or a loaded machine makes the wait longer, never an error.

    Raises:
        WorkshopError: the job ended without results (the message holds the end of logs/<name>-<id>.out), the
            cluster refuses it, or it stayed pending `start_within_s` seconds with nothing running ahead of it."""
    idle, last = 0.0, time.monotonic()
    while True:
        now, seen = time.monotonic(), job_state(job_id)
        state, reason = seen or ("UNKNOWN", "")
        if not state:
            break
        if state == "PENDING":
            ahead = subprocess.run(
                ["squeue", "-h", "-t", "RUNNING,COMPLETING", "-o", "%i"], capture_output=True, text=True
            )
            # pending with nothing running, for no reason of its own (a requeued job's BeginTime, a dependency)
            waits = ahead.returncode or ahead.stdout.split() or reason.startswith(("BeginTime", "Dependency"))
            idle = idle if waits else idle + now - last
            never = any(reason.startswith(r) for r in REFUSED)
            if never or (start_within_s is not None and idle > start_within_s):
                subprocess.run(["scancel", job_id], capture_output=True)
                why = (
                    f"the cluster will not start it (pending: {reason})"
                    if never
                    else f"it was pending {idle:.0f} s ({reason}) while the cluster ran no job"
                )
                raise WorkshopError(
                    f"Job {job_id} did not start: {why}; cancelled.",
                    "check its resources against `sinfo` (sbatch --partition=... --nodes=...), or run the ranks here.",
                )
        last = now
        time.sleep(poll_s)
    where = workdir()
    res = Path(output_dir or where / "runs" / f"{job_name}-{job_id}") / "results.json"
    if not res.exists():
        log = where / "logs" / f"{job_name}-{job_id}.out"
        tail = log.read_text()[-2000:] if log.exists() else "(no log)"
        raise WorkshopError(
            f"Job {job_id} ended without {res}. End of {log}:\n{tail}",
            "fix what the log reports, then submit again; earlier runs in runs/ are untouched.",
        )
    return json.loads(res.read_text())
