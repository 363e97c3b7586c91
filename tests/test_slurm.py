"""The batch scripts on a real SLURM cluster: `.ci/slurm_cluster.sh start` gives a controller and two
emulated compute nodes on this machine. Every job runs the tiny model on CPU nodes (WORKSHOP_TINY=1,
--gpus-per-node=0). Without SLURM these tests skip, unless WORKSHOP_REQUIRE_SLURM=1 (CI sets it)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HANG_S, workshop

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
if not shutil.which("sbatch") or subprocess.run(["sinfo"], capture_output=True).returncode != 0:
    if os.environ.get("WORKSHOP_REQUIRE_SLURM") == "1":
        raise RuntimeError(
            "WORKSHOP_REQUIRE_SLURM=1 but no SLURM cluster answers. To fix: bash .ci/slurm_cluster.sh start"
        )
    pytest.skip("no SLURM cluster here (start one with: bash .ci/slurm_cluster.sh start)", allow_module_level=True)


def job_env(env=None) -> dict:
    """The environment of a submission: this Python's environment, the tiny model, common.sh's timeouts, then `env`
    (a variable given None is unset)."""
    e = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    e |= {
        "WORKSHOP_TINY": "1",
        "WORKSHOP_ENV": str(Path(sys.executable).parent.parent),
        "WORKSHOP_DIST_TIMEOUT_S": "300",  # common.sh's: a loaded machine's ranks join late
    } | (env or {})
    return {k: v for k, v in e.items() if v is not None}  # None: unset


def submit(*argv, env=None) -> str:
    """`sbatch --parsable --gpus-per-node=0 ARGV` from the repo root, in `job_env(env)`: the job id."""
    p = subprocess.run(
        ["sbatch", "--parsable", "--gpus-per-node=0", *argv],
        cwd=ROOT,
        env=job_env(env),
        capture_output=True,
        text=True,
        check=True,
    )
    return p.stdout.strip().split(";")[0]


def state(jid: str) -> tuple[str, int]:
    """The job's state (PENDING, RUNNING, COMPLETED...) and exit code, as `scontrol show job` gives them (the exit
    code 128 + the signal where a signal ended it)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", jid], capture_output=True, text=True).stdout
    code, sig = map(int, re.search(r"ExitCode=(\d+):(\d+)", out).groups())
    return re.search(r"JobState=(\S+)", out).group(1), code or (128 + sig if sig else 0)


def wait(jid: str, timeout: float = HANG_S) -> int:
    """Wait for the job to end, through any requeue: its exit code, as `sbatch --wait` returns it. Polled every
    half second: `sbatch --wait` polls at growing intervals (up to 32 s), which added up to a minute to each test."""
    deadline = time.time() + timeout
    while (s := state(jid))[0] not in ENDED:
        assert time.time() < deadline, f"job {jid} still {s[0]} after {timeout} s"
        time.sleep(0.5)
    return s[1]


# SLURM's final job states (a requeued job goes back to PENDING)
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def sbatch(script, *args, env=None, job_name=None, run_name=None):
    """Submit from the repo root and wait for the job's end; return (exit code, job id, log text, results dict or
    None). The run and its log are named `run_name`, by default the job's name (`job_name`, else the script's)."""
    name = ["--job-name", job_name] if job_name else []
    job = submit(*name, f"slurm/{script}.slurm", *args, env=env)
    rc = wait(job)
    name = run_name or job_name or script
    log = (ROOT / "logs" / f"{name}-{job}.out").read_text()
    res = ROOT / "runs" / f"{name}-{job}" / "results.json"
    return rc, job, log, json.loads(res.read_text()) if res.exists() else None


@pytest.fixture(scope="module")
def one_process_loss(tmp_path_factory):
    """Train loss of one process with the multi-node runs' global batch: 2 token-budget micro-batches per
    step, by accumulation here (2 x 1 rank), by the ranks there (1 x 2 ranks); 32 questions either way."""
    out = tmp_path_factory.mktemp("one")
    workshop("run", "stage2", "--tiny", "--max-steps", 2, "--gradient-accumulation-steps", 2, "--output-dir", out)
    return json.loads((out / "results.json").read_text())["train_loss"]


def test_single_node_batch_job_as_printed():
    rc, job, log, r = sbatch("stage2_offload", "--max-steps", "2")
    assert rc == 0, log[-3000:]
    assert r["experiment"] == "stage2_offload" and r["world_size"] == 1 and r["offload_optimizer"]
    assert "wrote runs/stage2_offload-" in log


def test_fsdp2_batch_job_as_printed():
    """slurm/fsdp2.slurm: PyTorch FSDP2 through the Trainer, its config beside the results, its note in the log."""
    rc, job, log, r = sbatch("fsdp2", "--max-steps", "2")
    assert rc == 0, log[-3000:]
    assert (r["experiment"], r["zero_stage"], r["world_size"]) == ("fsdp2", None, 1)
    assert "fsdp2: PyTorch FSDP2 through the HF Trainer" in log and f"wrote runs/fsdp2-{job}/results.json" in log
    assert json.loads((ROOT / "runs" / f"fsdp2-{job}" / "fsdp_config.json").read_text())["version"] == 2


@pytest.mark.parametrize(
    "args, error", [((), "no experiment given."), (("stage9", "--max-steps", "2"), "unknown experiment 'stage9'.")]
)
def test_one_gpu_script_without_a_known_experiment_fails_with_the_fix(args, error):
    from workshop_lib.ds_config import EXPERIMENTS

    rc, job, log, r = sbatch("one_gpu", *args)
    assert rc == 2 and r is None, log[-3000:]
    lines = log.strip().splitlines()
    assert lines[-2] == f"workshop job: error: {error}"
    assert lines[-1].startswith("To fix: ") and lines[-1].endswith("one of: " + " ".join(EXPERIMENTS))


# what common.sh puts on node-local storage; this process may have set some (torch's inductor writes its own
# TORCHINDUCTOR_CACHE_DIR into os.environ), so the torchrun job gets them unset
NODE_CACHES = ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "deepspeed"])
def test_two_nodes_each_launcher_agree_with_one_process(launcher, one_process_loss, tmp_path):
    """torchrun's job leaves DeepSpeed's op cache to common.sh: both nodes share $HOME (and here their /tmp), and
    each builds and loads its ops in a folder of its own, named in the job's log; the others use this suite's."""
    rc, job, log, r = sbatch(
        "multi_node",
        "stage2",
        "--max-steps",
        "2",
        env={"WORKSHOP_LAUNCHER": launcher} | (dict.fromkeys(NODE_CACHES) if launcher == "torchrun" else {}),
        job_name=f"multi_node_{launcher}",
    )
    assert rc == 0, log[-3000:]
    caches = dict(re.findall(r"^node (n[12]): TORCH_EXTENSIONS_DIR=(\S+) ", log, re.M))
    assert sorted(caches) == ["n1", "n2"], log[-3000:]
    if launcher == "torchrun":  # ZeRO-2 on 2 CPU ranks: fused Adam and the shared-memory collectives, per node
        assert caches["n1"] != caches["n2"] and not caches["n1"].startswith(str(Path.home())), caches
        for folder in caches.values():
            assert {p.parent.name for p in Path(folder).glob("*/*.so")} >= {"fused_adam", "deepspeed_shm_comm"}
        for cache in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):  # beside them, per node
            found = dict(re.findall(rf"^node (n[12]): .*{cache}=(\S+)", log, re.M))
            assert Path(found["n1"]).parent == Path(caches["n1"]).parent != Path(found["n2"]).parent, found
    assert (r["world_size"], r["global_batch_size"]) == (2, 32)
    assert sorted(m["host"] for m in r["per_rank_memory"]) == ["n1", "n2"]
    assert abs(r["train_loss"] - one_process_loss) < 1e-3, (r["train_loss"], one_process_loss)
    if launcher == "torchrun":  # its checkpoint (step 2, the end) holds 2 ranks' ZeRO-2 partitions
        from workshop_lib import evaluation

        run = ROOT / "runs" / f"multi_node_{launcher}-{job}"
        workshop("export", run, tmp_path / "exported")
        (a, _), (b, _) = evaluation.load_model(tmp_path / "exported"), evaluation.load_model(run)
        sa, sb = a.state_dict(), b.state_dict()
        assert max((sa[k] - sb[k]).abs().max().item() for k in sa) == 0.0  # fp32 on the CPU: the same weights


def test_missing_environment_fails_fast_with_the_fix():
    rc, job, log, r = sbatch("stage2", env={"WORKSHOP_ENV": "/nonexistent/env"})
    assert rc != 0 and r is None
    assert "no Python environment" in log and "To fix:" in log


def test_unreachable_master_fails_instead_of_hanging():
    """A master no node can reach: the rendezvous gives up after WORKSHOP_DIST_TIMEOUT_S (its join and its store's
    connection, `--rdzv_conf` read_timeout, torch's default 60 s) and the job fails."""
    rc, job, log, r = sbatch(
        "multi_node",
        "stage2",
        "--max-steps",
        "2",
        job_name="multi_node_badmaster",
        env={"WORKSHOP_MASTER_ADDR": "no-such-host.invalid", "WORKSHOP_DIST_TIMEOUT_S": "10"},
    )
    assert rc != 0 and r is None


def test_a_rank_that_dies_ends_the_job():
    """SIGKILL rank 1 mid-training: the job must fail soon (srun --kill-on-bad-exit), not hang to its limit."""
    import glob
    import signal

    jid = submit("--job-name", "multi_node_kill", "slurm/multi_node.slurm", "stage2", "--max-steps", "200")
    victim, deadline = None, time.time() + HANG_S
    while victim is None and time.time() < deadline and state(jid)[0] not in ENDED:
        if glob.glob(str(ROOT / "runs" / "multi_node_kill-*" / "train_log.csv")):  # training has started
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"workshop_lib.cli" in cmd and b"RANK=1" in environ and any(b"multi_node_kill" in c for c in cmd):
                    victim = int(pid)
        time.sleep(1)
    assert victim, "rank 1 never started training"
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)
    rc = wait(jid)
    assert rc != 0 and time.time() - killed_at < 1800  # not the job's hour: a hang would reach it, load does not
    assert not (ROOT / "runs" / f"multi_node_kill-{jid}" / "results.json").exists()


def test_a_job_warned_before_its_time_limit_checkpoints_requeues_itself_and_resumes(tmp_path):
    """SIGUSR1 to the batch shell, as SLURM sends it before the time limit (the scripts' --signal=B:USR1@120;
    sent here once training runs, with scancel --signal=USR1 --batch, so the test need not wait for a
    limit): the rank checkpoints at its next step and exits 75, the job requeues itself, its next start
    resumes, and the job ends with the train and eval losses of an uninterrupted run. Through
    `sbatch slurm/one_gpu.slurm stage2`: the job of slurm/stage2.slurm (every single-GPU script has its #SBATCH lines
    and its body from one template: tests/test_slurm_scripts.py), its run and log named after the experiment across
    starts (runs/stage2-<job id>; logs/stage2-<job id>.out links to SLURM's logs/one_gpu-<job id>.out)."""
    args = ["--epochs", "4"]  # 16 steps: training still runs when the signal comes
    run_name, argv = "stage2", ["slurm/one_gpu.slurm", "stage2"]
    jid, deadline = submit(*argv, *args), time.time() + HANG_S
    log_path = ROOT / "runs" / f"{run_name}-{jid}" / "train_log.csv"
    while time.time() < deadline and not (log_path.exists() and len(log_path.read_text().splitlines()) > 3):
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=USR1", "--batch", jid], check=True)
    ref = tmp_path / "ref"
    workshop("run", "stage2", "--tiny", *args, "--output-dir", ref)
    while state(jid)[0] not in ENDED and time.time() < deadline:  # SLURM holds a requeued job ~2 min: release it
        held = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%T %r"], capture_output=True, text=True).stdout
        if "PENDING" in held and "BeginTime" in held:
            subprocess.run(["scontrol", "update", f"JobId={jid}", "StartTime=now"], check=True)
            break
        time.sleep(0.5)
    rc = wait(jid)
    log = (ROOT / "logs" / f"{run_name}-{jid}.out").read_text()
    assert rc == 0, log[-3000:]
    assert "checkpointing at the next step" in log and "requeued, the next start resumes" in log, log[-3000:]
    assert log.count("Resuming from") == 1 and f"wrote runs/stage2-{jid}/results.json" in log, log[-3000:]
    assert (ROOT / "logs" / f"stage2-{jid}.out").resolve() == ROOT / "logs" / f"one_gpu-{jid}.out"
    r = json.loads((ROOT / "runs" / f"{run_name}-{jid}" / "results.json").read_text())
    assert (r["experiment"], r["world_size"]) == ("stage2", 1)
    want = json.loads((ref / "results.json").read_text())
    # CPU fp32, one process either way: measured identical
    assert (r["global_steps"], r["train_loss"], r["eval_loss"]) == (
        want["global_steps"],
        want["train_loss"],
        want["eval_loss"],
    )
