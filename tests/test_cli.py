"""Every experiment through `workshop run --tiny` (real DeepSpeed; on the CPU, or on a GPU where there is
one), then `workshop report`."""

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import HANG_S, Workshop, workshop
from workshop_lib import checkpoint, evaluation, rundir
from workshop_lib.ds_config import EXPERIMENTS

pytestmark = pytest.mark.slow
GPU = torch.cuda.is_available()

REQUIRED = [
    "experiment",
    "recipe",
    "model",
    "tiny",
    "zero_stage",
    "offload_optimizer",
    "offload_param",
    "world_size",
    "micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "global_batch_size",
    "epochs",
    "steps_per_epoch",
    "train_loss",
    "eval_loss",
    "train_samples_per_second",
    "eval_samples_per_second",
    "train_tokens_per_second",
    "mfu",
    "gpu_peak_allocated_mib",
    "gpu_peak_mib",
    "gpu_mean_mib",
    "gpu_min_mib",
    "host_peak_rss_mib",
    "estimated_model_states_gpu_mib",
    "estimated_model_states_cpu_mib",
    "data_stats",
    "device",
    "versions",
    "wall_seconds",
    "warmup_steps",
    "steady_steps",
    "steady_step_time_s",
    "steady_train_samples_per_second",
    "steady_train_tokens_per_second",
    "gpu_util_pct",
    "config",
    "setup_seconds",
    "train_begin_s",
    "train_end_s",
    "gpu_states_allocated_mib",
    "host_states_rss_mib",
    "gpu_peak_reserved_mib",
]


@pytest.fixture
def runs(tiny_runs):
    return tiny_runs  # conftest: every experiment once, shared with the lessons' tests


@pytest.mark.parametrize("exp", list(EXPERIMENTS))
def test_every_experiment_writes_its_results(runs, exp):
    d = runs / exp
    r = json.loads((d / "results.json").read_text())
    assert not [k for k in REQUIRED if k not in r]
    e = EXPERIMENTS[exp]
    assert (r["experiment"], r["zero_stage"], r["offload_optimizer"], r["offload_param"]) == (
        exp,
        e.zero_stage,
        e.offload_optimizer,
        e.offload_param,
    )
    assert r["config"]["experiment"] == exp and r["config"]["seed"] == 42
    # the tiny model named as such, and not pretrained; no GPU figures without a GPU
    assert r["model"] == r["config"]["model"] + " (tiny)" and r["tiny"] and r["random_weights"]
    assert (r["estimated_model_states_gpu_mib"] is None) == (not GPU) and r["estimated_model_states_cpu_mib"] > 0
    assert r["data_stats"]["train"]["source"].startswith("bundled SQuAD")
    assert not (d / "RUNNING").exists()
    # 64 questions in 4 micro-batches of up to 6,144 tokens (--tiny), one per step: 16 questions per step, as
    # ds_config.json's train_batch_size
    assert r["world_size"] == 1 and r["global_batch_size"] == 16 and r["steps_per_epoch"] == 4
    assert r["micro_batch_size_per_gpu"] == 16 and r["tokens_per_step"] == round(r["data_stats"]["train"]["tokens"] / 4)
    assert len(r["eval_loss"]) == r["epochs"] == 2 and all(math.isfinite(x) for x in r["eval_loss"])
    assert 0 < r["train_loss"] < 9 and r["train_samples_per_second"] > 0 and r["train_tokens_per_second"] > 0
    assert (r["gpu_peak_mib"] is not None) == GPU and r["host_peak_rss_mib"] > 100
    assert r["precision"] == ("bf16" if GPU and torch.cuda.is_bf16_supported() else "fp16" if GPU else "fp32")
    assert r["data_stats"]["train"]["used"] == 64
    assert (d / "ds_config.json").exists() == e.deepspeed
    if e.deepspeed:
        cfg = json.loads((d / "ds_config.json").read_text())
        # token-budget micro-batches: DeepSpeed counts the mean micro-batch (micro x accumulation x ranks)
        assert cfg["zero_optimization"]["stage"] == e.zero_stage and cfg["train_batch_size"] == r["global_batch_size"]
        assert ("offload_optimizer" in cfg["zero_optimization"]) == (e.offload_optimizer != "none")
    log = pd.read_csv(d / "train_log.csv")
    assert log["loss"].notna().sum() == 8 and log["eval_loss"].notna().sum() == 2
    # the warm-up found in the log (metrics.steady_steps): the first step at least, half the steps at most
    assert 1 <= r["warmup_steps"] <= 4 and r["warmup_steps"] + r["steady_steps"] <= 8
    assert r["steady_train_tokens_per_second"] > 0 and (log["compiles"].dropna() >= 0).all()
    shapes = pd.read_csv(d / "micro_batches.csv")  # every micro-batch: its step, shape and forward time
    assert list(shapes["step"]) == list(range(1, 9)) and (shapes["forward_ms"] > 0).all()
    assert log["step_time_s"].notna().sum() == 8 and log["tokens"].sum() == r["data_stats"]["train"]["tokens"] * 2
    mem = pd.read_csv(d / "memory.csv")
    assert len(mem) >= 2
    # memory phases: set-up, then the training window on memory.csv's clock, the states read after step 1
    assert 0 < r["setup_seconds"] == r["train_begin_s"] < r["train_end_s"] <= mem["time_s"].max() + 0.5
    assert 0 < r["host_states_rss_mib"] <= r["host_peak_rss_mib"]
    if GPU:
        assert (
            0
            < r["gpu_states_allocated_mib"]
            <= r["gpu_peak_allocated_mib"]
            <= r["gpu_peak_reserved_mib"]
            <= r["gpu_peak_mib"]
        )


def test_zero_stages_train_the_same_model(runs):
    """Same data, order and fp32 Adam maths: ZeRO partitioning must not change what is learnt."""
    loss = {e: json.loads((runs / e / "results.json").read_text())["train_loss"] for e in runs.available()}
    ds_runs = [v for e, v in loss.items() if e != "baseline"]
    # fp32 on the CPU: the same to 0.002; bf16 on a GPU rounds differently in each stage's kernels
    assert max(ds_runs) - min(ds_runs) < (0.05 if GPU else 0.002), loss
    assert abs(loss["baseline"] - loss["stage0"]) < (0.05 if GPU else 0.01), loss  # torch vs DeepSpeed AdamW
    first = json.loads((runs / "baseline" / "train_log.csv").with_name("results.json").read_text())
    assert first["eval_loss"][-1] < 8.3  # it learns: log(4096) = 8.32 is a uniform guess


def test_report_writes_tables_and_plots(runs, tmp_path):
    available = runs.available()
    p = workshop("report", runs.root, "--out", tmp_path / "report")
    assert "| stage3_offload" in p.stdout and "Qwen/Qwen3-0.6B (tiny)" in p.stdout
    table = pd.read_csv(tmp_path / "report" / "report.csv")
    assert sorted(table["experiment"]) == sorted(available)
    for png in ("memory_over_time.png", "memory_throughput.png"):
        assert (tmp_path / "report" / png).read_bytes()[:4] == b"\x89PNG"


def test_activation_checkpointing_recomputes_the_same_model(runs, tmp_path):
    workshop("run", "stage2", "--tiny", "--activation-checkpointing", "true", "--output-dir", tmp_path)
    r = json.loads((tmp_path / "results.json").read_text())
    plain = json.loads((runs / "stage2" / "results.json").read_text())
    assert r["config"]["activation_checkpointing"] and not plain["config"]["activation_checkpointing"]
    assert abs(r["train_loss"] - plain["train_loss"]) < (0.05 if GPU else 1e-4)


def test_micro_batches_sized_in_tokens(tmp_path):
    workshop(
        "run",
        "stage2",
        "--tiny",
        "--batching",
        "token_budget",
        "--max-tokens-per-micro-batch",
        "2048",
        "--gradient-accumulation-steps",
        "1",
        "--drop-attention-mask",
        "true",
        "--output-dir",
        tmp_path,
    )
    r = json.loads((tmp_path / "results.json").read_text())
    log = pd.read_csv(tmp_path / "train_log.csv")
    # 64 questions of ~280 tokens, 2,048 padded tokens a micro-batch: about 7 per step, some 10 steps an epoch
    assert 6 <= r["steps_per_epoch"] <= 14 and r["global_steps"] == 2 * r["steps_per_epoch"]
    assert r["global_batch_size"] == round(64 / r["steps_per_epoch"])
    assert (log["tokens"].dropna() <= 2048).all() and log["tokens"].sum() == 2 * r["data_stats"]["train"]["tokens"]
    assert r["eval_loss"][-1] < 8.3


def test_classic_recipe_pads_to_512(tmp_path):
    workshop("run", "stage2", "--tiny", "--recipe", "classic", "--max-steps", "2", "--output-dir", tmp_path)
    r = json.loads((tmp_path / "results.json").read_text())
    assert (r["recipe"], r["model"], r["loss_on"], r["padding"]) == (
        "classic",
        "bigscience/bloom-560m (tiny)",
        "all",
        "max_length",
    )
    assert r["global_steps"] == 2 and len(r["eval_loss"]) == 1


def test_bad_input_stops_with_a_fix_and_keeps_what_was_written(tmp_path, runs):
    p = workshop("run", "stage9", "--tiny", check=False)
    assert p.returncode == 2 and "stage2_offload" in p.stderr
    p = workshop("run", "stage2", "--tiny", "--train-file", tmp_path / "missing.json", check=False)
    assert p.returncode == 2 and "does not exist" in p.stderr and "To fix:" in p.stderr
    if not GPU:
        p = workshop("run", "stage2", check=False)  # no GPU, no --tiny
        assert p.returncode == 2 and "--tiny" in p.stderr
    done = runs / "stage2" / "results.json"
    before = done.read_text()
    p = workshop("run", "stage2", "--tiny", "--output-dir", done.parent, check=False)
    assert p.returncode == 2 and "--overwrite" in p.stderr and done.read_text() == before
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [{"id": "x", "question": "q?", "answers": []}]}]}]}'
    )
    out = tmp_path / "kept"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    p = workshop("run", "baseline", "--tiny", "--train-file", bad, "--output-dir", out, check=False)
    assert p.returncode == 2 and "answers: List should have at least 1 item" in p.stderr and "Traceback" not in p.stderr
    assert [f.name for f in out.iterdir()] == ["notes.txt"]


def test_under_a_launcher_rank_zero_writes_for_the_whole_world(tmp_path, runs):
    """torchrun with 2 CPU processes (gloo): batch sizes follow the world size, only rank 0 writes results."""
    import os
    import subprocess

    cpu = {"CUDA_VISIBLE_DEVICES": ""} if torch.cuda.device_count() < 2 else {}  # one rank per GPU, or the CPU
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "workshop_lib.cli",
            "run",
            "stage2",
            "--tiny",
            "--max-steps",
            "2",
            "--output-dir",
            tmp_path,
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=os.environ | cpu,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((tmp_path / "results.json").read_text())
    assert (r["world_size"], r["global_batch_size"], r["steps_per_epoch"]) == (
        2,
        32,
        2,
    )  # 4 token-budget micro-batches / 2 ranks
    assert (
        json.loads((tmp_path / "ds_config.json").read_text())["train_batch_size"]
        == 16 * 1 * 2
        == r["global_batch_size"]
    )
    assert (tmp_path / "memory.csv").exists() and (tmp_path / "memory.rank1.csv").exists()
    assert [m["rank"] for m in r["per_rank_memory"]] == [0, 1]
    assert all(m["host_peak_rss_mib"] > 100 for m in r["per_rank_memory"])
    # world sizes 1 and 2 side by side: `workshop report` adds the scaling table and plot
    p = workshop("report", runs / "stage2", tmp_path, "--out", tmp_path / "report")
    assert "Scaling across world sizes" in p.stdout
    scaling = pd.read_csv(tmp_path / "report" / "scaling.csv")
    assert list(scaling["GPUs"]) == [1, 2] and list(scaling["scaling efficiency"])[0] == "100%"
    assert (tmp_path / "report" / "scaling.png").read_bytes()[:4] == b"\x89PNG"


def test_a_failed_local_launch_names_the_cause_and_keeps_its_log(tmp_path):
    from workshop_lib import launch
    from workshop_lib.errors import WorkshopError

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "launch.log").write_text("an earlier launch\n")
    with pytest.raises(WorkshopError) as e:
        launch.run_local("stage9", 2, tmp_path / "x", env={"CUDA_VISIBLE_DEVICES": ""})
    first_lines = str(e.value).splitlines()[:3]
    assert any("Unknown experiment 'stage9'" in ln for ln in first_lines), first_lines
    log = (tmp_path / "x" / "launch.log").read_text()
    assert log.startswith("an earlier launch\n") and "--standalone --nproc_per_node 2" in log


@pytest.mark.parametrize("exp", list(EXPERIMENTS))
def test_the_saved_model_reloads_with_the_final_eval_loss(runs, exp):
    """OUTPUT_DIR/model loads with from_pretrained and scores the run's last eval loss, for every ZeRO stage
    (under ZeRO-3 and parameter offload too: the partitioned weights are gathered on save)."""
    d = runs / exp
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= {
        f.name for f in (d / "model").iterdir()
    }
    net, tok = evaluation.load_model(d)
    final = pd.read_csv(d / "train_log.csv")["eval_loss"].dropna().iloc[-1]
    reloaded = evaluation.eval_loss(net, tok, json.loads((d / "results.json").read_text())["config"])
    # CPU fp32: measured equal to 1e-6; a GPU run evaluates in bf16 autocast, the reload in fp32
    assert abs(reloaded - final) < (0.05 if GPU else 1e-5), (reloaded, final)


def test_export_turns_a_zero3_checkpoint_into_the_same_model(runs, tmp_path):
    """`workshop export` of the last ZeRO-3 (+ offload) checkpoint (step 8, the end) through DeepSpeed's
    zero_to_fp32 gives the weights the run saved at its end."""
    workshop("export", runs / "stage3_offload", tmp_path / "exported")
    assert not (tmp_path / "exported" / checkpoint.MANIFEST).exists()  # the checkpoint's manifest, not the model's
    a, _ = evaluation.load_model(tmp_path / "exported")
    b, _ = evaluation.load_model(runs / "stage3_offload")
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    # fp32 master weights either way on the CPU: exact; a GPU run's model/ holds its 16-bit copy
    assert max((sa[k] - sb[k]).abs().max().item() for k in sa) <= (1e-2 if GPU else 0.0)
    p = workshop("export", runs / "baseline", tmp_path / "no", check=False)
    assert p.returncode == 2 and "no ZeRO partitions" in p.stderr and not (tmp_path / "no").exists()


def test_a_killed_run_resumes_to_the_losses_of_an_uninterrupted_one(runs, tmp_path):
    """kill -9 after a few steps (a checkpoint every step), a half-written checkpoint after the last good one,
    a resume with another learning rate refused, then --resume: every step's loss and the eval losses of the
    uninterrupted stage2 run."""
    out, ckpts = tmp_path / "run", tmp_path / "run" / checkpoint.CHECKPOINTS
    args = ["run", "stage2", "--tiny", "--save-strategy", "steps", "--save-steps", "1", "--output-dir", out]
    proc = Workshop(*args)
    while proc.poll() is None and checkpoint.step_of(ckpts / "checkpoint-3") is None:  # complete: its manifest
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    complete, _ = checkpoint.find_checkpoints(out)
    last = complete[-1]
    n = checkpoint.step_of(last)
    assert 3 <= n < 8 and not (out / "results.json").exists()
    half = ckpts / f"checkpoint-{n + 1}"  # what a kill while the Trainer writes it leaves: all but its state
    shutil.copytree(last, half, dirs_exist_ok=True)
    (half / "trainer_state.json").write_text((last / "trainer_state.json").read_text()[:100])
    p = workshop(*args, "--resume", "--learning-rate", "0.002", check=False)
    assert p.returncode == 2 and "learning_rate 0.001 then, 0.002 now" in p.stderr and half.exists(), p.stderr
    p = workshop(*args, "--resume")
    assert f"Skipped {half}" in p.stdout and f"Resuming from {last} (step {n})" in p.stdout, p.stdout
    assert (out / f"memory.before-resume-at-step-{n}.csv").exists()  # the killed attempt's memory log, kept
    r, ref = (json.loads((d / "results.json").read_text()) for d in (out, runs / "stage2"))
    log, ref_log = (pd.read_csv(d / "train_log.csv") for d in (out, runs / "stage2"))
    assert list(log["step"]) == list(ref_log["step"])  # every step logged once, the evaluations at 4 and 8
    # CPU fp32: measured identical (same data order, RNG, Adam states); GPU kernels may differ in the last bits
    tol = 1e-3 if GPU else 1e-6
    assert (log[["loss", "eval_loss"]].fillna(0) - ref_log[["loss", "eval_loss"]].fillna(0)).abs().max().max() <= tol
    assert abs(r["train_loss"] - ref["train_loss"]) <= tol and r["global_steps"] == 8
    # notebook 03b's figures on this kill and resume: the checkpoint's real files, the step resumed from
    from workshop_lessons import fine_tuned

    final = checkpoint.find_checkpoints(out)[0][-1]  # the resumed run rotated `last` out (save_total_limit)
    files = fine_tuned.checkpoint_files(final, r["num_params"])
    size = fine_tuned.checkpoint_size(files, r["num_params"], r["precision"])
    big = files.sort_values("MiB").iloc[-1]
    assert size.largest_file == big.file and "optim_states" in big.file and "master weights" in size.largest_holds
    assert size.bytes_per_param == pytest.approx(files["bytes/param"].sum(), rel=1e-12)
    # fp32 master weights and Adam's two moments alone are 12 bytes/param
    assert size.largest_bytes_per_param >= 12 and size.bytes_per_param > size.largest_bytes_per_param
    # + the model's weights in the run's precision (fp32 on the CPU: 16; bf16 on a GPU: 14), small files on top
    assert size.expected_bytes_per_param == (16 if r["precision"] == "fp32" else 14) <= size.bytes_per_param
    res = fine_tuned.resume(n, r, ref)
    assert (res.resume_step, res.global_steps, res.steps_redone) == (n, 8, 8 - n) and res.verdict == "restored"
    assert res.eval_loss.band == fine_tuned.RESUME_TOLERANCE and res.eval_loss.unit == "nats"
    other = ref | {"eval_loss": ref["eval_loss"][:1]}  # a real eval loss of another step: the first evaluation
    assert abs(other["eval_loss"][-1] - r["eval_loss"][-1]) > 1e-3 * r["eval_loss"][-1]
    assert fine_tuned.resume(n, r, other).verdict == "diverged"


# Each stop point once (kill -9 during the evaluation and during the save resume from the same checkpoint as
# SIGINT there, and passed too; left out to keep CI's time)
@pytest.mark.parametrize(
    "when, sig, save, resume_step",
    [
        ("saved", "KILL", "steps", 4),
        ("evaluating", "INT", "steps", 2),
        ("saving", "INT", "steps", 2),
        ("step_end", "TERM", "no", 4),
    ],
)
def test_a_run_stopped_at_an_epochs_end_resumes_with_every_evaluation(runs, tmp_path, when, sig, save, resume_step):
    """Stopped at one exact moment of the first epoch's end (tests/faults.py: after its checkpoint, during its
    evaluation, during its checkpoint, SIGTERM at its last step), then --resume: the whole eval_loss list of
    the uninterrupted stage2 run, every step and evaluation logged once, the same losses."""
    out = tmp_path / "run"
    args = ["run", "stage2", "--tiny", "--save-strategy", save, "--save-steps", "2", "--output-dir", out]
    p = workshop(*args, fault=(when, sig), check=False)
    assert p.returncode == {"KILL": -9, "INT": 130, "TERM": rundir.EXIT_PREEMPTED}[sig], p.stderr[-2000:]
    assert not (out / "results.json").exists()
    p = workshop(*args, "--resume")
    assert f"checkpoint-{resume_step} (step {resume_step})" in p.stdout, p.stdout  # the stop point was hit
    r, ref = (json.loads((d / "results.json").read_text()) for d in (out, runs / "stage2"))
    assert len(ref["eval_loss"]) == 2  # results.json's 4 digits: equal on the CPU, within 1e-3 on a GPU
    assert r["eval_loss"] == (pytest.approx(ref["eval_loss"], abs=1e-3) if GPU else ref["eval_loss"])
    log, ref_log = (pd.read_csv(d / "train_log.csv") for d in (out, runs / "stage2"))
    assert list(log["step"]) == list(ref_log["step"])  # every step logged once, the evaluations at 4 and 8
    diff = (log[["loss", "eval_loss"]].fillna(0) - ref_log[["loss", "eval_loss"]].fillna(0)).abs().max().max()
    # CPU fp32: identical from the epoch's checkpoint; from checkpoint-2 the steps after it measured up to
    # 1.9e-6 apart (the 7th significant digit), the evaluations identical
    assert diff <= (1e-3 if GPU else 1e-5)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs of its own (root only: CI's test run is root), unmounted after the test."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", disk], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield disk
    subprocess.run(["umount", "-l", disk], check=True)


def test_eval_generates_answers_from_the_saved_model(runs, tmp_path):
    """`workshop eval` writes one prediction per question and their SQuAD scores; the run scored its model
    before and after training the same way (results.json em, f1)."""
    r = json.loads((runs / "stage2" / "results.json").read_text())
    run_preds = [json.loads(ln) for ln in (runs / "stage2" / "predictions.jsonl").read_text().splitlines()]
    assert len(run_preds) == 4 and all(0 <= r[k] <= 100 for k in ("em", "f1", "em_before", "f1_before"))
    # a count beyond the dev set: the fix names eval's own option, before the model is loaded
    p = workshop("eval", runs / "stage2", "--num-questions", 100000, "--output-dir", tmp_path / "x", check=False)
    assert p.returncode == 2 and "To fix: pass --num-questions " in p.stderr and "--num-eval" not in p.stderr, p.stderr
    p = workshop(
        "eval", runs / "stage2", "--eval-file", tmp_path / "dev.json", "--output-dir", tmp_path / "x", check=False
    )
    assert p.returncode == 2 and "--eval-file" in p.stderr.split("To fix:")[1] and "--train-file" not in p.stderr
    assert not (tmp_path / "x").exists()
    p = workshop("eval", runs / "stage2", "--num-questions", 6, "--output-dir", tmp_path)
    preds = [json.loads(ln) for ln in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 6 and set(preds[0]) == {"id", "question", "prediction", "answers"}
    assert preds[:4] == run_preds  # the same model, the same greedy answers
    scores = json.loads((tmp_path / "squad_scores.json").read_text())
    assert {k: scores[k] for k in ("em", "f1", "num_questions")} == evaluation.squad_scores(
        [x["prediction"] for x in preds], [x["answers"] for x in preds]
    )
    assert f"exact match {scores['em']:.2f}, F1 {scores['f1']:.2f} on 6" in p.stdout


def test_the_checkpoint_plan_predicts_a_zero3_checkpoints_size(runs):
    """Notebook 03b prints its checkpoints' size before writing them (`fine_tuned.checkpoint_plan`): 12 bytes per
    parameter of optimizer states and the weights in the training precision. The last stage3_offload checkpoint
    on disk, all files, against it (the small files: RNG states, schedule, tokenizer, zero_to_fp32.py)."""
    from workshop_lessons import fine_tuned

    r = json.loads((runs / "stage3_offload" / "results.json").read_text())
    last = checkpoint.find_checkpoints(runs / "stage3_offload")[0][-1]
    size = fine_tuned.checkpoint_size(
        fine_tuned.checkpoint_files(last, r["num_params"]), r["num_params"], r["precision"]
    )
    plan = fine_tuned.checkpoint_plan(r["num_params"], r["precision"], 24, 2)
    assert plan.bytes_per_param == (16 if r["precision"] == "fp32" else 14)
    assert plan.checkpoint_mib <= size.total_mib <= 1.1 * plan.checkpoint_mib


@pytest.mark.slow
def test_eval_report_and_export_onto_a_full_or_read_only_disk_end_in_one_message(runs, small_disk):
    """Each command that writes, onto a disk with no space left (a real tmpfs, filled) or a place that cannot be
    written: exit 2, one `To fix:`, no traceback, and the files already there untouched."""
    notes = small_disk / "notes.txt"
    notes.write_text("the user's own file\n")
    with open(small_disk / "filler", "wb", buffering=0) as f:  # fill the disk to its last byte
        try:
            while True:
                f.write(b"\0" * 2**16)
        except OSError:
            pass
    readonly = Path("/sys/workshop-x")  # sysfs refuses new files even to root (small_disk is root's only)
    for place, words in ((small_disk, "No space left on device"), (readonly, "cannot be written")):
        for args in (
            ["report", runs / "stage2", "--out", place / "report"],
            ["eval", runs / "stage2", "--num-questions", 2, "--output-dir", place / "eval"],
            ["export", runs / "stage3_offload", place / "exported"],
        ):
            p = workshop(*args, check=False)
            assert p.returncode == 2 and words in p.stderr, (args, p.stderr[-2000:])
            assert p.stderr.count("To fix:") == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert notes.read_text() == "the user's own file\n"
    assert not [f for f in small_disk.rglob("*tmp*")], list(small_disk.rglob("*"))


def test_report_writes_beside_the_runs_and_the_model_is_readable_like_its_other_files(runs, tmp_path):
    """`workshop report` without --out writes report/ beside the one run given or inside the folder of runs given,
    never into the current folder or a run's own; model.safetensors has the mode of the files beside it."""
    run = tmp_path / "runs" / "a"
    shutil.copytree(runs / "stage2", run, ignore=shutil.ignore_patterns("checkpoints", "model"))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    for given in (run, tmp_path / "runs"):
        workshop("report", given, cwd=elsewhere)
        assert (tmp_path / "runs" / "report" / "report.md").is_file()
        assert not (run / "report").exists() and not any(elsewhere.iterdir())
    model = runs / "stage2" / "model"
    assert (model / "model.safetensors").stat().st_mode & 0o777 == (model / "config.json").stat().st_mode & 0o777
