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


def states(run: dict) -> float:
    """Model states the run kept on the GPU (MiB): torch allocated after the first optimizer step, less what
    the process already held when the run began (`gpu_allocated_at_start_mib`, where recorded)."""
    held = run.get("gpu_allocated_at_start_mib")
    return run["gpu_states_allocated_mib"] - (0 if held is None or held != held else held)  # NaN: not recorded


def _states_fell(s: str, r: dict[str, dict]) -> str:
    """A fallback when offload did not lower the measured model states (it moves the fp32 optimizer states,
    12 bytes/param, off the GPU)."""
    o = f"{s}_offload"
    if states(r[o]) < states(r[s]):
        return ""
    held = r[o].get("gpu_allocated_at_start_mib")
    held = None if held != held else held  # NaN (a DataFrame row): not recorded
    return (f" Offload was expected to lower the model states (the fp32 optimizer states, "
            f"{EXPECTED_HOST_BYTES * r[o]['num_params'] / MiB:,.0f} MiB, leave the GPU); here they did not: "
            + (f"the run began with {held:,.0f} MiB held by earlier work in this process (subtracted), so what DeepSpeed "
               "keeps on the GPU for offload (gradient buckets, staging buffers) may outweigh what left." if held is not None else
               "its runs did not record what the process held when each began (gpu_allocated_at_start_mib), and "
               "runs made one after another in one process could carry memory over (before this workshop freed what "
               "DeepSpeed's ZeRO-3 keeps: docs/h100/course/README.md)."))


def compare_offloads(r: dict[str, dict]) -> str:
    """Exercise 3 for GPU runs `r`: what ZeRO-3's offload (parameters and optimizer) and ZeRO-2's (optimizer)
    freed of the torch peak (MiB), and what each offload run's peak holds (model states + what the steps add)."""
    saved = {s: r[s]["gpu_peak_allocated_mib"] - r[f"{s}_offload"]["gpu_peak_allocated_mib"] for s in ("stage2", "stage3")}
    adds = {o: r[o]["gpu_peak_allocated_mib"] - states(r[o]) for o in ("stage2_offload", "stage3_offload")}
    where = (f" What the offload runs' peaks hold: ZeRO-2 offload {states(r['stage2_offload']):,.0f} MiB of model "
             f"states + {adds['stage2_offload']:,.0f} MiB the steps add; ZeRO-3 offload "
             f"{states(r['stage3_offload']):,.0f} + {adds['stage3_offload']:,.0f} (activations and logits, and "
             "under ZeRO-3 the layers gathered for forward and backward and the prefetch and reduce buckets). "
             f"ZeRO-3 without offload peaked {r['stage3']['gpu_peak_allocated_mib'] - r['stage2']['gpu_peak_allocated_mib']:+,.0f} "
             "MiB from ZeRO-2's: "
             + ("what ZeRO-3 adds during the steps outweighs the parameters that offload removes."
                if r["stage3_offload"]["gpu_peak_allocated_mib"] > r["stage2_offload"]["gpu_peak_allocated_mib"]
                else "ZeRO-3 offload's peak is the lower of the two offload runs."))
    if max(saved.values()) <= 0:
        return (f"3. Neither offload lowered the peak (ZeRO-2 {-saved['stage2']:+,.0f} MiB, ZeRO-3 "
                f"{-saved['stage3']:+,.0f} MiB): the peak is activations and logits (and under ZeRO-3 the "
                "gathered layers), which offload does not move, and DeepSpeed keeps GPU-side buffers for "
                "offload (gradient buckets, staging); offload pays only where the model states, not the "
                "activations, are what does not fit." + where)
    if saved["stage3"] < saved["stage2"]:
        return (f"3. ZeRO-3's offload of parameters and optimizer freed {saved['stage3']:,.0f} MiB of peak, "
                f"ZeRO-2's of the optimizer {saved['stage2']:,.0f}: the peak is activations and logits plus, "
                "under ZeRO-3, the layers gathered and prefetched onto the GPU, which offload does not remove." + where)
    return (f"3. ZeRO-3's offload freed {saved['stage3']:,.0f} MiB of peak, ZeRO-2's {saved['stage2']:,.0f}: "
            "parameters offloaded too free more, as expected." + where)


def reference_runs(ref) -> dict[str, dict] | None:
    """The GPU reference runs (`lessons.reference("03_cpu_offload")`, a DataFrame by run name) as results
    dicts by run name, or None unless all four runs are on file."""
    names = ("stage2", "stage2_offload", "stage3", "stage3_offload")
    return {n: ref.loc[n].to_dict() for n in names} if all(n in ref.index for n in names) else None


def answers(r: dict[str, dict], ref: dict[str, dict] | None = None) -> list[str]:
    """The answers to notebook 03's exercises, one sentence each, every figure from the runs `r` (results.json
    dicts by run name); without a GPU, exercise 3 from the GPU reference runs `ref` (the same form) if given."""
    out, saved = [], {}
    gpu = r["stage2"].get("gpu_peak_allocated_mib") is not None
    for s in ("stage2", "stage3"):
        o = f"{s}_offload"
        ratio = speed(r[o])[0] / speed(r[s])[0]
        if gpu:
            saved[s] = r[s]["gpu_peak_allocated_mib"] - r[o]["gpu_peak_allocated_mib"]
            out.append(f"1. {s}: offload changes the model states kept on the GPU by "
                       f"{states(r[o]) - states(r[s]):+,.0f} MiB and the "
                       f"peak allocated by {-saved[s]:+,.0f} MiB ({r[s]['gpu_peak_allocated_mib']:,.0f} -> "
                       f"{r[o]['gpu_peak_allocated_mib']:,.0f}), at {ratio:.2f}x the tokens/s" + _slower(ratio)
                       + _states_fell(s, r))
        else:
            out.append(f"1. {s}: no GPU here, so no GPU memory to save; offload runs at {ratio:.2f}x the tokens/s "
                       "(on a CPU both the 'GPU' and the offload side are the same memory)" + _slower(ratio))
        host = (r[o]["host_states_rss_mib"] - r[s]["host_states_rss_mib"]) * MiB / r[o]["num_params"]
        peak = (r[o]["host_peak_rss_mib"] - r[s]["host_peak_rss_mib"]) * MiB / r[o]["num_params"]
        out.append(f"2. {s}: host RSS after the first step {r[s]['host_states_rss_mib']:,.0f} -> "
                   f"{r[o]['host_states_rss_mib']:,.0f} MiB, {host:.1f} bytes per parameter (peak RSS over the "
                   f"steps: {peak:.1f}) against the "
                   f"{EXPECTED_HOST_BYTES} of fp32 master weights and Adam's moments"
                   + (f": with {r[o]['num_params']:,} parameters on a CPU, the process's own growth (the CPU Adam "
                      "op and libraries loaded, the earlier runs in this process) swamps the states, so the figure per "
                      "parameter says little here; the GPU reference shows it for a real model." if not gpu else
                      ": more; possible reasons (not measured here): DeepSpeed may also keep fp32 gradient buffers (4) and "
                      "pinned staging buffers on the host, and the CPU Adam op its own working copies"
                      + (", and ZeRO-3 the 16-bit parameters (2)" if s == "stage3" else "") + "."
                      if host > EXPECTED_HOST_BYTES else
                      ": less than expected; pages are counted in RSS only once touched."))
    if gpu:
        out.append(compare_offloads(r))
    elif ref:
        out.append("3. No GPU here, so no GPU memory was freed; on the GPU of the reference runs: "
                   + compare_offloads(ref)[3:])
    else:
        out.append("3. No GPU here, so no GPU memory was freed, and no GPU reference runs are on file to compare.")
    out.append("4. When the model states do not fit on the GPUs you have (a model several times larger than GPU "
               "memory allows, on few GPUs), or to free GPU memory for a larger micro-batch or longer sequences; "
               "not when it fits, since the CPU Adam step and PCIe traffic slow every step (question 1's ratios).")
    return out

