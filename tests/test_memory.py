import csv

import numpy as np
import torch

from workshop_lib.memory import MemorySampler, estimate_model_states


def test_sampler_sees_host_memory_grow_and_writes_csv(tmp_path):
    with MemorySampler(tmp_path / "memory.csv", interval_s=0.05) as mem:
        before = mem.sample()["host_rss_mib"]
        block = np.ones(300 * 2**20 // 8)  # 300 MiB, touched
        import time

        time.sleep(0.3)
        del block
    s = mem.summary()
    assert s["host_peak_rss_mib"] >= before + 250
    assert (s["gpu_peak_mib"] is None) == (not torch.cuda.is_available())
    rows = list(csv.DictReader((tmp_path / "memory.csv").open()))
    assert len(rows) >= 3 and list(rows[0]) == ["time_s", "gpu_used_mib", "torch_allocated_mib", "host_rss_mib",
                                                "gpu_util_pct"]


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
