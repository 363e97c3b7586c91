"""The measurement protocol (docs/measurement.md): its committed repeat tables agree with their runs, the one-GPU
ZeRO-2 band meets the protocol's goal, and the protocol replays on the CPU with the tiny model."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PROTOCOL = ROOT / "lab" / "findings" / "h200" / "protocol"
sys.path.insert(0, str(ROOT / "scripts"))
import repeats  # noqa: E402


def _figures(folder: Path, spec: str) -> list[float]:
    """Steady tokens/s of every finished repeat of configuration `spec` in `folder`, from results.json."""
    return [
        json.loads((c.parent / "results.json").read_text())["steady_train_tokens_per_second"]
        for c in folder.glob("*-r*/configuration.txt")
        if c.read_text().strip() == spec
    ]


@pytest.mark.parametrize("folder", ["repeats", "levers"])
def test_each_committed_table_is_its_runs(folder):
    cmd = [sys.executable, "scripts/repeats.py", str(PROTOCOL / folder), "--baseline", "stage2:40", "--check"]
    assert subprocess.run(cmd, cwd=ROOT).returncode == 0


def test_the_repeats_are_fresh_40_step_processes_on_one_gpu():
    runs = [json.loads(p.read_text()) for p in (PROTOCOL / "repeats").glob("*/results.json")]
    assert len(runs) == 6 and {r["device"] for r in runs} == {"NVIDIA H200"}
    assert {r["global_steps"] for r in runs} == {40} and {r["world_size"] for r in runs} == {1}


def test_zero2_meets_the_band_goal_and_zero3_holds_one_slow_process():
    zero2, zero3 = _figures(PROTOCOL / "repeats", "stage2:40"), _figures(PROTOCOL / "repeats", "stage3:40")
    assert len(zero2) == len(zero3) == 3
    assert repeats.band(zero2) <= 0.05
    # ZeRO-3's band misses the goal because of one process: without it, the other two agree within it
    assert repeats.band(zero3) > 0.05 and repeats.band(sorted(zero3)[1:]) <= 0.05


def test_larger_micro_batches_do_not_speed_zero3_up():
    """The levers table's first finding: ZeRO-3 at 49,152 tokens per micro-batch is no faster than at 32,768."""
    large = _figures(PROTOCOL / "levers", "stage3:40:--max-tokens-per-micro-batch,49152")
    default = _figures(PROTOCOL / "repeats", "stage3:40") + _figures(PROTOCOL / "levers", "stage3:40")
    assert max(large) < max(default)


def test_the_band_is_the_largest_difference_between_two_repeats():
    assert repeats.band([90.0, 110.0, 100.0]) == pytest.approx(0.2)


@pytest.mark.slow
def test_the_protocol_replays_on_the_cpu(tmp_path):
    """Two fresh tiny processes of one configuration: the table gives their figures, median and band."""
    cmd = [sys.executable, "scripts/repeats.py", str(tmp_path), "--runs", "baseline:3", "--repeats", "2", "--"]
    subprocess.run([*cmd, "--tiny"], cwd=ROOT, check=True, capture_output=True)
    figures = _figures(tmp_path, "baseline:3")
    assert len(figures) == 2
    table = (tmp_path / "README.md").read_text()
    assert f"±{repeats.band(figures):.1%}" in table and f"{figures[0]:,.0f}" in table
    assert subprocess.run([*cmd[:3], "--check"], cwd=ROOT).returncode == 0
