"""The machine: hub reachability, device, precision, versions, and one-process distributed setup
(introduced in `00_setup`)."""

from __future__ import annotations

import os
import platform
import socket
from functools import lru_cache

import torch

# Dense bf16/fp16 tensor-core peaks in FLOP/s, from the vendors' datasheets (no sparsity). Matched in order
# against torch.cuda.get_device_name(); an unknown GPU gives MFU null rather than a guess.
PEAK_FLOPS = [("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12),
              ("GH200", 989e12), ("A100", 312e12), ("L40S", 362e12), ("A10G", 125e12), ("V100", 125e12)]


@lru_cache(maxsize=1)
def hub_reachable(timeout_s: float = 3.0) -> bool:
    """True when huggingface.co answers on port 443 within `timeout_s` and no *_OFFLINE variable is set.

    A quick probe, so that an offline node falls back at once instead of retrying for half a minute.
    """
    if any(os.environ.get(v, "0") not in ("", "0") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def device_name() -> str:
    """'NVIDIA H100 80GB HBM3' (the GPU of this rank), or 'cpu (<processor>, N cores)'."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def pick_precision(recipe: str) -> str:
    """'bf16', 'fp16' or 'fp32' for this machine and recipe.

    classic: fp16 on a GPU, as the original workshop. default: bf16 where the GPU supports it (Ampere and
    newer; no loss scaling needed), else fp16. On the CPU: fp32 (DeepSpeed's CPU path and the tiny model).
    """
    if not torch.cuda.is_available():
        return "fp32"
    if recipe != "classic" and torch.cuda.is_bf16_supported():
        return "bf16"
    return "fp16"


def peak_flops() -> float | None:
    """Dense 16-bit peak FLOP/s of this GPU (see PEAK_FLOPS), or None on the CPU or an unknown GPU."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((f for key, f in PEAK_FLOPS if key in name), None)


def versions() -> dict:
    """Versions of python, torch, transformers, deepspeed, datasets, accelerate (None where missing)."""
    import importlib.metadata as md

    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for pkg in ("transformers", "deepspeed", "datasets", "accelerate"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_distributed_env() -> None:
    """Make a plain process (a notebook kernel, `workshop run` without a launcher) a world of one.

    DeepSpeed otherwise tries MPI discovery and fails with "No module named 'mpi4py'". Under a launcher
    (torchrun, deepspeed, srun) RANK and WORLD_SIZE are already set and nothing changes.
    """
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("MASTER_PORT") or str(free_port()))


def sanitize_cuda_arch_list() -> None:
    """Drop the arch suffix DeepSpeed's op builder cannot parse: TORCH_CUDA_ARCH_LIST="9.0a" -> "9.0".

    Hopper images and clusters set "9.0a" (or "8.0;9.0a;10.0a"); DeepSpeed's JIT build of fused_adam and
    cpu_adam then fails with `ValueError: invalid literal for int() with base 10: '0a'`.
    """
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if archs:
        clean = ";".join(a.rstrip("af") for a in archs.replace(" ", ";").split(";") if a)
        if clean != archs:
            print(f"TORCH_CUDA_ARCH_LIST {archs!r} -> {clean!r} (DeepSpeed's op builder needs plain numbers)")
            os.environ["TORCH_CUDA_ARCH_LIST"] = clean


def world() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) from the launcher's variables; (0, 0, 1) without one."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)),
            int(os.environ.get("WORLD_SIZE", 1)))


def notebook_run_options() -> dict:
    """The `run_experiment` options every notebook uses: {"tiny", "random_weights", "overwrite"}.

    tiny: WORKSHOP_TINY=1 or 0 forces it; by default the tiny model runs exactly when no GPU is visible.
    random_weights: WORKSHOP_RANDOM_WEIGHTS=1 for the real architecture without a download.
    overwrite: re-running a notebook replaces its own runs under runs/<notebook>/.
    """
    tiny = os.environ.get("WORKSHOP_TINY", "auto")
    return {"tiny": (not torch.cuda.is_available()) if tiny == "auto" else tiny == "1",
            "random_weights": os.environ.get("WORKSHOP_RANDOM_WEIGHTS") == "1", "overwrite": True}
