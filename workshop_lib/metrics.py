"""Training metrics from a run's logs: steps per epoch, steady-state throughput, model
FLOPs and MFU (introduced in `01_baseline`)."""

from __future__ import annotations

import math
import statistics


def steps_per_epoch(micro_batches: int, gradient_accumulation_steps: int, world_size: int) -> int:
    """Optimizer steps in one pass over the data: ceil(ceil(micro-batches / world_size) / accumulation), as
    the Trainer counts them (a last partial round of micro-batches and a last partial accumulation both
    step). Micro-batches: ceil(sequences / micro-batch size), or the token-budget sampler's count."""
    return math.ceil(math.ceil(micro_batches / world_size) / gradient_accumulation_steps)


SETTLED = 1.25  # a step is settled once its seconds per token are within 25% of the run's second half's median
COMPILING = 3.0  # in a log without compile counts, a step 3x slower than settled is taken for a compilation


def steady_steps(step_times_s: list[float], step_tokens: list[int], compiles: list[int] | None = None) -> list[int]:
    """The indices of a run's steady steps, found from its own step log: the warm-up (the first step, which
    holds set-up, then every step up to the first settled one: within `SETTLED` x the median seconds per token
    of the run's second half; at most half the steps) is left out, and so is every later step that compiled
    (`compiles`: graphs torch.compile built in each step; in a log without them, a step over `COMPILING` x that
    median), a cost paid once per new shape. All the steps of a run of 1 or 2."""
    n = len(step_times_s)
    if n < 3:
        return list(range(n))
    cost = [t / max(k, 1) for t, k in zip(step_times_s, step_tokens)]  # seconds per token: batches differ in size
    settled = statistics.median(cost[n // 2 :])
    compiled = compiles or [c > COMPILING * settled for c in cost]
    first = 1
    while first < n // 2 and (compiled[first] or cost[first] > SETTLED * settled):
        first += 1
    return [i for i in range(first, n) if not compiled[i]]


def steady_state(
    step_times_s: list[float], step_tokens: list[int], global_batch_size: float, compiles: list[int] | None = None
) -> dict:
    """Throughput once warm, the one steady-state figure of every table, verdict, band and scaling efficiency:
    the steady steps (`steady_steps`: after the warm-up, without compilations), all their tokens over all their time.
    Stalls count (the job's wall time pays them); unlike steps are measured as a whole. Why: docs/guide.md, "One
    steady-state figure".

    Args:
        step_times_s: seconds per optimizer step, evaluation excluded; step_tokens: non-padding tokens in each
            step, all ranks; global_batch_size: sequences per step (mean); compiles: as `steady_steps` takes.

    Returns {"warmup_steps" (before the first steady one), "steady_steps" (their number), "steady_step_time_s"
    (mean), "steady_train_samples_per_second", "steady_train_tokens_per_second"}; None figures without steps.
    """
    steady = steady_steps(step_times_s, step_tokens, compiles)
    times, tokens = [step_times_s[i] for i in steady], [step_tokens[i] for i in steady]
    out = {
        "warmup_steps": steady[0] if steady else len(step_times_s),
        "steady_steps": len(times),
        "steady_step_time_s": None,
        "steady_train_samples_per_second": None,
        "steady_train_tokens_per_second": None,
    }
    if times:
        step = sum(times) / len(times)
        out |= {
            "steady_step_time_s": round(step, 4),
            "steady_train_samples_per_second": round(global_batch_size / step, 2),
            "steady_train_tokens_per_second": round(sum(tokens) / sum(times), 1),
        }
    return out


def flops_per_token(
    num_params: int,
    num_layers: int,
    attention_width: int,
    seq_len: float,
    lm_head_params: int = 0,
    logits_fraction: float = 1.0,
) -> float:
    """Model FLOPs to train on one token: 6N for the forward and backward matmuls (N counts a tied embedding once: it is
    the LM head's matmul) + 12·L·H·Q·T for the attention scores and their use (Chowdhery et al. 2022, PaLM, appendix B),
    with H·Q = `attention_width` = heads x head dim (Qwen3-0.6B: 16 x 128 = 2,048, not its hidden size 1,024) and T =
    mean tokens per sequence, padding excluded. Where the logits are computed at a fraction of the positions only
    (`logits_fraction` < 1: the labelled ones, `model.compute_logits_where_labelled`), the LM head's 6 x
    `lm_head_params` (vocabulary x hidden) count for that fraction: the FLOPs the task needs, not the ones a full
    forward would spend. Activation recomputation is not counted (that is hardware FLOPs, not model FLOPs)."""
    return 6 * (num_params - (1 - logits_fraction) * lm_head_params) + 12 * num_layers * attention_width * seq_len


def recompute_flops_per_token(
    num_params: int, num_layers: int, attention_width: int, seq_len: float, lm_head_params: int = 0
) -> float:
    """FLOPs per token that full activation checkpointing adds: one more forward pass of the checkpointed
    transformer blocks, 2 x their parameters (N less the LM head's vocabulary x hidden, which is outside the
    blocks and not recomputed) + 4·L·H·Q·T for attention (a third of `flops_per_token`'s 12·L·H·Q·T). Hardware
    FLOPs = model FLOPs + these (Korthikanti et al. 2022, section 6, define HFU against MFU this way)."""
    return 2 * (num_params - lm_head_params) + 4 * num_layers * attention_width * seq_len


def run_flops_per_token(
    num_params: int,
    num_layers: int,
    attention_width: int,
    lm_head_params: int,
    tokens: int,
    sequences: int,
    labelled_tokens: int,
    logits_on_labelled: bool,
    activation_checkpointing: bool,
) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) per token of a run: `flops_per_token` at the data's mean sequence length
    (tokens / sequences, padding excluded), the LM head counted at the labelled share of positions where the run
    computes logits there only; hardware adds `recompute_flops_per_token` under activation checkpointing.
    HFU = MFU x hardware / model FLOPs."""
    shape = (num_params, num_layers, attention_width, tokens / sequences)
    model = flops_per_token(*shape, lm_head_params, labelled_tokens / tokens if logits_on_labelled else 1.0)
    return model, model + (recompute_flops_per_token(*shape, lm_head_params) if activation_checkpointing else 0)


def mfu(
    tokens_per_second: float | None, flops_per_token: float, peak_flops_per_gpu: float | None, world_size: int
) -> float | None:
    """Model FLOPs utilisation, a fraction: tokens/s x FLOPs/token / (peak FLOP/s per GPU x GPUs); None
    where the peak is unknown (the CPU, an unlisted GPU) or there is no throughput."""
    if not peak_flops_per_gpu or tokens_per_second is None:
        return None
    return tokens_per_second * flops_per_token / (peak_flops_per_gpu * world_size)
