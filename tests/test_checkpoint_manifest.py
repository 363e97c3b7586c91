"""Damaged checkpoints and the messages of interrupted runs: each checkpoint's manifest (`checkpoint.MANIFEST`)
finds a file deleted, emptied, cut short or changed; `--resume` sets such a checkpoint aside and continues
from the older complete one, or refuses when none is left; `workshop export` refuses it and names the complete
one; SIGINT and SIGTERM name the checkpoints kept and the command that resumes.

The damage probes copy the session's tiny stage2 run (two epochs, a checkpoint after each: checkpoint-4 and
checkpoint-8) and remove its results.json: a run killed after its last checkpoint, before it finished."""

import json
import os
import pickle
import shlex
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conftest import HANG_S, Workshop, workshop
from workshop_lib import checkpoint, rundir
from workshop_lib.config import RunConfig, parse_run_args
from workshop_lib.errors import WorkshopError


def fake_checkpoint(run: Path, step: int) -> Path:
    """A checkpoint-`step` directory of small files in the Trainer's layout, with its manifest."""
    ckpt = run / checkpoint.CHECKPOINTS / f"checkpoint-{step}"
    (ckpt / f"global_step{step}").mkdir(parents=True)
    torch.save({"w": torch.zeros(4)}, ckpt / f"global_step{step}" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    checkpoint.write_manifest(ckpt)
    return ckpt


def test_the_manifest_finds_each_kind_of_damage(tmp_path):
    ckpt = fake_checkpoint(tmp_path, 4)
    shard = ckpt / "global_step4" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    manifest = json.loads((ckpt / checkpoint.MANIFEST).read_text())
    size = shard.stat().st_size
    assert manifest["step"] == 4 and manifest["files"][f"global_step4/{shard.name}"]["bytes"] == size
    assert checkpoint.why_incomplete(ckpt) is None and checkpoint.step_of(ckpt) == 4
    assert checkpoint.find_checkpoints(tmp_path) == ([ckpt], [])
    whole = shard.read_bytes()
    shard.write_bytes(whole[:500])
    assert checkpoint.why_incomplete(ckpt) == f"global_step4/{shard.name} holds 500 bytes, {size:,} when written"
    shard.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))  # same size, other bytes: the SHA-256 of a small file
    assert "changed since it was written" in checkpoint.why_incomplete(ckpt)
    shard.unlink()
    assert checkpoint.why_incomplete(ckpt) == f"global_step4/{shard.name} is missing"
    assert checkpoint.step_of(ckpt) is None and checkpoint.find_checkpoints(tmp_path) == ([], [ckpt])
    (ckpt / checkpoint.MANIFEST).write_text('{"step": 4, "fi')  # cut short
    assert "is unreadable" in checkpoint.why_incomplete(ckpt)
    (ckpt / checkpoint.MANIFEST).unlink()  # finished by the Trainer (its state of step 4), no manifest
    assert "no workshop_manifest.json" in checkpoint.why_incomplete(ckpt)
    (ckpt / "trainer_state.json").unlink()
    assert "interrupted while being written" in checkpoint.why_incomplete(ckpt)


class Planted:
    """Unpickling this calls os.system: what a checkpoint handed over by someone else could hold."""

    def __reduce__(self):
        import os

        return os.system, ("touch planted-ran",)


def load_as_deepspeed(f):
    """`f` loaded as DeepSpeed 0.19.8 loads its states (torch.load(weights_only=False)), in `weights_only_loads`."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    with checkpoint.weights_only_loads():
        return TorchCheckpointEngine().load(str(f))


def test_a_checkpoint_whose_pickle_names_code_is_never_loaded(tmp_path, monkeypatch):
    """A pickle that names a callable (here os.system) in DeepSpeed's states, its manifest rewritten to match: a load
    in `weights_only_loads` (torch's own weights-only refusal) stops with one WorkshopError naming the file and the
    callable, and nothing ran. What DeepSpeed and the Trainer pickle themselves (its loss scaler, the ZeRO stage,
    numpy RNG states) loads (`checkpoint.SAFE_GLOBALS`)."""
    import numpy as np
    from deepspeed.runtime.zero.config import ZeroStageEnum

    monkeypatch.chdir(tmp_path)
    ckpt = fake_checkpoint(tmp_path, 4)
    shard = ckpt / "global_step4" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"zero_stage": ZeroStageEnum.gradients, "w": torch.ones(2)}, shard)
    torch.save({"numpy": np.random.get_state()}, ckpt / "rng_state.pth")
    checkpoint.write_manifest(ckpt)
    assert checkpoint.why_incomplete(ckpt) is None
    assert load_as_deepspeed(shard)["zero_stage"] == ZeroStageEnum.gradients and load_as_deepspeed(
        ckpt / "rng_state.pth"
    )
    torch.save({"optimizer_state_dict": Planted()}, shard)
    checkpoint.write_manifest(ckpt)  # whoever planted it can rewrite the manifest too
    with pytest.raises(
        WorkshopError,
        match=f"global_step4/{shard.name} names code that loading it would run "
        r"\(posix.system\).*\nTo fix: ",
    ):
        load_as_deepspeed(shard)
    assert not (tmp_path / "planted-ran").exists() and shard.exists()
    # every pickle a checkpoint holds, at any depth, and the folders its `latest` tags name (issue 38)
    torch.save({"w": torch.ones(2)}, shard)
    for planted in (
        "global_step4/mp_rank_00_model_states.pt",
        "rng_state_1.pth",
        "global_step4/zero/lm_head.weight/fp32.pt",
    ):
        (ckpt / planted).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"w": Planted()}, ckpt / planted)
        with pytest.raises(WorkshopError, match=f"{planted} names code that loading it would run"):
            load_as_deepspeed(ckpt / planted)
        (ckpt / planted).unlink()
    (ckpt / "latest").write_text("../../elsewhere")
    checkpoint.write_manifest(ckpt)
    assert checkpoint.why_incomplete(ckpt) == "latest names '../../elsewhere', a folder outside the checkpoint"
    (ckpt / "latest").write_text("global_step4")
    checkpoint.write_manifest(ckpt)
    assert checkpoint.why_incomplete(ckpt) is None and not (tmp_path / "planted-ran").exists()


def test_deepspeeds_own_loads_run_weights_only_within_weights_only_loads(tmp_path, monkeypatch):
    """DeepSpeed 0.19.8's checkpoint engine calls torch.load(weights_only=False). Within `checkpoint.weights_only_loads`
    (around a resume's training and the export's zero_to_fp32) the same call loads its states
    (DeepSpeed's ZeRO stage, numpy's RNG state: SAFE_GLOBALS) and refuses a pickle that names code, running nothing,
    by torch's own switch (TORCH_FORCE_WEIGHTS_ONLY_LOAD): torch.load is never replaced, and the switch is off after."""
    import numpy as np
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.zero.config import ZeroStageEnum

    monkeypatch.chdir(tmp_path)
    torch.save({"zero_stage": ZeroStageEnum.gradients, "rng": np.random.get_state(), "w": torch.ones(2)}, "ok.pt")
    torch.save({"w": Planted()}, "planted.pt")
    load, engine = torch.load, TorchCheckpointEngine()
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # a user's opposite switch: set aside, then back
    with checkpoint.weights_only_loads():
        assert engine.load("ok.pt")["zero_stage"] == ZeroStageEnum.gradients
        with checkpoint.weights_only_loads():  # a block within the block: the outer's globals stay
            pass
        assert engine.load("ok.pt")["zero_stage"] == ZeroStageEnum.gradients  # the outer block's globals stay
        with pytest.raises(pickle.UnpicklingError, match="posix.system"):
            engine.load("planted.pt")
        assert torch.load is load
    assert torch.load is load and not (tmp_path / "planted-ran").exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ and os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"


def test_workshop_export_of_a_planted_checkpoint_runs_nothing_and_writes_nothing(tmp_path):
    """`workshop export` as a user runs it on a run folder handed over with a pickle planted in its model states,
    the manifest rewritten to match: exit 2, one message naming the file and the callable, the fix, nothing run
    and nothing written."""
    from workshop_lib.model import tiny_config

    ckpt = fake_checkpoint(tmp_path / "run", 4)
    (ckpt / "latest").write_text("global_step4")  # a ZeRO checkpoint, which zero_to_fp32 loads (model states first)
    tiny_config("Qwen/Qwen3-0.6B", 64).save_pretrained(ckpt)
    torch.save({"module": Planted()}, ckpt / "global_step4" / "mp_rank_00_model_states.pt")
    checkpoint.write_manifest(ckpt)
    p = workshop("export", tmp_path / "run", tmp_path / "exported", cwd=tmp_path, check=False)
    assert p.returncode == 2 and "global_step4/mp_rank_00_model_states.pt names code" in p.stderr, p.stderr
    assert "To fix:" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "planted-ran").exists() and not (tmp_path / "exported").exists()


class EnumByName:
    """An enum member pickled as Python 3.11's early releases pickle it: getattr(class, name)."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        from deepspeed.runtime.zero.config import ZeroStageEnum

        return getattr, (ZeroStageEnum, self.name)


def test_an_enum_pickled_by_name_loads_and_any_other_getattr_is_refused(tmp_path):
    """Python 3.11.2 (Debian bookworm's) pickles DeepSpeed's ZeroStageEnum as getattr(ZeroStageEnum, "gradients"):
    such a checkpoint is the workshop's own and loads; getattr to anything but an enum member is refused."""
    ckpt = fake_checkpoint(tmp_path, 4)
    shard = ckpt / "global_step4" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"zero_stage": EnumByName("gradients"), "w": torch.ones(2)}, shard)
    checkpoint.write_manifest(ckpt)
    assert load_as_deepspeed(shard)["zero_stage"].name == "gradients"
    torch.save({"zero_stage": EnumByName("__init__")}, shard)
    with pytest.raises(WorkshopError, match=r"names code that loading it would run \(builtins.getattr\)"):
        load_as_deepspeed(shard)


def test_resume_refuses_only_damage_with_no_complete_checkpoint_left(tmp_path):
    """Damaged and nothing complete: refused, nothing moved. Only interrupted while written: a resume starts
    from step 0. Set aside: moved out of checkpoints/ (the Trainer's rotation globs checkpoint-*), never over
    an earlier one."""
    checkpoint.check_resumable(tmp_path)  # no checkpoints at all: step 0
    half = tmp_path / checkpoint.CHECKPOINTS / "checkpoint-2"
    half.mkdir(parents=True)
    checkpoint.check_resumable(tmp_path)
    ckpt = fake_checkpoint(tmp_path, 4)
    (ckpt / "trainer_state.json").write_text("{}")
    with pytest.raises(
        WorkshopError,
        match=r"no complete checkpoint to resume from: .*checkpoint-4 is damaged: "
        r"trainer_state.json .*Nothing was changed.\nTo fix: restore .* --overwrite",
    ):
        checkpoint.check_resumable(tmp_path)
    assert ckpt.is_dir() and half.is_dir()
    first = checkpoint.set_aside(ckpt)
    ckpt.mkdir()
    assert first == tmp_path / rundir.DAMAGED / "checkpoint-4"
    assert checkpoint.set_aside(ckpt) == tmp_path / rundir.DAMAGED / "checkpoint-4.2" and first.is_dir()


def test_the_suggested_command_repeats_the_settings_given(tmp_path):
    """`run_command` parses back to the settings given, --overwrite replaced by --resume."""
    asked = RunConfig(
        "stage2",
        recipe="classic",
        tiny=True,
        max_steps=100,
        learning_rate=2e-3,
        save_model=False,
        drop_attention_mask=False,
        ds_config=["zero_optimization.overlap_comm=false", "gradient_clipping=1.0"],
        overwrite=True,
    )
    cmd = checkpoint.run_command(asked, tmp_path / "my run", "--resume")
    assert cmd.startswith("workshop run stage2 ") and "--overwrite" not in cmd
    again = parse_run_args(shlex.split(cmd)[2:])
    assert again == replace(asked, overwrite=False, resume=True, output_dir=str(tmp_path / "my run"))


def _tail(p) -> str:
    return f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"


def _one_error(p, *names) -> str:
    """The single `workshop: error:` message of a failed command (no traceback), holding each of `names`."""
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("To fix:") == 1, _tail(p)
    assert all(str(n) in p.stderr for n in names), _tail(p)
    return p.stderr


def _files(path: Path) -> dict:
    return {str(f.relative_to(path)): f.stat().st_size for f in sorted(path.rglob("*")) if f.is_file()}


@pytest.fixture
def unfinished(tiny_runs, tmp_path) -> Path:
    """A copy of the session's tiny stage2 run without results.json: unfinished, two complete checkpoints."""
    run = tmp_path / "run"
    shutil.copytree(tiny_runs / "stage2", run)
    (run / "results.json").unlink()
    ckpts = run / checkpoint.CHECKPOINTS
    assert checkpoint.find_checkpoints(run) == ([ckpts / "checkpoint-4", ckpts / "checkpoint-8"], [])
    return run


DAMAGE = {  # what each probe does to checkpoint-8, and the file the message must name
    "deleted optimizer shard": ("global_step8/zero_pp_rank_0_mp_rank_00_optim_states.pt", lambda f: f.unlink()),
    "zero-byte optimizer shard": (
        "global_step8/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        lambda f: f.write_bytes(b""),
    ),
    "truncated model states": (
        "global_step8/mp_rank_00_model_states.pt",
        lambda f: f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]),
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resume_sets_a_damaged_checkpoint_aside_and_continues_from_the_older_one(unfinished, tiny_runs, damage):
    rel, do = DAMAGE[damage]
    ckpts = unfinished / checkpoint.CHECKPOINTS
    do(ckpts / "checkpoint-8" / rel)
    p = workshop("run", "stage2", "--tiny", "--output-dir", unfinished, "--resume", check=False)
    assert p.returncode == 0 and "Traceback" not in p.stderr, _tail(p)
    skipped = [ln for ln in p.stdout.splitlines() if ln.startswith("Skipped")]
    aside = unfinished / rundir.DAMAGED / "checkpoint-8"
    assert len(skipped) == 1 and str(ckpts / "checkpoint-8") in skipped[0] and rel in skipped[0], p.stdout
    assert f"moved to {aside}" in skipped[0] and f"Resuming from {ckpts / 'checkpoint-4'} (step 4)." in p.stdout
    assert checkpoint.why_incomplete(aside).startswith(rel)  # kept as it was found
    r, ref = (json.loads((d / "results.json").read_text()) for d in (unfinished, tiny_runs / "stage2"))
    assert r["global_steps"] == 8 and r["eval_loss"] == pytest.approx(ref["eval_loss"], abs=1e-3)
    assert checkpoint.find_checkpoints(unfinished) == ([ckpts / "checkpoint-4", ckpts / "checkpoint-8"], [])
    assert not (unfinished / rundir.MARKER).exists()


def test_resume_with_every_checkpoint_damaged_is_refused_and_changes_nothing(unfinished):
    ckpts = unfinished / checkpoint.CHECKPOINTS
    (ckpts / "checkpoint-8" / DAMAGE["deleted optimizer shard"][0]).unlink()
    (ckpts / "checkpoint-4" / "global_step4" / "mp_rank_00_model_states.pt").write_bytes(b"")
    before = _files(unfinished)
    p = workshop("run", "stage2", "--tiny", "--output-dir", unfinished, "--resume", check=False)
    err = _one_error(p, ckpts / "checkpoint-4", ckpts / "checkpoint-8", "--overwrite")
    assert "holds no complete checkpoint to resume from" in err
    assert _files(unfinished) == before


def test_export_refuses_a_damaged_checkpoint_and_names_the_complete_one(unfinished, tmp_path):
    ckpts = unfinished / checkpoint.CHECKPOINTS
    (ckpts / "checkpoint-8" / DAMAGE["deleted optimizer shard"][0]).unlink()
    before = _files(unfinished)
    for source in (ckpts / "checkpoint-8", unfinished):  # the checkpoint, or the run (its newest checkpoint)
        p = workshop("export", source, tmp_path / "out", check=False)
        err = _one_error(p, ckpts / "checkpoint-8", f"use {ckpts / 'checkpoint-4'}", "optim_states.pt is missing")
        assert "no ZeRO partitions" not in err and not (tmp_path / "out").exists()
    assert _files(unfinished) == before  # export only reads
    workshop("export", ckpts / "checkpoint-4", tmp_path / "out")  # the fix works
    assert (tmp_path / "out" / "model.safetensors").is_file()


def _wait(until, proc, timeout=HANG_S):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if until():
            return
        time.sleep(0.1)
    raise AssertionError(f"never happened: {proc.communicate()}")


def _steps(out: Path) -> list[int]:
    """The steps train_log.csv holds so far (a line being written is left out)."""
    log = out / "train_log.csv"
    steps = [ln.split(",")[0] for ln in log.read_text().splitlines()[1:]] if log.exists() else []
    return [int(s) for s in steps if s.isdigit()]


def _trains_past(out: Path, step: int, proc) -> bool:
    """True once `proc` claimed `out` (the marker holds its pid), rewrote train_log.csv after that (the
    Trainer began: the killed attempt's rows past its checkpoint dropped) and logged a step past `step`."""
    marker, log = out / rundir.MARKER, out / "train_log.csv"
    if not (marker.exists() and json.loads(marker.read_text())["pid"] == proc.pid):
        return False
    return log.stat().st_mtime_ns > marker.stat().st_mtime_ns and max(_steps(out), default=0) > step


def _message(proc, code) -> str:
    stdout, stderr = proc.communicate(timeout=HANG_S)
    assert proc.returncode == code and "Traceback" not in stderr, stderr[-3000:]
    lines = [ln for ln in stderr.splitlines() if ln.startswith("workshop:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0], stdout


@pytest.mark.slow
def test_sigint_and_sigterm_name_the_checkpoints_kept_and_the_resume_command(tmp_path):
    """SIGINT without a checkpoint: says so, and the --overwrite command. SIGINT after checkpoints: names
    each complete one (path, step) and the --resume command; that command resumes, and its SIGTERM names the
    checkpoint it saved on the way out."""
    out = tmp_path / "none"
    proc = Workshop(
        "run", "baseline", "--tiny", "--max-steps", 100000, "--save-strategy", "no", "--output-dir", out, cwd=tmp_path
    )
    _wait(lambda: _steps(out), proc)
    proc.send_signal(signal.SIGINT)
    line, _ = _message(proc, 130)
    assert "kept no checkpoint" in line and line.endswith(
        f"To start again: workshop run baseline --tiny true --max-steps 100000 --save-strategy no --output-dir {out} "
        "--overwrite"
    )

    out = tmp_path / "run"
    proc = Workshop("run", "baseline", "--tiny", "--max-steps", 100000, "--output-dir", out, cwd=tmp_path)
    _wait(lambda: checkpoint.step_of(out / checkpoint.CHECKPOINTS / "checkpoint-4"), proc)
    proc.send_signal(signal.SIGINT)
    line, _ = _message(proc, 130)
    kept = checkpoint.find_checkpoints(out)[0]
    last = checkpoint.step_of(kept[-1])
    assert line.startswith("workshop: stopped by SIGINT at step") and kept
    assert all(f"{p} (step {checkpoint.step_of(p)})" in line for p in kept), line
    cmd = line.split(f"To continue from step {last}: ")[1]
    assert cmd == f"workshop run baseline --tiny true --max-steps 100000 --output-dir {out} --resume"

    proc = Workshop(*shlex.split(cmd)[1:], cwd=tmp_path)  # the command as printed
    _wait(lambda: _trains_past(out, last, proc), proc)
    proc.send_signal(signal.SIGTERM)
    line, stdout = _message(proc, rundir.EXIT_PREEMPTED)
    assert f"Resuming from {kept[-1]} (step {last})." in stdout
    step = json.loads((out / rundir.MARKER).read_text())["step"]
    saved = out / checkpoint.CHECKPOINTS / f"checkpoint-{step}"
    assert step > last and checkpoint.find_checkpoints(out)[0][-1] == saved
    assert f"{saved} (step {step})" in line and line.endswith(f"--output-dir {out} --resume")


def test_export_refuses_a_checkpoint_whose_architecture_needs_its_own_code(tmp_path):
    """A checkpoint whose config.json names an architecture transformers does not have (auto_map: the model's own
    Python code): `workshop export` refuses it before loading anything, and writes nothing."""
    ckpt = fake_checkpoint(tmp_path, 4)
    (ckpt / "latest").write_text("global_step4")
    (ckpt / "config.json").write_text(
        json.dumps({"model_type": "my_qwen", "auto_map": {"AutoModelForCausalLM": "modeling_my_qwen.MyQwen"}})
    )
    checkpoint.write_manifest(ckpt)
    with pytest.raises(WorkshopError, match=r"'my_qwen' model, .*never runs downloaded code"):
        checkpoint.export(ckpt, tmp_path / "exported")
    assert not (tmp_path / "exported").exists()
