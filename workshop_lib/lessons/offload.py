"""Notebook 03's answers, computed from its runs (results.json dicts by run name): stage2, stage2_offload,
stage3 and stage3_offload."""

from __future__ import annotations

from .baseline import speed

MiB = 2**20
EXPECTED_HOST_BYTES = 12  # per parameter: fp32 master weights (4) and Adam's momentum and variance (4 + 4)


def _slower(ratio: float) -> str:
    """End of the speed sentence: a fallback when offload (ratio = offload / not, tokens/s) was not slower."""
    return "." if ratio < 1 else ("; offload was expected to be slower (CPU Adam step, PCIe copies): over a few "
                                  "steps warm-up and noise can hide that cost.")


def answers(r: dict[str, dict]) -> list[str]:
    """The answers to notebook 03's exercises, one sentence each, every figure from the runs `r`."""
    out, saved = [], {}
    gpu = r["stage2"].get("gpu_peak_allocated_mib") is not None
    for s in ("stage2", "stage3"):
        o = f"{s}_offload"
        ratio = speed(r[o])[0] / speed(r[s])[0]
        if gpu:
            saved[s] = r[s]["gpu_peak_allocated_mib"] - r[o]["gpu_peak_allocated_mib"]
            states = r[s]["gpu_states_allocated_mib"] - r[o]["gpu_states_allocated_mib"]
            out.append(f"1. {s}: offload changes the model states kept on the GPU by {-states:+,.0f} MiB and the "
                       f"peak allocated by {-saved[s]:+,.0f} MiB ({r[s]['gpu_peak_allocated_mib']:,.0f} -> "
                       f"{r[o]['gpu_peak_allocated_mib']:,.0f}), at {ratio:.2f}x the tokens/s" + _slower(ratio))
        else:
            out.append(f"1. {s}: no GPU here, so no GPU memory to save; offload runs at {ratio:.2f}x the tokens/s "
                       "(on a CPU both the 'GPU' and the offload side are the same memory)" + _slower(ratio))
        host = (r[o]["host_states_rss_mib"] - r[s]["host_states_rss_mib"]) * MiB / r[o]["num_params"]
        out.append(f"2. {s}: host RSS after the first step {r[s]['host_states_rss_mib']:,.0f} -> "
                   f"{r[o]['host_states_rss_mib']:,.0f} MiB, {host:.1f} bytes per parameter against the "
                   f"{EXPECTED_HOST_BYTES} of fp32 master weights and Adam's moments"
                   + (f": with {r[o]['num_params']:,} parameters on a CPU, the process's own growth (the CPU Adam "
                      "op and libraries loaded, the earlier runs in this process) swamps the states, so the figure per "
                      "parameter says little here; the GPU reference shows it for a real model." if not gpu else
                      ": more; possible reasons (not measured here): DeepSpeed may also keep fp32 gradient buffers (4) and "
                      "pinned staging buffers on the host" + (", and ZeRO-3 the 16-bit parameters (2)" if s == "stage3" else "") + "."
                      if host > EXPECTED_HOST_BYTES else
                      ": less than expected; pages are counted in RSS only once touched."))
    if gpu:
        if max(saved.values()) <= 0:
            out.append(f"3. Neither offload lowered the peak here (ZeRO-2 {-saved['stage2']:+,.0f} MiB, ZeRO-3 "
                       f"{-saved['stage3']:+,.0f} MiB): the peak is activations and logits (and under ZeRO-3 the "
                       "gathered layers), which offload does not move, and DeepSpeed keeps GPU-side buffers for "
                       "offload (gradient buckets, staging); offload pays only where the model states, not the "
                       "activations, are what does not fit.")
        elif saved["stage3"] < saved["stage2"]:
            out.append(f"3. ZeRO-3's offload of parameters and optimizer freed {saved['stage3']:,.0f} MiB of peak, "
                       f"ZeRO-2's of the optimizer {saved['stage2']:,.0f}: the peak is activations and logits plus, "
                       "under ZeRO-3, the layers gathered and prefetched onto the GPU, which offload does not remove.")
        else:
            out.append(f"3. ZeRO-3's offload freed {saved['stage3']:,.0f} MiB of peak, ZeRO-2's {saved['stage2']:,.0f}: "
                       "parameters offloaded too free more, as expected.")
    out.append("4. When the model states do not fit on the GPUs you have (a model several times larger than GPU "
               "memory allows, on few GPUs), or to free GPU memory for a larger micro-batch or longer sequences; "
               "not when it fits, since the CPU Adam step and PCIe traffic slow every step (question 1's ratios).")
    return out

