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
    assert capsys.readouterr().out.startswith("slurm/ is out of date for stage2.slurm. To fix: ")


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
