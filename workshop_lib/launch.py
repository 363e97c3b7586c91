"""Starting several processes: torchrun on this machine, or SLURM batch jobs (introduced in
`04_multi_gpu`). The batch scripts themselves are in slurm/; this module submits them and reads back
what they wrote, so a notebook can drive a cluster as a terminal would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .errors import WorkshopError
from .rundir import no_link

ROOT = Path(__file__).resolve().parent.parent  # the workshop folder: slurm/, runs/, logs/


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
    to keep the ranks on the CPU). Every rank's output is appended to OUTPUT_DIR/launch.log.

    Raises:
        WorkshopError: the launch failed (its last output lines are in the message).
    """
    cmd = torchrun_command(experiment, nproc, output_dir, *args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ | (env or {}))
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
    """`sbatch [OPTIONS] slurm/SCRIPT.slurm ARGS` from the workshop folder; returns the job id.

    Raises:
        WorkshopError: no SLURM here, or sbatch refused the job (its message says why).
    """
    if not slurm_available():
        raise WorkshopError(
            "No SLURM cluster answers here (sbatch/sinfo).",
            "run on a cluster login node, or use run_local() to start the ranks on this machine.",
        )
    p = subprocess.run(
        ["sbatch", "--parsable", *sbatch_options, f"slurm/{script}.slurm", *args],
        cwd=ROOT,
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


def wait(
    job_id: str,
    job_name: str,
    output_dir: str | os.PathLike | None = None,
    poll_s: float = 5.0,
    start_within_s: float | None = None,
) -> dict:
    """Wait for a job to leave the queue and return its results.json (in output_dir, by default the batch
    scripts' runs/<job name>-<id>/). With `start_within_s`, a job still pending after that many seconds is
    cancelled (scancel) and reported, instead of waiting for a busy cluster.

    Raises:
        WorkshopError: the job ended without results (the message holds the end of logs/<name>-<id>.out), or
            it did not start within `start_within_s` seconds."""
    start = time.monotonic()
    while state := subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True
    ).stdout.strip():
        if start_within_s is not None and state == "PENDING" and time.monotonic() - start > start_within_s:
            subprocess.run(["scancel", job_id], capture_output=True)
            raise WorkshopError(
                f"Job {job_id} had not started after {start_within_s:.0f} s (the cluster is busy "
                "or refuses its resources); cancelled.",
                "submit it from a terminal and let it wait in the queue, or run the ranks here.",
            )
        time.sleep(poll_s)
    res = Path(output_dir or ROOT / "runs" / f"{job_name}-{job_id}") / "results.json"
    if not res.exists():
        log = ROOT / "logs" / f"{job_name}-{job_id}.out"
        tail = log.read_text()[-2000:] if log.exists() else "(no log)"
        raise WorkshopError(
            f"Job {job_id} ended without {res}. End of {log}:\n{tail}",
            "fix what the log reports, then submit again; earlier runs in runs/ are untouched.",
        )
    return json.loads(res.read_text())
