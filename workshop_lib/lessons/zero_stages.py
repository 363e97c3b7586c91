"""Notebook 02's answers, computed from its runs (results.json dicts by run name): baseline, stage1, stage2,
stage3 and baseline_ac (the baseline with activation checkpointing)."""

from __future__ import annotations

from .baseline import peak, speed

STAGES = ["stage1", "stage2", "stage3"]


def answers(r: dict[str, dict]) -> list[str]:
    """The answers to notebook 02's exercises, one sentence each, every figure from the runs `r`."""
    base = r["baseline"]
    pb, what = peak(base)
    out = []
    for s in STAGES:
        p, _ = peak(r[s])
        states = r[s].get("gpu_states_allocated_mib")
        measured = f", model states measured {states:,.0f} MiB" if states is not None else ""
        out.append(f"1. {s}: {what} {p:,.0f} MiB against the baseline's {pb:,.0f} ({p - pb:+,.0f} MiB){measured}; "
                   f"estimated model states {r[s]['estimated_model_states_gpu_mib']:,.0f} MiB ({r[s]['estimator']}).")
    if base.get("gpu_states_allocated_mib") is not None:
        out.append(f"1. The baseline keeps {base['gpu_states_allocated_mib']:,.0f} MiB of model states between steps "
                   f"(the Trainer's fp32 weights and Adam moments); on one GPU no stage has a partner to share with, "
                   "so the differences are in what each keeps (16-bit copies, gradient buckets), not partitions. "
                   "NVML shows more than torch's peak allocated: the allocator's reserved cache "
                   + ", ".join(f"{s} {r[s]['gpu_peak_reserved_mib']:,.0f}" for s in ["baseline", *STAGES]) + " MiB.")
    speeds = {s: speed(r[s])[0] for s in ["baseline", *STAGES]}
    slow = min(speeds, key=speeds.get)
    kind = speed(r[slow])[1]
    ratios = ", ".join(f"{s} {speeds[s] / speeds['baseline']:.2f}x" for s in STAGES)
    head = f"2. slowest: {slow} ({speeds[slow]:,.0f} tokens/s, {kind}); against the baseline: {ratios}."
    if slow == "stage3":
        out.append(head + " Stage 3 gathers every layer's parameters before its forward and again before its "
                   "backward, and frees them after: extra copies and synchronisation that buy nothing on one GPU.")
    else:
        out.append(head + " Not stage 3, which the GPU reference is slowest at: on a CPU with the tiny model the "
                   "gathers are small memory copies, while fixed per-step costs and the few steps (warm-up "
                   "included) decide, so the order can come out differently.")
    losses = {s: r[s]["train_loss"] for s in ["baseline", *STAGES]}
    ds = [losses[s] for s in STAGES]
    out.append(f"3. ZeRO stages' train losses span {max(ds) - min(ds):.4f} (baseline {losses['baseline']:.4f}): the "
               "same data, order and Adam maths, so the stages agree up to rounding; the baseline's torch AdamW "
               "and DeepSpeed's Adam round differently.")
    ac = r["baseline_ac"]
    pa, _ = peak(ac)
    sa = speed(ac)[0]
    if pa < pb and sa < speeds["baseline"]:
        verdict = "activation checkpointing saved memory and paid for it in speed, as expected"
    elif pa < pb:
        verdict = ("it saved memory at no measurable cost in speed on this run: the steps are bound by other work "
                   "(per-step overheads on the host), so the recomputed forward pass did not lengthen them")
    else:
        verdict = ("it saved no memory here: with a tiny model the activations are a small part of the memory, "
                   "and the measure (host RSS on a CPU) also counts what earlier runs in this process left")
    out.append(f"4. activation checkpointing: {what} {pa:,.0f} MiB against {pb:,.0f} ({pa - pb:+,.0f} MiB), "
               f"{sa / speeds['baseline']:.2f}x the tokens/s: {verdict}.")
    return out
