"""The GPUs the workshop knows, in one table: the memory `fit` plans with and the peak FLOP/s MFU divides by.

A row: `name` as the fit tables and the explorer show it ("H100 80GB"); `match`, the words of torch's device
name that identify it ("NVIDIA H100 80GB HBM3" contains "H100"), tried in table order, so a more specific row
("H100 PCIe") comes before a general one; `memory_mib`, the total memory torch reports on it (MiB; None where
the name covers several sizes); `peak_flops`, its dense 16-bit tensor-core peak (FLOP/s, the vendor's datasheet
value without sparsity; None where not listed)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    name: str
    match: str
    memory_mib: int | None
    peak_flops: float | None


# memory_mib: total memory as `nvidia-smi --query-gpu=memory.total` prints it, MiB. H100 (80GB HBM3) and H200: read with
# nvidia-smi on the course's machines. RTX 4090, L40S: nvidia-smi logs in GitHub issues RLinf/RLinf#255 and
# akash-network/provider-configs#99. A100 80GB: an A800-SXM4-80GB's (the same board) in dexmal/dexbotic#41;
# A100 40GB: 40 GiB by the same rule, not checked. Laptop GPU: a nominal 8 GiB. CUDA can allocate a little
# less (the driver keeps some; the CUDA context takes ~0.5 GiB).
CATALOGUE = (
    GPU("H200 141GB", "H200", 143771, 989e12),  # GH200 too (the same GPU)
    GPU("H100 PCIe", "H100 PCIe", None, 756e12),
    GPU("H100 NVL", "H100 NVL", None, 835e12),
    GPU("H100 80GB", "H100", 81559, 989e12),
    GPU("A100 80GB", "A100 80GB", 81920, 312e12),
    GPU("A100 40GB", "A100", 40960, 312e12),
    GPU("L40S 48GB", "L40S", 46068, 362e12),
    GPU("RTX 4090 24GB", "RTX 4090", 24564, None),
    GPU("laptop GPU 8GB", "laptop", 8192, None),
    GPU("A10G", "A10G", None, 125e12),
    GPU("V100", "V100", None, 125e12),
)
# name -> total memory (MiB): the GPUs `fit` can plan for
MEMORY_MIB = {g.name: g.memory_mib for g in CATALOGUE if g.memory_mib}


def peak_flops(device_name: str) -> float | None:
    """Dense 16-bit peak FLOP/s of the GPU torch names `device_name`, or None for one not in `CATALOGUE`."""
    return next((g.peak_flops for g in CATALOGUE if g.peak_flops and g.match in device_name), None)
