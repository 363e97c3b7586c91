"""Training metrics from a run's logs: steps per epoch, per-epoch losses, model FLOPs and MFU (introduced in
`01_baseline`)."""

from __future__ import annotations

import math


def steps_per_epoch(num_sequences: int, micro_batch_size: int, gradient_accumulation_steps: int,
                    world_size: int) -> int:
    """Optimizer steps in one pass over `num_sequences`: ceil(ceil(n / (micro x world)) / accumulation),
    as the Trainer counts them (a last partial micro-batch and a last partial accumulation both step)."""
    return math.ceil(math.ceil(num_sequences / (micro_batch_size * world_size)) / gradient_accumulation_steps)


def per_epoch(logs: list[dict], key: str) -> list[float]:
    """Mean of logs[key] over each epoch (epoch numbers in the Trainer's logs are fractional, 0 < e <= epochs)."""
    by_epoch: dict[int, list[float]] = {}
    for h in logs:
        by_epoch.setdefault(max(math.ceil(h["epoch"] - 1e-9), 1), []).append(h[key])
    return [round(sum(v) / len(v), 4) for _, v in sorted(by_epoch.items())]


def flops_per_token(num_params: int, num_layers: int, hidden_size: int, seq_len: float) -> float:
    """Model FLOPs to train on one token: 6N for the forward and backward matmuls + 12·L·H·S for the
    attention scores (Chowdhery et al. 2022, PaLM, appendix B); S = mean tokens per sequence, padding
    excluded. Activation recomputation is not counted (that is hardware FLOPs, not model FLOPs)."""
    return 6 * num_params + 12 * num_layers * hidden_size * seq_len


def mfu(tokens_per_second: float, flops_per_token: float, peak_flops_per_gpu: float | None,
        world_size: int) -> float | None:
    """Model FLOPs utilisation, a fraction: tokens/s x FLOPs/token / (peak FLOP/s per GPU x GPUs); None
    where the peak is unknown (the CPU, an unlisted GPU)."""
    if not peak_flops_per_gpu:
        return None
    return tokens_per_second * flops_per_token / (peak_flops_per_gpu * world_size)
