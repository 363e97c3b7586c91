"""Memory: a background sampler writing a CSV time series, its summary, and DeepSpeed's estimate
(introduced in `01_baseline`; the estimate in `02_zero_stages`).

Three views of GPU memory, from the outside in:
- `gpu_used_mib`: what NVML (`pynvml`, the library behind nvidia-smi) reports as used on this rank's GPU:
  everything the CUDA context, PyTorch's caching allocator and any other process hold. What decides OOM.
- `torch_allocated_mib`: bytes in live PyTorch tensors (`torch.cuda.memory_allocated`), below the cache.
- `gpu_peak_allocated_mib`: `torch.cuda.max_memory_allocated`, the exact peak of the above between samples.
Host memory is this process's resident set size (`psutil`), in MiB: with offload, where the optimizer lives.
GPU utilisation is NVML's: the percentage of the last sample period in which a kernel ran on the GPU.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from pathlib import Path

import psutil
import torch

MiB = 2**20
FIELDS = ["time_s", "gpu_used_mib", "torch_allocated_mib", "host_rss_mib", "gpu_util_pct"]


def _nvml_handle(local_device: int):
    """NVML handle of torch's cuda:local_device (NVML ignores CUDA_VISIBLE_DEVICES, so map through it)."""
    import pynvml

    pynvml.nvmlInit()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if local_device < len(ids):
            v = ids[local_device]
            return (pynvml.nvmlDeviceGetHandleByUUID(v) if not v.isdigit()
                    else pynvml.nvmlDeviceGetHandleByIndex(int(v)))
    return pynvml.nvmlDeviceGetHandleByIndex(local_device)


class MemorySampler:
    """Samples GPU and host memory every `interval_s` seconds in a daemon thread, appending to a CSV.

    Use as a context manager around the work to measure::

        with MemorySampler("runs/x/memory.csv") as mem:
            trainer.train()
        mem.summary()  # {"gpu_peak_mib": ..., "gpu_mean_mib": ..., ...}

    CSV columns: time_s (since `t0`, the perf_counter at entry), gpu_used_mib (NVML), torch_allocated_mib,
    host_rss_mib, gpu_util_pct (NVML); GPU columns are empty without a GPU. Each row is flushed as written, so a crash keeps everything sampled so far.
    """

    def __init__(self, csv_path: str | os.PathLike, interval_s: float = 0.2, device: int | None = None):
        self.path, self.interval_s = Path(csv_path), interval_s
        self.gpu = torch.cuda.is_available()
        self.device = torch.cuda.current_device() if (self.gpu and device is None) else device
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._proc = psutil.Process()

    def sample(self) -> dict:
        """One row of readings (MiB), taken now."""
        rss = self._proc.memory_info().rss  # this rank alone: not the compilers of a JIT op build
        row = {"time_s": round(time.perf_counter() - self._t0, 3), "gpu_used_mib": None,
               "torch_allocated_mib": None, "host_rss_mib": round(rss / MiB, 1), "gpu_util_pct": None}
        if self.gpu:
            import pynvml

            row["gpu_used_mib"] = round(pynvml.nvmlDeviceGetMemoryInfo(self._handle).used / MiB, 1)
            row["torch_allocated_mib"] = round(torch.cuda.memory_allocated(self.device) / MiB, 1)
            row["gpu_util_pct"] = pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
        return row

    def _run(self):
        with self.path.open("w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            while True:
                row = self.sample()
                self.rows.append(row)
                w.writerow(row)
                f.flush()
                if self._stop.wait(self.interval_s):
                    break
            row = self.sample()  # one last reading at stop
            self.rows.append(row)
            w.writerow(row)

    def __enter__(self):
        self.t0 = self._t0 = time.perf_counter()
        if self.gpu:
            self._handle = _nvml_handle(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, daemon=True, name="memory-sampler")
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False

    def summary(self) -> dict:
        """Peak/mean/min of the series, in MiB: gpu_{peak,mean,min}_mib (None without a GPU),
        gpu_peak_allocated_mib (torch.cuda.max_memory_allocated), host_peak_rss_mib."""
        return summarize(self.rows) | {
            "gpu_peak_allocated_mib": (round(torch.cuda.max_memory_allocated(self.device) / MiB, 1)
                                       if self.gpu else None)}


def mean_gpu_util(rows: list[dict], t_from: float = 0.0, t_to: float = float("inf")) -> float | None:
    """Mean NVML GPU utilisation, percent, of the samples taken between t_from and t_to seconds (None
    without a GPU or without samples there)."""
    util = [float(r["gpu_util_pct"]) for r in rows if r.get("gpu_util_pct") not in (None, "")
            and t_from <= float(r["time_s"]) <= t_to]
    return round(sum(util) / len(util), 1) if util else None


def summarize(rows: list[dict]) -> dict:
    """Peak, mean and min of gpu_used_mib, and the peak of host_rss_mib, over rows of the sampler's CSV."""
    gpu = [float(r["gpu_used_mib"]) for r in rows if r.get("gpu_used_mib") not in (None, "")]
    host = [float(r["host_rss_mib"]) for r in rows if r.get("host_rss_mib") not in (None, "")]
    return {"gpu_peak_mib": max(gpu) if gpu else None,
            "gpu_mean_mib": round(sum(gpu) / len(gpu), 1) if gpu else None,
            "gpu_min_mib": min(gpu) if gpu else None,
            "host_peak_rss_mib": max(host) if host else None}


def estimate_model_states(num_params: int, largest_layer_params: int, zero_stage: int | None,
                          offload_optimizer: bool = False, offload_param: bool = False,
                          num_gpus_per_node: int = 1, num_nodes: int = 1) -> dict:
    """DeepSpeed's own estimate of the memory for model states (parameters, gradients, Adam states) per GPU
    and per node's CPU, in MiB, for mixed-precision Adam.

    Calls `deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs` for stages None
    (no DeepSpeed), 0, 1, 2 (without offload: 2 bytes/param of 16-bit weights + 18/N bytes/param of 16-bit
    and fp32 gradients, fp32 master weights and Adam's two moments) and
    `deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs` for stage 3. Stages None and 0
    partition nothing, so they are estimated as one GPU. Activations and logits are not included.

    Returns {"estimated_model_states_gpu_mib", "estimated_model_states_cpu_mib", "estimator"}.
    """
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    if zero_stage == 3:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            num_params, largest_layer_params, num_gpus_per_node, num_nodes, cpu_offload=offload_optimizer,
            cpu_offload_params=offload_param, zero_init=True, additional_buffer_factor=1.5)
        name = "estimate_zero3_model_states_mem_needs"
    else:
        # Stages 0 and 1 have no estimator of their own. Stage 0 (and no DeepSpeed) partitions nothing:
        # the stage-2 formula with one GPU. Stage 1 leaves the gradients whole, so stage 2's is a lower bound.
        gpus = (num_gpus_per_node, num_nodes) if zero_stage in (1, 2) else (1, 1)
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            num_params, *gpus, cpu_offload=offload_optimizer, additional_buffer_factor=1.5)
        name = "estimate_zero2_model_states_mem_needs"
    return {"estimated_model_states_gpu_mib": round(gpu / MiB, 1),
            "estimated_model_states_cpu_mib": round(cpu / MiB, 1), "estimator": name}
