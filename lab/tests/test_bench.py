"""The benchmark itself, on the CPU with the tiny model: its rows, the plain PyTorch ceiling, the table and plot; and
nothing written where it cannot run."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def bench(*args):
    return subprocess.run([sys.executable, "-m", "lab.bench", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, env=os.environ | {"HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
def test_bench_runs_rows_and_the_plain_pytorch_ceiling(tmp_path):
    p = bench("--tiny", "--max-steps", "3", "--out", tmp_path, "--only", "default ZeRO-2")
    assert p.returncode == 0, p.stderr[-3000:]
    table = pd.read_csv(tmp_path / "bench.csv")
    assert list(table["row"]) == ["default ZeRO-2", "plain PyTorch (ceiling)"]
    assert (table["steady tokens/s"] > 0).all() and "plain PyTorch" in (tmp_path / "bench.md").read_text()
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_without_a_gpu_refuses_before_writing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the benchmark runs")
    p = bench("--max-steps", "3", "--out", tmp_path / "out")
    assert p.returncode == 2 and "No CUDA GPU is visible" in p.stderr and "To fix:" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "out").exists()
