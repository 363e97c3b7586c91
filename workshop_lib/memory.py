"""Memory: a background sampler writing a CSV time series, its summary by phase, and the estimate of the
model states (introduced in `01_baseline`; DeepSpeed's estimators in `02_zero_stages`).

Phases, the same in every experiment (`MemorySampler.mark`): the sampler starts before the Trainer is built;
"train_begin" when the first step starts (model and engine set up); "states" right after the first optimizer step
(what persists between steps: weights, optimizer states, kept gradient buffers); "train_end" after the last step.
Peaks, means and minima are taken over the training window only.

Three views of GPU memory, from the outside in:
- `gpu_used_mib`: what NVML (`pynvml`, the library behind nvidia-smi) reports as used on this rank's GPU:
  everything the CUDA context, PyTorch's caching allocator and any other process hold. What decides OOM.
- `torch_allocated_mib`: bytes in live PyTorch tensors (`torch.cuda.memory_allocated`), below the cache.
- `gpu_peak_allocated_mib`: `torch.cuda.max_memory_allocated`, the exact peak of the above between samples.
Host memory is this process's resident set size (`psutil`), in MiB: with offload, where the optimizer lives.
GPU utilisation is NVML's: the percentage of the last sample period in which a kernel ran on the GPU.
"""

from __future__ import annotations

import contextlib
import csv
import os
import threading
import time
from pathlib import Path

import psutil
import torch

from .rundir import no_link
from .units import MiB

FIELDS = ["time_s", "gpu_used_mib", "torch_allocated_mib", "host_rss_mib", "gpu_util_pct"]


def _nvml_handle(local_device: int):
    """NVML handle of torch's cuda:local_device (NVML ignores CUDA_VISIBLE_DEVICES, so map through it)."""
    import pynvml  # only on a GPU: NVML needs its driver

    pynvml.nvmlInit()
    ids = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if local_device < len(ids):
        v = ids[local_device]
        return pynvml.nvmlDeviceGetHandleByIndex(int(v)) if v.isdigit() else pynvml.nvmlDeviceGetHandleByUUID(v)
    return pynvml.nvmlDeviceGetHandleByIndex(local_device)


def gpu_total_mib(local_device: int = 0) -> float | None:
    """The memory of torch's cuda:local_device as nvidia-smi prints it (NVML's total), MiB; None without GPU/NVML."""
    if not torch.cuda.is_available():
        return None
    try:
        import pynvml  # only on a GPU: NVML needs its driver

        return round(pynvml.nvmlDeviceGetMemoryInfo(_nvml_handle(local_device)).total / MiB, 1)
    except Exception:  # no NVML library or driver: the figure is missing, the run goes on
        return None


class MemorySampler:
    """Samples GPU and host memory every `interval_s` seconds in a daemon thread, appending to a CSV.

    Use as a context manager around the work to measure::

        with MemorySampler("runs/x/memory.csv") as mem:
            trainer.train()
        mem.summary()  # {"gpu_peak_mib": ..., "gpu_mean_mib": ..., ...}

    CSV columns: time_s (since `t0`, the perf_counter at entry), gpu_used_mib, torch_allocated_mib, host_rss_mib,
    gpu_util_pct (empty without a GPU). Rows are flushed as written; a failed write stops the file and is raised on exit.
    """

    def __init__(self, csv_path: str | os.PathLike, interval_s: float = 0.2, device: int | None = None):
        self.path, self.interval_s = Path(csv_path), interval_s
        self.gpu = torch.cuda.is_available()
        self.device = torch.cuda.current_device() if (self.gpu and device is None) else device
        self.rows: list[dict] = []
        self.marks: dict[str, float] = {}  # event -> seconds on this sampler's clock
        self.states = {"gpu_states_allocated_mib": None, "host_states_rss_mib": None}  # at the "states" mark
        self._stop = threading.Event()
        self._proc = psutil.Process()
        self.write_error: OSError | None = None  # the CSV's write failed (a full disk); sampling went on

    def sample(self) -> dict:
        """One row of readings (MiB), taken now."""
        rss = self._proc.memory_info().rss  # this rank alone: not the compilers of a JIT op build
        row = {
            "time_s": round(time.perf_counter() - self._t0, 3),
            "gpu_used_mib": None,
            "torch_allocated_mib": None,
            "host_rss_mib": round(rss / MiB, 1),
            "gpu_util_pct": None,
        }
        if self.gpu:
            import pynvml  # only on a GPU: NVML needs its driver

            row["gpu_used_mib"] = round(pynvml.nvmlDeviceGetMemoryInfo(self._handle).used / MiB, 1)
            row["torch_allocated_mib"] = round(torch.cuda.memory_allocated(self.device) / MiB, 1)
            row["gpu_util_pct"] = pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
        return row

    def _run(self):
        try:
            f = open(self.path, "w", newline="", opener=no_link)
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
        except OSError as e:
            f, self.write_error = None, e
        while True:  # a write that fails (a full disk) stops the file, not the sampling: __exit__ raises it
            row = self.sample()
            self.rows.append(row)
            if f is not None:
                try:
                    w.writerow(row)
                    f.flush()
                except OSError as e:
                    f, self.write_error = None, e
            if self._stop.is_set():  # the last reading was taken at stop
                break
            self._stop.wait(self.interval_s)
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()

    def __enter__(self):
        self.t0 = self._t0 = time.perf_counter()
        if self.gpu:
            self._handle = _nvml_handle(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, daemon=True, name="memory-sampler")
        self._thread.start()
        return self

    def __exit__(self, exc_type, *exc):
        self._stop.set()
        self._thread.join()
        if exc_type is None and self.write_error is not None:
            raise self.write_error
        return False

    def mark(self, event: str) -> None:
        """Note `event` ("train_begin", "states", "train_end") at the current time. "train_begin" also resets
        torch's peak statistics, so the peaks are those of the training steps; "states" keeps this moment's
        readings (torch allocated and host RSS: the model states the run keeps between steps)."""
        self.marks[event] = round(time.perf_counter() - self._t0, 3)
        if event == "train_begin" and self.gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
        if event == "states":
            row = self.sample()
            self.states = {
                "gpu_states_allocated_mib": row["torch_allocated_mib"],
                "host_states_rss_mib": row["host_rss_mib"],
            }

    def summary(self) -> dict:
        """The run's memory by phase, in MiB (GPU values None without a GPU):
        gpu_{peak,mean,min}_mib and host_peak_rss_mib: NVML and RSS over the training window (marks
        "train_begin" to "train_end"; the whole series where they are missing); gpu_peak_allocated_mib and
        gpu_peak_reserved_mib: torch.cuda.max_memory_allocated / max_memory_reserved since "train_begin";
        gpu_states_allocated_mib and host_states_rss_mib: at the "states" mark; setup_seconds: sampler start
        to "train_begin"; train_begin_s, train_end_s: the marks on memory.csv's clock; gpu_allocated_at_start_mib:
        torch allocated at the sampler's start, before this run put anything on the GPU (what else the process
        holds; 0 for a run alone in its process)."""
        t0, t1 = self.marks.get("train_begin", 0.0), self.marks.get("train_end", float("inf"))
        window = [r for r in self.rows if t0 <= r["time_s"] <= t1] or self.rows
        gpu = {
            k: round(f(self.device) / MiB, 1) if self.gpu else None
            for k, f in (
                ("gpu_peak_allocated_mib", torch.cuda.max_memory_allocated),
                ("gpu_peak_reserved_mib", torch.cuda.max_memory_reserved),
            )
        }
        start = self.rows[0]["torch_allocated_mib"] if self.rows else None  # held before this run began
        return (
            summarize(window)
            | gpu
            | {"gpu_allocated_at_start_mib": start}
            | self.states
            | {
                "setup_seconds": self.marks.get("train_begin"),
                "train_begin_s": self.marks.get("train_begin"),
                "train_end_s": self.marks.get("train_end"),
            }
        )


TRAINER_ESTIMATE = "HF Trainer + torch AdamW: 16 bytes/param (fp32 weights 4, fp32 gradients 4, Adam m and v 8)"


def mean_gpu_util(rows: list[dict], t_from: float = 0.0, t_to: float = float("inf")) -> float | None:
    """Mean NVML GPU utilisation, percent, of the samples taken between t_from and t_to seconds (None
    without a GPU or without samples there)."""
    util = [
        float(r["gpu_util_pct"])
        for r in rows
        if r.get("gpu_util_pct") not in (None, "") and t_from <= float(r["time_s"]) <= t_to
    ]
    return round(sum(util) / len(util), 1) if util else None


def summarize(rows: list[dict]) -> dict:
    """Peak, mean and min of gpu_used_mib, and the peak of host_rss_mib, over rows of the sampler's CSV."""
    gpu = [float(r["gpu_used_mib"]) for r in rows if r.get("gpu_used_mib") not in (None, "")]
    host = [float(r["host_rss_mib"]) for r in rows if r.get("host_rss_mib") not in (None, "")]
    return {
        "gpu_peak_mib": max(gpu) if gpu else None,
        "gpu_mean_mib": round(sum(gpu) / len(gpu), 1) if gpu else None,
        "gpu_min_mib": min(gpu) if gpu else None,
        "host_peak_rss_mib": max(host) if host else None,
    }


def zero_bytes_per_param(stage: int, n: int, offload_optimizer: bool = False, offload_param: bool = False) -> float:
    """Bytes per parameter of model states left on each of `n` GPUs by the 16Ψ arithmetic of mixed-precision Adam
    (Rajbhandari et al. 2020, "ZeRO", section 3.1): 16-bit parameters
    (2, partitioned at stage 3, none with parameter offload), 16-bit gradients (2, partitioned from stage 2)
    and fp32 optimizer states (12, partitioned from stage 1, none with optimizer offload)."""
    params = 0 if offload_param else (2 / n if stage >= 3 else 2)
    grads = 2 / n if stage >= 2 else 2
    optim = 0 if offload_optimizer else (12 / n if stage >= 1 else 12)
    return params + grads + optim


def estimate_model_states(
    num_params: int,
    largest_layer_params: int,
    zero_stage: int | None,
    offload_optimizer: bool = False,
    offload_param: bool = False,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
) -> dict:
    """The memory for model states (parameters, gradients, Adam states) per GPU and per node's CPU, in MiB.

    zero_stage None (the HF Trainer alone, torch AdamW): what the Trainer holds, 16 bytes/param on the GPU:
    fp32 weights (4), fp32 gradients (4) and Adam's two fp32 moments (8); under bf16/fp16 autocast, transient
    16-bit copies of the weights come on top during forward and backward. Nothing on the CPU.

    Otherwise DeepSpeed's own estimate, for mixed-precision Adam: for stages 0, 1, 2
    `deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs` (without offload: 2 bytes/param
    of 16-bit weights + 18/N bytes/param of 16-bit and fp32 gradients, fp32 master weights and Adam's two
    moments; stage 0 partitions nothing, so it is estimated as one GPU; stage 1 keeps whole gradients, so this
    is a lower bound for it), and `deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs` for
    stage 3. Activations and logits are not included.

    Returns {"estimated_model_states_gpu_mib", "estimated_model_states_cpu_mib", "estimator"}.
    """
    if zero_stage is None:
        return {
            "estimated_model_states_gpu_mib": round(zero_bytes_per_param(0, 1) * num_params / MiB, 1),
            "estimated_model_states_cpu_mib": 0.0,
            "estimator": TRAINER_ESTIMATE,
        }
    # DeepSpeed here, not at the top: importing it picks the accelerator and probes its ops; env settles both first
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    if zero_stage == 3:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            num_params,
            largest_layer_params,
            num_gpus_per_node,
            num_nodes,
            cpu_offload=offload_optimizer,
            cpu_offload_params=offload_param,
            zero_init=True,
            additional_buffer_factor=1.5,
        )
        name = "estimate_zero3_model_states_mem_needs"
    else:
        # Stages 0 and 1 have no estimator of their own. Stage 0 partitions nothing:
        # the stage-2 formula with one GPU. Stage 1 leaves the gradients whole, so stage 2's is a lower bound.
        gpus = (num_gpus_per_node, num_nodes) if zero_stage in (1, 2) else (1, 1)
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            num_params, *gpus, cpu_offload=offload_optimizer, additional_buffer_factor=1.5
        )
        name = "estimate_zero2_model_states_mem_needs"
    return {
        "estimated_model_states_gpu_mib": round(gpu / MiB, 1),
        "estimated_model_states_cpu_mib": round(cpu / MiB, 1),
        "estimator": name,
    }
