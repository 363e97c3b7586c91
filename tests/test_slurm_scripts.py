"""The single-GPU batch scripts, without a cluster: written by scripts/make_slurm.py from one template, one per
experiment of ds_config.EXPERIMENTS beside slurm/one_gpu.slurm, each with the #SBATCH lines where sbatch reads them.
tests/test_slurm.py submits them to a real cluster."""

import importlib.util
import subprocess
import sys
from pathlib import Path

from workshop_lib.ds_config import EXPERIMENTS

ROOT = Path(__file__).resolve().parent.parent
SLURM = ROOT / "slurm"


def make_slurm():
    spec = importlib.util.spec_from_file_location("make_slurm", ROOT / "scripts" / "make_slurm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_experiment_has_its_script_and_all_are_current():
    p = subprocess.run([sys.executable, "scripts/make_slurm.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert {f.stem for f in SLURM.glob("*.slurm")} == set(EXPERIMENTS) | {"one_gpu", "multi_gpu", "multi_node"}


def test_check_names_a_missing_or_changed_script_and_the_fix(tmp_path, monkeypatch, capsys):
    m = make_slurm()
    monkeypatch.setattr(m, "ROOT", tmp_path)
    (tmp_path / "slurm").mkdir()
    assert m.main(check=True) == 1
    assert "To fix: python scripts/make_slurm.py" in capsys.readouterr().out
    m.main(check=False)
    assert m.main(check=True) == 0
    (tmp_path / "slurm" / "stage2.slurm").write_text("#!/usr/bin/env bash\n")
    capsys.readouterr()
    assert m.main(check=True) == 1
    assert capsys.readouterr().out.startswith("slurm/stage2.slurm out of date. To fix: ")


def test_sbatch_reads_one_header_in_every_single_gpu_script():
    """sbatch takes #SBATCH lines only above the first command: all of them stand there, the same in every
    script but the job name, which is the script's (so runs/ and logs/ are named <experiment>-<job id>)."""
    headers = {}
    for name in ["one_gpu", *EXPERIMENTS]:
        lines = (SLURM / f"{name}.slurm").read_text().splitlines()
        first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
        sbatch = [line for line in lines if line.startswith("#SBATCH")]
        assert sbatch == [line for line in lines[:first_command] if line.startswith("#SBATCH")]
        assert sbatch[0] == f"#SBATCH --job-name={name}"
        headers[name] = sbatch[1:]
        assert "source slurm/common.sh" in lines[first_command:]
    assert all(h == headers["one_gpu"] for h in headers.values())
    assert {
        "#SBATCH --signal=B:USR1@120",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        "#SBATCH --output=logs/%x-%j.out",
    } <= set(headers["one_gpu"])


SMI = {  # nvidia-smi as a node may answer: a broken driver (its error on stdout, exit 9), one A100 in 2 MIG slices
    "broken": 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9',
    "mig": 'case "$*" in *query-gpu*) echo 0 ;; *) echo "GPU 0: NVIDIA A100 (UUID: GPU-1)"; '
    'echo "  MIG 3g.20gb     Device  0: (UUID: MIG-1)"; echo "  MIG 3g.20gb     Device  1: (UUID: MIG-2)" ;; esac',
}


def common_sh(tmp_path, smi: str, **env) -> subprocess.CompletedProcess:
    """slurm/common.sh sourced as a job's script does, on a node whose nvidia-smi is `SMI[smi]`; it echoes the
    processes per node it would start."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "nvidia-smi").write_text(f"#!/bin/sh\n{SMI[smi]}\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    job = {"SLURM_JOB_ID": "7", "SLURM_JOB_NAME": "stage2", "SLURM_SUBMIT_DIR": str(tmp_path)}
    job |= {
        "WORKSHOP_MASTER_ADDR": "127.0.0.1",
        "VIRTUAL_ENV": sys.prefix,
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
    }
    job["PATH"] = f"{bin_}:{Path(sys.executable).parent}:/usr/bin:/bin"
    script = f"source {SLURM / 'common.sh'}; echo NPROC=$NPROC_PER_NODE"
    return subprocess.run(["bash", "-c", script], env=job | env, capture_output=True, text=True, cwd=tmp_path)


def test_the_batch_scripts_count_devices_not_lines_and_refuse_bad_counts_before_torchrun(tmp_path):
    """A broken driver's error line is no GPU (the CPU processes asked for are used); MIG slices count as GPUs
    only where WORKSHOP_MIG=1 asks; a count or timeout that is no whole number >= 1 stops the job with one
    "To fix:" before anything starts."""
    assert "NPROC=2" in common_sh(tmp_path, "broken", WORKSHOP_CPU_PROCS_PER_NODE="2").stdout
    assert "NPROC=1" in common_sh(tmp_path, "mig").stdout
    assert "NPROC=2" in common_sh(tmp_path, "mig", WORKSHOP_MIG="1").stdout
    for name, value in [("WORKSHOP_CPU_PROCS_PER_NODE", "abc"), ("WORKSHOP_CPU_PROCS_PER_NODE", "0")] + [
        ("WORKSHOP_DIST_TIMEOUT_S", v) for v in ("abc", "0", "1e20")
    ]:
        p = common_sh(tmp_path, "broken", **{name: value})
        assert p.returncode == 2 and "NPROC" not in p.stdout, p.stdout + p.stderr
        assert f"{name}={value} is not a whole number" in p.stderr and p.stderr.count("To fix:") == 1, p.stderr


def test_a_quoted_tilde_in_the_batch_scripts_output_dir_is_the_home_folder(tmp_path):
    """WORKSHOP_OUTPUT_DIR="~/x" (a ~ the shell left) is $HOME/x for the job as for the run (config.resolve)."""
    p = common_sh(tmp_path, "broken", WORKSHOP_OUTPUT_DIR="~/runs/x")
    assert f"output {tmp_path}/runs/x" in p.stdout and not (tmp_path / "~").exists(), p.stdout + p.stderr


def test_a_generator_writes_through_no_link_and_refuses_a_folder_with_the_fix(tmp_path, capsys):
    """scripts/generated.py, which make_configs, make_slurm, make_course and make_timetable write through: a missing
    folder is made, a file that is no UTF-8 is stale (not a traceback), a link is replaced (its target untouched), and a
    folder where a file goes is refused with the fix, nothing written."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from generated import write_or_check

    files = {tmp_path / "configs" / name: f"{name}\n" for name in ("a.json", "b.json", "c.json")}
    assert write_or_check(files, tmp_path, True, "make") == 1  # configs/ missing: stale, nothing written
    assert not (tmp_path / "configs").exists()
    assert write_or_check(files, tmp_path, False, "make") == 0 and write_or_check(files, tmp_path, True, "make") == 0
    (tmp_path / "configs" / "a.json").write_bytes(b"\xff\xfe")
    (tmp_path / "theirs.json").write_text("theirs")
    (tmp_path / "configs" / "b.json").unlink()
    (tmp_path / "configs" / "b.json").symlink_to(tmp_path / "theirs.json")
    capsys.readouterr()
    assert write_or_check(files, tmp_path, True, "make") == 1
    assert "a.json, b.json. To fix: make" in capsys.readouterr().out
    assert write_or_check(files, tmp_path, False, "make") == 0
    assert (tmp_path / "theirs.json").read_text() == "theirs" and not (tmp_path / "configs" / "b.json").is_symlink()
    (tmp_path / "configs" / "c.json").unlink()
    (tmp_path / "configs" / "c.json").mkdir()
    (tmp_path / "configs" / "a.json").write_text("old")
    assert write_or_check(files, tmp_path, False, "make") == 2
    assert "configs/c.json: a folder where a generated file goes" in capsys.readouterr().out
    assert (tmp_path / "configs" / "a.json").read_text() == "old"
