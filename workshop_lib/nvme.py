"""ZeRO-Infinity's NVMe offload, around DeepSpeed (introduced in `03c_models_that_do_not_fit`; `train`, `preflight` and
`record` call these for the stage3_nvme experiment): the swap buffers sized for the model, the run's swap folder on the
drive, what the run swapped there, and the check that the drive can hold it before minutes of set-up."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import torch

from . import memory
from .config import RunConfig
from .ds_config import Experiment
from .errors import WorkshopError
from .units import MiB


def nvme_buffers(net) -> dict:
    """ZeRO-Infinity's parameter buffers for `net`: DeepSpeed swaps each parameter tensor from NVMe into a
    buffer of its own (runtime/swap_tensor/partitioned_param_swapper.py), so a buffer must hold the largest
    tensor (the embedding: 155.6M elements for Qwen3-0.6B, above DeepSpeed's default 1e8; no larger) and there must be
    one per tensor in use at once: a transformer layer's, the next layer's being prefetched, and the embedding
    and LM head (Qwen3: 11 tensors a layer -> 24 buffers; with 5, DeepSpeed stops: "Not enough buffers 0 for
    swapping 1"). Pinned host memory: count x size x 2 bytes (Qwen3-1.7B: 24 x 311M x 2 = 14 GiB).

    Returns: {"nvme_buffer_count": buffers, "nvme_buffer_size": elements each}, `ds_config.build_ds_config`'s
    arguments."""
    layers = next((m for m in net.modules() if isinstance(m, torch.nn.ModuleList)), [])
    per_layer = max((len(list(layer.parameters())) for layer in layers), default=5)
    return {
        "nvme_buffer_count": 2 * per_layer + 2,
        "nvme_buffer_size": max(2**20, max(p.numel() for p in net.parameters())),
    }  # aio: 1 MiB at least


def nvme_swap_dir(cfg: RunConfig) -> Path:
    """This run's folder under --nvme-path for ZeRO-Infinity's swap files (DeepSpeed adds zero_stage_3/<what>/
    rank<N>), so that two runs sharing a drive never swap into each other's files; removed when the run ends
    (checkpoints, not swap files, are what a resumed run reads)."""
    run = Path(cfg.output_dir).resolve()
    return Path(cfg.nvme_path) / f"workshop-{run.name}-{hashlib.sha1(str(run).encode()).hexdigest()[:8]}"


def nvme_swap_mib(cfg: RunConfig) -> dict:
    """MiB of ZeRO-Infinity's swap files in this run's `nvme_swap_dir` (every rank of this node), by what they
    hold: DeepSpeed writes parameters to zero_stage_3/<dtype>params/rank<N> (tensors of 1 MiB and more only,
    `swap_tensor.utils.MIN_AIO_BYTES`) and optimizer states to zero_stage_3/optimizer/rank<N>.
    Returns {"params": MiB, "optimizer": MiB}."""
    root, mib = nvme_swap_dir(cfg) / "zero_stage_3", {"params": 0.0, "optimizer": 0.0}
    for f in root.rglob("*.swp"):
        mib["optimizer" if f.relative_to(root).parts[0] == "optimizer" else "params"] += f.stat().st_size / MiB
    return {k: round(v, 1) for k, v in mib.items()}


def check_nvme_space(cfg: RunConfig, exp: Experiment, num_params: int, world_size: int) -> float:
    """Refuse an NVMe offload whose swap files (`memory.estimate_nvme_swap`: 18 bytes/param for parameters and
    optimizer states, over the nodes) would not fit in 95% (`memory.DRIVE_MARGIN`) of the free space at
    `cfg.nvme_path`: DeepSpeed would stop with an I/O error in the first step, after minutes of set-up, with the drive full.

    Returns: the swap files' estimate for this node, MiB. Raises: WorkshopError with both figures and the fix."""
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or min(world_size, max(torch.cuda.device_count(), 1)))
    nodes = max(1, world_size // per_node)  # ranks of one node share its drive
    need = memory.estimate_nvme_swap(
        num_params, exp.offload_optimizer == "nvme", exp.offload_param == "nvme", nodes, cfg.precision
    )
    free = shutil.disk_usage(cfg.nvme_path).free / MiB
    if need > memory.DRIVE_MARGIN * free:
        raise WorkshopError(
            f"{cfg.experiment} would write about {need:,.0f} MiB of swap files for {cfg.model} "
            f"({num_params / 1e9:.2f}B parameters) to {cfg.nvme_path}, which has {free:,.0f} MiB free.",
            "pass --nvme-path DIR on a drive with more free space (or set WORKSHOP_NVME_PATH), use more nodes, "
            "or CPU offload (stage3_offload) where the host's memory holds the states.",
        )
    return need
