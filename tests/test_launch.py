"""`launch`'s working folder and its wait for a batch job, against stand-in sbatch/squeue/scancel commands: the
folder is the caller's, never the package's; a job is given up only when the cluster refuses it or leaves it
pending with nothing running, never for the time a busy cluster or a loaded machine takes."""

import json
import os
import stat
import subprocess
import sys

import pytest

from workshop_lib import launch
from workshop_lib.errors import WorkshopError


def _workshop_folder(path):
    (path / "slurm").mkdir(parents=True)
    (path / "slurm" / "common.sh").write_text("")
    (path / "slurm" / "stage2.slurm").write_text("")
    return path


def test_the_working_folder_is_the_callers_never_the_packages(tmp_path, monkeypatch):
    top = _workshop_folder(tmp_path / "workshop")
    (top / "course").mkdir()
    monkeypatch.delenv("WORKSHOP_DIR", raising=False)
    monkeypatch.chdir(top / "course")  # a notebook's folder: slurm/ is one above
    assert launch.workdir() == top.resolve()
    monkeypatch.chdir(tmp_path)  # no slurm/ here or above: the current folder
    assert launch.workdir() == tmp_path.resolve()
    monkeypatch.setenv("WORKSHOP_DIR", str(top))
    assert launch.workdir() == top.resolve()
    assert not hasattr(launch, "ROOT")


def _stand_ins(bin_dir, squeue: str):
    """sbatch (job 7), sinfo, scancel (recorded in bin_dir/cancelled) and squeue (the bash body `squeue`)."""
    bin_dir.mkdir()
    scripts = {
        "sbatch": 'pwd > "$(dirname "$0")/submitted_from"; echo 7',
        "sinfo": "exit 0",
        "scancel": 'echo "$1" > "$(dirname "$0")/cancelled"',
        "squeue": squeue,
    }
    for name, body in scripts.items():
        p = bin_dir / name
        p.write_text(f"#!/usr/bin/env bash\n{body}\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)


def test_a_job_is_submitted_from_the_working_folder_and_read_back_from_it(tmp_path, monkeypatch):
    top = _workshop_folder(tmp_path / "workshop")
    # pending behind a running job for 3 polls, then gone from the queue
    _stand_ins(
        tmp_path / "bin",
        'n=$(cat "$(dirname "$0")/polls" 2>/dev/null || echo 0)\n'
        'if [[ " $* " == *" -j "* ]]; then echo $((n + 1)) > "$(dirname "$0")/polls"; '
        '[ "$n" -lt 3 ] && echo "PENDING Resources"; else echo 6; fi; true',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("WORKSHOP_DIR", raising=False)
    monkeypatch.chdir(top)
    with pytest.raises(WorkshopError, match="No slurm/multi_node.slurm in"):
        launch.submit("multi_node")
    assert launch.submit("stage2") == "7"
    assert (tmp_path / "bin" / "submitted_from").read_text().strip() == str(top.resolve())
    assert (top / "logs").is_dir()  # made before sbatch: SLURM cannot open a job's log in a missing folder
    (top / "runs" / "stage2-7").mkdir(parents=True)
    (top / "runs" / "stage2-7" / "results.json").write_text(json.dumps({"global_steps": 2}))
    # pending: a job ahead runs, so no bound applies (start_within_s=0 would trip at once otherwise)
    assert launch.wait("7", "stage2", poll_s=0.01, start_within_s=0) == {"global_steps": 2}
    assert not (tmp_path / "bin" / "cancelled").exists()


@pytest.mark.parametrize(
    "squeue, message",
    [
        ('[[ " $* " == *" -j "* ]] && echo "PENDING ReqNodeNotAvail, UnavailableNodes:n1"; true', "will not start it"),
        ('[[ " $* " == *" -j "* ]] && echo "PENDING Resources"; true', "while the cluster ran no job"),
    ],
)
def test_a_job_the_cluster_refuses_or_leaves_idle_is_cancelled_with_the_reason(tmp_path, monkeypatch, squeue, message):
    _stand_ins(tmp_path / "bin", squeue)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WorkshopError, match=message):
        launch.wait("7", "stage2", poll_s=0.01, start_within_s=0.05)
    assert (tmp_path / "bin" / "cancelled").read_text().strip() == "7"


CORES = sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    "cores, env, threads",
    [
        (CORES, {}, len(CORES)),  # a notebook's kernel, `workshop run` alone: every core it may use
        (CORES[:1], {}, 1),  # a job's share of the machine (its affinity), not the machine
        (CORES, {"LOCAL_WORLD_SIZE": str(len(CORES))}, 1),  # the node's ranks share the cores
        (CORES, {"OMP_NUM_THREADS": "1"}, 1),  # the user's choice stands
    ],
)
def test_a_cpu_process_runs_the_threads_of_the_cores_it_gets(cores, env, threads):
    """A CPU process's torch threads: the cores of its affinity (os.sched_getaffinity, set here as SLURM or taskset
    would) divided among the node's ranks, or OMP_NUM_THREADS where the user set it (env.threads_per_rank; 2 threads
    a rank on a busy 2-core machine ran 8-10x slower than 1)."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    p = subprocess.run(
        [sys.executable, "-c", "import torch, workshop_lib.env; print(torch.get_num_threads())"],
        env=base | {"CUDA_VISIBLE_DEVICES": ""} | env,
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(p.stdout.split()[-1]) == threads, p.stderr[-2000:]
