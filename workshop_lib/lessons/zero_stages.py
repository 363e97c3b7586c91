"""Notebook 02's answers, computed from its runs (results.json dicts by run name): baseline, stage1, stage2,
stage3 and baseline_ac (the baseline with activation checkpointing)."""

from __future__ import annotations

from .baseline import peak, speed

STAGES = ["stage1", "stage2", "stage3"]
LOSS_AGREE = 0.01  # relative spread of the ZeRO stages' train losses below which we call them in agreement


def nvml_split(r: dict) -> tuple[float, float] | None:
    """(reserved - allocated, NVML - reserved) at the training peaks, MiB: the caching allocator's free blocks,
    and what lies outside PyTorch's allocator (CUDA context, library workspaces). None without a GPU."""
    if r.get("gpu_peak_mib") is None or r.get("gpu_peak_reserved_mib") is None:
        return None
    return (r["gpu_peak_reserved_mib"] - r["gpu_peak_allocated_mib"], r["gpu_peak_mib"] - r["gpu_peak_reserved_mib"])


def compiled(r: dict) -> bool:
    """Whether the run compiled its transformer blocks (the resolved config's torch_compile)."""
    return bool(r["config"].get("torch_compile"))


def answers(r: dict[str, dict]) -> list[str]:
    """The answers to notebook 02's exercises, one sentence each, every figure from the runs `r`."""
    base = r["baseline"]
    pb, what = peak(base)
    out = []
    for s in STAGES:
        p, _ = peak(r[s])
        states = r[s].get("gpu_states_allocated_mib")
        measured = (f", model states measured {states:,.0f} MiB against the baseline's "
                    f"{base['gpu_states_allocated_mib']:,.0f}" if states is not None else "")
        out.append(f"1. {s}: {what} {p:,.0f} MiB against the baseline's {pb:,.0f} ({p - pb:+,.0f} MiB){measured}; "
                   f"estimated model states {r[s]['estimated_model_states_gpu_mib'] or r[s]['estimated_model_states_cpu_mib']:,.0f} "
                   f"MiB ({r[s]['estimator']}).")
    if base.get("gpu_states_allocated_mib") is not None:
        out.append("1. On one GPU no stage has a partner to share its states with: the differences are in what each "
                   "keeps (the baseline's fp32 weights and Adam moments; DeepSpeed's 16-bit weights beside fp32 "
                   "master weights, gradient buckets), not partitions.")
    split = {s: nvml_split(r[s]) for s in ["baseline", *STAGES]}
    if all(split.values()):
        out.append("1. NVML peak = torch peak allocated + the allocator's free cached blocks + memory outside "
                   "PyTorch: " + "; ".join(f"{s} {r[s]['gpu_peak_mib']:,.0f} = {r[s]['gpu_peak_allocated_mib']:,.0f}"
                                           f" + {split[s][0]:,.0f} + {split[s][1]:,.0f}" for s in split) + " MiB.")
        odd = [s for s in STAGES if r[s]["gpu_peak_allocated_mib"] < base["gpu_peak_allocated_mib"]
               and r[s]["gpu_peak_mib"] > base["gpu_peak_mib"]]
        if odd:
            out.append(f"1. {', '.join(odd)}: lower peak allocated but higher NVML peak than the baseline: the "
                       "extra is cache the allocator reserved, not tensors the stage needs.")
    else:
        out.append("1. No GPU: the peaks above are the whole process's host memory (weights, optimizer, activations "
                   "and Python together), so the stages' model states cannot be read apart here.")
    speeds = {s: speed(r[s])[0] for s in ["baseline", *STAGES]}
    slow = min(speeds, key=speeds.get)
    kind = speed(r[slow])[1]
    ratios = ", ".join(f"{s} {speeds[s] / speeds['baseline']:.2f}x" for s in STAGES)
    head = f"2. slowest: {slow} ({speeds[slow]:,.0f} tokens/s, {kind}); against the baseline: {ratios}."
    if slow == "stage3":
        line = head + (" Stage 3 gathers every layer's parameters before its forward and again before its "
                       "backward, and frees them after: extra copies and synchronisation that buy nothing on one GPU.")
        if compiled(base) and not compiled(r["stage3"]):
            line += (" Part of its gap is not ZeRO: under stage 3 the transformer blocks are not compiled "
                     "(torch_compile is off in its config, on in the baseline's), so it launches more kernels and "
                     "keeps more intermediate tensors for the backward pass.")
        out.append(line)
    else:
        out.append(head + " Not stage 3, which the GPU reference is slowest at: on a CPU with the tiny model the "
                   "gathers are small memory copies, while fixed per-step costs and the few steps (warm-up "
                   "included) decide, so the order can come out differently.")
    faster = [s for s in ("stage1", "stage2") if speeds[s] > speeds["baseline"]]
    if faster and base.get("gpu_peak_mib") is not None:
        out.append(f"2. {' and '.join(faster)} ran faster than the baseline. A likely reason: DeepSpeed's bf16 "
                   "mode keeps bf16 weights and runs the forward and backward passes on them, while the Trainer's "
                   "autocast casts the fp32 weights to bf16 in every forward pass and keeps fp32 gradients; with "
                   "one GPU, stages 1 and 2 have nothing to partition, so they add little work.")
    losses = {s: r[s]["train_loss"] for s in ["baseline", *STAGES]}
    ds = [losses[s] for s in STAGES]
    spread = max(ds) - min(ds)
    head = f"3. ZeRO stages' train losses span {spread:.4f} (baseline {losses['baseline']:.4f})"
    if spread <= LOSS_AGREE * min(ds):
        out.append(head + ": the same data, order and Adam maths, so the stages agree up to rounding; the "
                   "baseline's torch AdamW and DeepSpeed's Adam round differently.")
    else:
        out.append(head + f", more than {LOSS_AGREE:.0%}: the stages should agree up to rounding; over a few steps "
                   "of a tiny model, rounding differences in the first updates can grow. Compare their "
                   "train_log.csv step by step.")
    ac = r["baseline_ac"]
    pa, _ = peak(ac)
    sa = speed(ac)[0]
    on_cpu = base.get("gpu_peak_mib") is None
    if pa < pb and sa < speeds["baseline"]:
        verdict = "activation checkpointing saved memory and paid for it in speed, as expected"
    elif pa < pb:
        verdict = ("it saved memory at no measurable cost in speed on this run: the steps are bound by other work "
                   "(per-step overheads on the host), so the recomputed forward pass did not lengthen them")
    else:
        verdict = ("it saved no memory here: with a tiny model the activations are a small part of the memory, "
                   "and the measure (host RSS on a CPU) also counts what earlier runs in this process left")
    where = (" Checkpointing acts only on the activations; the host peak RSS also holds the weights, optimizer "
             "and Python, so it shows the effect only diluted." if on_cpu else "")
    out.append(f"4. activation checkpointing: {what} {pa:,.0f} MiB against {pb:,.0f} ({pa - pb:+,.0f} MiB), "
               f"{sa / speeds['baseline']:.2f}x the tokens/s: {verdict}.{where}")
    return out
