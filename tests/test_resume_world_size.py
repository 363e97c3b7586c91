"""Resume on another world size, for real on the CPU (gloo ranks, DeepSpeed, the tiny model; no mocks): a 2-rank
run stopped by SIGTERM at its first epoch's end (tests/faults.py: a checkpoint at step 2 of 4) resumes on 1 rank
through DeepSpeed's universal checkpoint, made once, and on 2 ranks as it is; a 1-rank run resumes on 2 ranks;
a baseline (no DeepSpeed) run resumes on 1 rank from its whole optimizer states. Each ends at the losses of the
uninterrupted 2-rank run. Marked slow: on 2 shared CPU cores a 2-rank launch takes ~20 s, a 1-rank run ~12 s.

Tolerances (CPU, fp32): a step's training loss within 1e-5 nats of the uninterrupted run's, the final weights
within 1e-5. The same micro-batches make each optimizer step whatever the world size (token-budget batches of the
seed and the epoch), so only the order in which gradients are summed differs: measured 1.2e-6 on losses of about
8 nats and 1.2e-7 on the weights (rounding of fp32 sums, ~1e-7 relative, over a few steps). On a GPU, kernels
differ in the last bits of 16-bit arithmetic: 1e-3, as tests/test_cli.py's resume test. Eval losses are compared
on one world size: the same weights scored 8.21575 nats in the 2-rank run's evaluation and 8.21666 on one rank
(the Trainer's eval loss is a mean of per-batch means, gathered from the ranks; where the two part was not traced
further), so a 1-rank resume's final eval loss is held to the uninterrupted run's final model scored on one rank.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import torch
from safetensors.torch import load_file

from conftest import HANG_S, skip_unless_runnable
from workshop_lib import checkpoint, evaluation, rundir

# one pytest-xdist worker holds the module's reference runs (scripts/test.sh runs two, --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("resume_world_size")]
# every rank on the CPU, the 1-rank resumes too, unless 2 GPUs can hold the 2-rank runs
ENV = os.environ | ({"CUDA_VISIBLE_DEVICES": ""} if torch.cuda.device_count() < 2 else {})
GPU = torch.cuda.device_count() >= 2
TOL = 1e-3 if GPU else 1e-5
FAULTS = Path(__file__).with_name("faults.py")


def run(nproc: int, *args, stop: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    """`workshop run ARGS` on `nproc` ranks (torchrun, --standalone) or, with 1, in one plain process, as on one
    GPU; with `stop`, through tests/faults.py, which sends every rank SIGTERM at the first epoch's last step."""
    cmd = [sys.executable] + (
        ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)] if nproc > 1 else []
    )
    cmd += [str(FAULTS), "step_end", "TERM"] if stop else ["-m", "workshop_lib.cli"]
    p = subprocess.run(cmd + ["run", *map(str, args)], capture_output=True, text=True, timeout=HANG_S, env=ENV)
    if check and not stop and p.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} run {args} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )
    return p


def stopped_run(out: Path, nproc: int, experiment: str, *extra) -> Path:
    """`experiment` --tiny on `nproc` ranks into `out`, stopped by SIGTERM after its step-2 checkpoint."""
    p = run(nproc, experiment, "--tiny", *extra, "--output-dir", out, stop=True)
    assert json.loads((out / rundir.MARKER).read_text())["status"] == "preempted", p.stderr[-3000:]
    assert [checkpoint.step_of(c) for c in checkpoint.find_checkpoints(out)[0]] == [2]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Made once, on first use: uninterrupted 2-rank runs ("<experiment>-ref") and 2-rank runs stopped at step 2
    ("<experiment>-stopped"), which the tests copy before resuming."""
    root = tmp_path_factory.mktemp("world")

    def get(name: str) -> Path:
        out = root / name
        if not out.exists():
            experiment, kind = name.rsplit("-", 1)
            if kind == "ref":
                run(2, experiment, "--tiny", "--output-dir", out)
            else:
                stopped_run(out, 2, experiment)
        return out

    return get


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def assert_same_losses(out: Path, ref: Path, evals_on_one_world_size: bool = True) -> None:
    """Every step logged once with the reference's training loss (`TOL`), and the same final weights; the eval
    losses too when both runs evaluated on the same world size."""
    log, ref_log = (pd.read_csv(d / "train_log.csv") for d in (out, ref))
    assert list(log["step"]) == list(ref_log["step"]) == [1, 2, 2, 3, 4, 4]
    assert (log["loss"].fillna(0) - ref_log["loss"].fillna(0)).abs().max() <= TOL
    if evals_on_one_world_size:
        assert (log["eval_loss"].fillna(0) - ref_log["eval_loss"].fillna(0)).abs().max() <= TOL
    a, b = (load_file(d / "model" / "model.safetensors") for d in (out, ref))
    assert a.keys() == b.keys() and max((a[k].float() - b[k].float()).abs().max().item() for k in a) <= TOL


def test_a_2_rank_run_resumes_on_1_rank_through_a_universal_checkpoint_made_once(runs, tmp_path):
    """Resumed on 1 rank: refused with an accumulation that would change the global batch, then the universal
    checkpoint made (the attempt killed right after), then reused by the next attempt, which finishes with the
    uninterrupted 2-rank run's losses, accumulation 2 instead of 1, and the change in its output and results."""
    ref, out = runs("stage2-ref"), copy(runs("stage2-stopped"), tmp_path / "run")
    ckpt = out / checkpoint.CHECKPOINTS / "checkpoint-2"
    args = ["stage2", "--tiny", "--output-dir", out, "--resume"]

    p = run(1, *args, "--gradient-accumulation-steps", "1", check=False)
    assert p.returncode == 2 and "2 micro-batch(es) per optimizer step" in p.stderr, p.stderr[-2000:]
    assert "To fix: resume on 1, 2 rank(s)" in p.stderr and not (ckpt / checkpoint.UNIVERSAL).exists()

    proc = subprocess.Popen(
        [sys.executable, "-m", "workshop_lib.cli", "run", *map(str, args)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while proc.poll() is None and not (ckpt / checkpoint.UNIVERSAL).exists():
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    universal = ckpt / (ckpt / checkpoint.UNIVERSAL).read_text().strip()
    assert universal.name == "global_step2_universal" and (universal / "zero" / "optimizer_state.pt").is_file()
    assert not (out / "results.json").exists() and not (ckpt.parent / "checkpoint-4").exists()
    made = {f: f.stat().st_mtime_ns for f in universal.rglob("*") if f.is_file()}

    p = run(1, *args)
    assert "Converting" not in p.stdout and f"Reusing the universal checkpoint {universal}" in p.stdout, p.stdout
    assert {f: f.stat().st_mtime_ns for f in universal.rglob("*") if f.is_file()} == made  # not made again
    assert (
        "Resuming on another world size: 2 -> 1 rank(s), gradient_accumulation_steps 1 -> 2, the global "
        "batch kept (2 micro-batch(es) per optimizer step); from step 2"
    ) in p.stdout
    r, r_ref = (json.loads((d / "results.json").read_text()) for d in (out, ref))
    assert (r["world_size"], r["gradient_accumulation_steps"]) == (1, 2) and r["global_steps"] == 4
    assert r["global_batch_size"] == r_ref["global_batch_size"]  # 16 x 2 x 1 = 16 x 1 x 2
    [change] = r["world_size_changes"]  # the killed attempt's and this one's: one change
    assert change | {"data_order": ""} == {
        "step": 2,
        "checkpoint": str(ckpt),
        "world_size": [2, 1],
        "gradient_accumulation_steps": [1, 2],
        "micro_batches_per_step": 2,
        "universal": True,
        "data_order": "",
    }
    assert change["data_order"].startswith("every optimizer step takes the same 2 micro-batches")
    assert json.loads((out / "ds_config.json").read_text())["checkpoint"] == {"load_universal": True}
    assert_same_losses(out, ref, evals_on_one_world_size=False)
    log, ref_log = (pd.read_csv(d / "train_log.csv") for d in (out, ref))
    assert log["eval_loss"].iloc[2] == ref_log["eval_loss"].iloc[2]  # step 2's, from the checkpoint's history
    net, tok = evaluation.load_model(ref)  # the uninterrupted run's final model, scored on one rank as ours was
    assert abs(evaluation.eval_loss(net, tok, r_ref["config"]) - log["eval_loss"].iloc[-1]) <= TOL


def test_a_2_rank_run_resumes_on_2_ranks_as_it_is(runs, tmp_path):
    """The world size that wrote the checkpoint: DeepSpeed's own ZeRO partitions load, nothing is converted,
    and the run ends with the uninterrupted run's losses, evaluations included."""
    ref, out = runs("stage2-ref"), copy(runs("stage2-stopped"), tmp_path / "run")
    p = run(2, "stage2", "--tiny", "--output-dir", out, "--resume")
    assert "Resuming on another world size" not in p.stdout and "Converting" not in p.stdout
    assert not list(out.rglob(checkpoint.UNIVERSAL)) and "checkpoint" not in json.loads(
        (out / "ds_config.json").read_text()
    )
    assert json.loads((out / "results.json").read_text())["world_size_changes"] == []
    assert_same_losses(out, ref)


def test_a_1_rank_run_resumes_on_2_ranks(runs, tmp_path):
    """A 1-rank run with the 2-rank run's global batch (accumulation 2), stopped at step 2, resumed on 2 ranks:
    its one ZeRO partition re-sliced for two through the universal checkpoint, accumulation 1, the losses and
    evaluations of the uninterrupted 2-rank run (the last evaluation made on 2 ranks, as the reference's)."""
    ref = runs("stage2-ref")
    out = stopped_run(tmp_path / "run", 1, "stage2", "--gradient-accumulation-steps", "2")
    p = run(2, "stage2", "--tiny", "--output-dir", out, "--resume")
    assert "Resuming on another world size: 1 -> 2 rank(s), gradient_accumulation_steps 2 -> 1" in p.stdout
    r = json.loads((out / "results.json").read_text())
    assert (r["world_size"], r["gradient_accumulation_steps"]) == (2, 1)
    assert [(c["world_size"], c["universal"]) for c in r["world_size_changes"]] == [([1, 2], True)]
    assert_same_losses(out, ref, evals_on_one_world_size=False)
    log, ref_log = (pd.read_csv(d / "train_log.csv") for d in (out, ref))
    assert abs(log["eval_loss"].iloc[-1] - ref_log["eval_loss"].iloc[-1]) <= TOL  # both made on 2 ranks


def test_a_baseline_run_resumes_on_1_rank_from_whole_states(runs, tmp_path):
    """No DeepSpeed: the Trainer's checkpoint holds torch AdamW's whole state (optimizer.pt), which loads on any
    number of ranks; only the accumulation changes, and nothing is converted."""
    ref, out = runs("baseline-ref"), copy(runs("baseline-stopped"), tmp_path / "run")
    p = run(1, "baseline", "--tiny", "--output-dir", out, "--resume")
    assert "from states that are whole (no ZeRO partitions" in p.stdout and "Converting" not in p.stdout
    r = json.loads((out / "results.json").read_text())
    assert [(c["world_size"], c["gradient_accumulation_steps"], c["universal"]) for c in r["world_size_changes"]] == [
        ([2, 1], [1, 2], False)
    ]
    assert_same_losses(out, ref, evals_on_one_world_size=False)


def test_nvme_offload_is_refused_on_another_world_size(tmp_path):
    """ZeRO-Infinity's optimizer states on NVMe: DeepSpeed 0.19.8 copies each rank's swap files from the
    checkpoint's offloaded_tensors/rankR and never reads them from a universal checkpoint (allowed through, the
    1-rank resume failed with FileNotFoundError: global_step2_universal/offloaded_tensors/rank00). Refused with
    the fix, before anything is written."""
    skip_unless_runnable("stage3_nvme")
    out = stopped_run(tmp_path / "run", 2, "stage3_nvme")
    before = {f: f.stat().st_mtime_ns for f in out.rglob("*")}
    p = run(1, "stage3_nvme", "--tiny", "--output-dir", out, "--resume", check=False)
    assert p.returncode == 2 and "with the optimizer states offloaded to NVMe" in p.stderr, p.stderr[-2000:]
    assert "To fix: resume on 2 rank(s), or start again on 1 rank(s) with --overwrite." in p.stderr
    assert {f: f.stat().st_mtime_ns for f in out.rglob("*")} == before


def test_notebook_03b_kills_a_2_rank_run_and_compares_its_resume_on_1_rank(runs, tmp_path):
    """Notebook 03b's step, through the library as the notebook calls it: `fine_tuned.killed_on_ranks` kills
    torchrun and both ranks with SIGKILL once checkpoint-2 is complete (no rank outlives it), `launch.run_local`
    resumes on 1 rank, and `fine_tuned.other_world` reads what the resume printed, the change it recorded and every
    step's loss beside the uninterrupted 2-rank run's; `fine_tuned.resumable_on` names the ranks a resume keeps
    the global batch on (2 micro-batches per step: 1 or 2). Run again on the finished run's directory, the kill
    waits for the new run's checkpoint (it once took the old run's for it and killed the new one before it began)."""
    from workshop_lessons import fine_tuned
    from workshop_lib import launch

    cpu = {} if GPU else {"CUDA_VISIBLE_DEVICES": ""}
    ref, out = runs("stage2-ref"), tmp_path / "killed"
    step = fine_tuned.killed_on_ranks("stage2", 2, out, "--tiny", env=cpu)
    assert step >= fine_tuned.KILL_AFTER and not (out / "results.json").exists()
    # psutil skips a process that ends while it is listed (reading /proc by hand raced one and failed CI once)
    alive = [p.info for p in psutil.process_iter(["pid", "cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]
    assert alive == [], alive
    assert "$ " in (out / "launch.log").read_text() and "--save-steps 1" in (out / "launch.log").read_text()
    launch.run_local("stage2", 1, out, "--tiny", "--resume", env=cpu)
    moved = fine_tuned.other_world(out, ref)
    assert [ln.split(" ")[0] for ln in moved.printed] == ["Resuming", "Resuming", "Converting"], moved.printed
    assert moved.printed[0].startswith(f"Resuming from {out / 'checkpoints'}/checkpoint-{step}")
    assert moved.printed[1].startswith(
        "Resuming on another world size: 2 -> 1 rank(s), gradient_accumulation_steps 1 -> 2, the global batch kept"
    )
    assert (moved.change["step"], moved.change["world_size"], moved.change["universal"]) == (step, [2, 1], True)
    assert list(moved.losses.index) == [1, 2, 3, 4] and moved.global_batch_size[0] == moved.global_batch_size[1]
    assert (moved.losses["difference"].loc[:step] == 0).all()  # before the kill: 2 ranks either way
    assert moved.max_difference <= TOL and (GPU or moved.verdict == "the same losses")  # the notebook's: CPU ranks
    assert fine_tuned.resumable_on(out, 4) == {1: 2, 2: 1}
    with pytest.raises(ValueError, match="records no resume on another world size"):
        fine_tuned.other_world(ref, ref)
    # the notebook run again: the finished run's checkpoints are removed first, never taken for the new run's
    assert fine_tuned.killed_on_ranks("stage2", 2, out, "--tiny", env=cpu) >= fine_tuned.KILL_AFTER
    assert not (out / "results.json").exists() and not (out / checkpoint.WORLD_SIZE_CHANGES).exists()
    assert (out / "launch.log").read_text().count("$ ") == 1
