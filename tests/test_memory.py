import csv
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from workshop_lib import results
from workshop_lib.memory import MemorySampler, estimate_model_states


def sampled(mem, n=3):
    """Wait until the sampler's thread has taken `n` more samples: a fixed sleep is not enough on a loaded machine,
    where the thread may not run at all within it."""
    want = len(mem.rows) + n
    while len(mem.rows) < want:
        time.sleep(0.05)


def test_sampler_sees_host_memory_grow_and_writes_csv(tmp_path):
    with MemorySampler(tmp_path / "memory.csv", interval_s=0.05) as mem:
        before = mem.sample()["host_rss_mib"]
        block = np.ones(300 * 2**20 // 8)  # 300 MiB, touched
        sampled(mem)
        del block
    s = mem.summary()
    assert s["host_peak_rss_mib"] >= before + 250
    assert (s["gpu_peak_mib"] is None) == (not torch.cuda.is_available())
    rows = list(csv.DictReader((tmp_path / "memory.csv").open()))
    assert len(rows) >= 3 and list(rows[0]) == [
        "time_s",
        "gpu_used_mib",
        "torch_allocated_mib",
        "host_rss_mib",
        "gpu_util_pct",
    ]


def test_deepspeed_estimates_follow_the_zero_arithmetic():
    n = 596_049_920  # Qwen3-0.6B
    mib = 2**20
    s0 = estimate_model_states(n, 155_582_464, 0, num_gpus_per_node=4)["estimated_model_states_gpu_mib"]
    s2 = estimate_model_states(n, 155_582_464, 2, num_gpus_per_node=4)["estimated_model_states_gpu_mib"]
    s3 = estimate_model_states(n, 155_582_464, 3, num_gpus_per_node=4)["estimated_model_states_gpu_mib"]
    assert abs(s0 - 20 * n / mib) < 1  # stage 0 partitions nothing: 2 + 18 bytes/param
    assert abs(s2 - (2 * n + 18 * n / 4) / mib) < 1
    assert s3 < s2 < s0
    off = estimate_model_states(n, 155_582_464, 3, True, True)
    assert off["estimated_model_states_gpu_mib"] < 1000 and off["estimated_model_states_cpu_mib"] > 10_000


def test_the_trainer_alone_is_estimated_at_16_bytes_per_parameter():
    """No DeepSpeed: fp32 weights, fp32 gradients and AdamW's two moments, 4 + 4 + 8 bytes/param, all on the GPU."""
    n = 596_049_920
    e = estimate_model_states(n, 155_582_464, None)
    assert abs(e["estimated_model_states_gpu_mib"] - 16 * n / 2**20) < 0.1 and e["estimated_model_states_cpu_mib"] == 0
    assert "16 bytes/param" in e["estimator"]


def test_phases_split_setup_from_training(tmp_path):
    """Peaks are those of the training window: memory freed before "train_begin" does not count."""
    with MemorySampler(tmp_path / "memory.csv", interval_s=0.05) as mem:
        block = np.ones(300 * 2**20 // 8)  # set-up: 300 MiB, touched, then freed
        sampled(mem)
        del block
        sampled(mem)
        mem.mark("train_begin")
        sampled(mem)
        mem.mark("states")
        mem.mark("train_end")
        time.sleep(0.1)
    s = mem.summary()
    setup_peak = max(r["host_rss_mib"] for r in mem.rows if r["time_s"] < s["train_begin_s"])
    assert s["host_peak_rss_mib"] < setup_peak - 200
    assert s["setup_seconds"] == s["train_begin_s"] < s["train_end_s"] and s["host_states_rss_mib"] > 0


def test_the_memory_figure_draws_every_run_within_its_panel():
    """Issue 61, item 11: the panels share a y-scale; each panel's `set_ylim(bottom=0)` froze it at the first run's
    top, so a later run's curves ran above its panel (empty panels in 02 and 03). Every visible panel of a run with
    memory samples draws a line with points inside its limits, and no point beyond them: on the GPU reference runs
    (GPU curves), in either order, and on the same runs without their GPU figures (host RSS, as on a CPU)."""
    df = results.load_results([Path(__file__).parent.parent / "workshop_lessons/reference/h100/course/repeat"])
    assert len(df) >= 4
    for runs in (df, df.iloc[::-1], df.drop(columns=["gpu_peak_mib"])):
        fig = results.plot_memory_over_time(runs)
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert len(panels) == len(runs)
        for ax in panels:
            (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
            points = [(x, y) for line in ax.get_lines() for x, y in line.get_xydata() if np.isfinite(y)]
            assert points, ax.get_title()
            assert all(x0 <= x <= x1 and y0 <= y <= y1 for x, y in points), (ax.get_title(), (y0, y1))
        plt.close(fig)
