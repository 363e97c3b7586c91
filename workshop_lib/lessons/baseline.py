"""Notebook 01's answers, computed from its three runs (results.json dicts): `baseline` (the default recipe),
`baseline_classic` (the original workshop's recipe) and `baseline_accum4` (a quarter of the tokens per
micro-batch, 4 micro-batches per optimizer step)."""

from __future__ import annotations

MiB = 2**20


def speed(r: dict) -> tuple[float, str]:
    """(tokens/s, which): the steady-state figure (median step after warm-up) where the run has one, else the
    whole run's."""
    steady = r.get("steady_train_tokens_per_second")
    if steady is not None and steady == steady and steady > 0:  # neither missing nor NaN
        return steady, "steady-state"
    return r["train_tokens_per_second"], "whole-run"


def peak(r: dict) -> tuple[float, str]:
    """(MiB, what): torch's peak allocated over the training steps on a GPU, else the host's peak RSS."""
    if r.get("gpu_peak_allocated_mib") is not None:
        return r["gpu_peak_allocated_mib"], "torch peak allocated GPU memory"
    return r["host_peak_rss_mib"], "host peak RSS (no GPU)"


def states_bytes_per_param(r: dict) -> float | None:
    """Measured model states (GPU memory allocated after the first optimizer step) in bytes per parameter;
    None without a GPU."""
    if r.get("gpu_states_allocated_mib") is None:
        return None
    return r["gpu_states_allocated_mib"] * MiB / r["num_params"]


def answers(base: dict, classic: dict, accum: dict) -> list[str]:
    """The answers to notebook 01's exercises, one sentence each, every figure from the runs."""
    out = [f"1. classic takes the loss on '{classic['loss_on']}' tokens, default on '{base['loss_on']}' tokens: "
           "different targets, so different scales (and different models and tokenizers: "
           f"{classic['model']} against {base['model']})."]
    stats = classic["data_stats"]["train"]
    pad = 1 - stats["mean_tokens"] / classic["config"]["max_length"]
    out.append(f"2. a classic prompt has {stats['mean_tokens']:.0f} real tokens on average and is padded to "
               f"{classic['config']['max_length']}: {pad:.0%} of the tokens it processes are padding.")
    (b, kind_b), (c, kind_c) = speed(base), speed(classic)
    out.append(f"3. default: {b:,.0f} real tokens/s ({kind_b}), classic: {c:,.0f} ({kind_c}): default is "
               f"{b / c:.1f}x {'faster' if b >= c else 'slower'} on this machine"
               + ("." if b >= c else "; on a CPU with the tiny model the recipes' GPU levers (bf16, compiled "
                  "blocks, flash attention) do not apply, so this can come out either way."))
    (a, _), (pb, what), (pa, _) = speed(accum), peak(base), peak(accum)
    tokens = (base["config"]["max_tokens_per_micro_batch"], accum["config"]["max_tokens_per_micro_batch"])
    out.append(f"4. {tokens[0]:,} tokens x 1 against {tokens[1]:,} x {accum['gradient_accumulation_steps']} per "
               f"optimizer step: loss {base['train_loss']} against {accum['train_loss']} (the micro-batches group "
               f"different questions, so not identical); {a / b:.2f}x the tokens/s and {pa / pb:.2f}x the {what}. "
               + ("Smaller micro-batches hold fewer activations at once but give the GPU less work per kernel."
                  if pa < pb and a < b else
                  "Here the smaller micro-batches did not trade memory for speed as on a GPU: with a tiny model, "
                  "per-step overheads and the weights, not the activations, dominate."))
    bpp = states_bytes_per_param(base)
    if bpp is None:
        out.append(f"5. no GPU: the model states cannot be read apart from the rest of the process here; the "
                   f"estimate is {base['estimated_model_states_gpu_mib'] or base['estimated_model_states_cpu_mib']:,.1f} "
                   f"MiB ({base['estimator']}).")
    else:
        kept = ("the Trainer frees the gradients after each step (zero_grad sets them to None), so what stays is "
                "fp32 weights and Adam's two moments, 12 bytes/param" if bpp < 14 else
                "the gradients stay allocated between steps too")
        out.append(f"5. model states measured after the first step: {base['gpu_states_allocated_mib']:,.0f} MiB, "
                   f"{bpp:.1f} bytes/param, against the estimate of {base['estimated_model_states_gpu_mib']:,.0f} "
                   f"MiB ({base['estimator']}): {kept}. The training peak, {pb:,.0f} MiB, is "
                   f"{pb / base['gpu_states_allocated_mib']:.1f}x that: activations and logits.")
    if base.get("gpu_peak_mib") is not None and base.get("gpu_peak_reserved_mib") is not None:
        out.append(f"6. NVML's peak {base['gpu_peak_mib']:,.0f} MiB = torch's reserved {base['gpu_peak_reserved_mib']:,.0f} "
                   f"MiB (of which {base['gpu_peak_allocated_mib']:,.0f} in live tensors; the rest is the caching "
                   f"allocator's free blocks) + {base['gpu_peak_mib'] - base['gpu_peak_reserved_mib']:,.0f} MiB "
                   "outside PyTorch's allocator: the CUDA context, cuBLAS/NCCL workspaces.")
    return out
