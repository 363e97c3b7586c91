"""Notebook 04's answers, computed from its runs: the 16Ψ arithmetic table, the scaling table of the
learner's runs (`results.scaling_table`), the H200 reference runs (docs/h200/default-x4) and the runs' rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..results import scaling_table

MiB = 2**20
# Bytes per parameter of the model states per GPU with N GPUs (Rajbhandari et al. 2020): stage -> f(N).
PER_GPU = {0: lambda n: 16, 1: lambda n: 4 + 12 / n, 2: lambda n: 2 + 14 / n, 3: lambda n: 16 / n}


def gpu_bytes_per_param(stage: int, n: int, offload_optimizer: bool = False, offload_param: bool = False) -> float:
    """Bytes per parameter of model states left on each of `n` GPUs by the 16Ψ arithmetic: 16-bit parameters
    (2, partitioned at stage 3, none with parameter offload), 16-bit gradients (2, partitioned from stage 2)
    and fp32 optimizer states (12, partitioned from stage 1, none with optimizer offload)."""
    params = 0 if offload_param else (2 / n if stage >= 3 else 2)
    grads = 2 / n if stage >= 2 else 2
    optim = 0 if offload_optimizer else (12 / n if stage >= 1 else 12)
    return params + grads + optim
# Columns of the scaling table shown beside the H200 reference (where both have them).
BESIDE = ["global batch", "steady tokens/s", "steady tokens/s per GPU", "scaling efficiency", "peak GPU MiB per GPU",
          "peak host RSS MiB per rank", "DS est. model states GPU MiB"]


def _pct(v: str) -> float:
    return float(str(v).rstrip("%"))


def reference_note(ref: pd.DataFrame | None, where: str | Path) -> str:
    """One line naming the machine, model, steps and runs of the H200 reference (`ref`: its results)."""
    if ref is None or ref.empty:
        return f"No H200 reference runs on file ({where} is missing): only your own figures are shown."
    r = ref.iloc[0]
    runs = ", ".join(f"{e} x{'/'.join(map(str, sorted(g['world_size'])))}" for e, g in ref.groupby("experiment"))
    return (f"H200 reference: {r['device']} GPUs of one host, {r['model']} "
            f"({'random weights' if r['random_weights'] else 'pretrained'}), {r['recipe']} recipe, "
            f"{int(r['global_steps'])} optimizer steps, steady state after {int(r['warmup_steps'])} warm-up steps; "
            f"runs on file: {runs} (experiment x GPUs), in {where}.")


def beside(scaling: pd.DataFrame, ref: pd.DataFrame | None) -> pd.DataFrame:
    """The learner's scaling table (experiment, ranks and `BESIDE` columns) with the H200 reference's
    figures of the same experiment and number of GPUs in "(H200 ref)" columns ("n/a" where none)."""
    rs = scaling_table(ref).set_index(["experiment", "GPUs"]) if ref is not None and not ref.empty else None
    rows = []
    for _, r in scaling.iterrows():
        row = {"experiment": r["experiment"], "ranks": r["GPUs"]}
        for c in BESIDE:
            if c in scaling:
                row[c] = r[c]
            if rs is not None and c in rs:
                v = rs[c].get((r["experiment"], r["GPUs"]))
                row[f"{c} (H200 ref)"] = "n/a" if v is None or (not isinstance(v, str) and pd.isna(v)) else v
        rows.append(row)
    return pd.DataFrame(rows)


def multi_node_row(df: pd.DataFrame) -> dict:
    """The run for the several-nodes table: the one whose ranks ran on the most distinct hosts (a two-node
    SLURM job where there is one, else the largest run on this machine). {run, hosts, ranks, tokens/s,
    peak MiB per rank, tokens/s against 1 rank, source}; tokens/s steady state where the run has it, MiB
    the largest peak of any rank (GPU where there are GPUs, else host RSS)."""
    hosts = [len({r.get("host") for r in ranks}) if isinstance(ranks, list) else 1 for ranks in df["per_rank_memory"]]
    best = max(range(len(df)), key=lambda i: (hosts[i], df["world_size"].iloc[i]))
    r = df.iloc[best]
    ranks = r["per_rank_memory"] if isinstance(r["per_rank_memory"], list) else []
    key = "gpu_peak_mib" if ranks and ranks[0].get("gpu_peak_mib") is not None else "host_peak_rss_mib"
    tps = "steady_train_tokens_per_second" if pd.notna(r.get("steady_train_tokens_per_second")) else "train_tokens_per_second"
    one = df[(df["experiment"] == r["experiment"]) & (df["world_size"] == 1) & (df["model"] == r["model"])]
    return {"run": r["run_dir"], "nodes (distinct hosts)": hosts[best], "ranks": int(r["world_size"]),
            "tokens/s": round(r[tps]),
            "peak memory per rank MiB": max(x[key] for x in ranks) if ranks else None,
            "memory": "GPU (NVML)" if key == "gpu_peak_mib" else "host RSS",
            "tokens/s against 1 rank": f"{r[tps] / one[tps].iloc[0]:.2f}x" if len(one) and pd.notna(one[tps].iloc[0]) else "n/a",
            "source": "a several-node job" if hosts[best] > 1 else "ranks on this one machine (no several-node run found)"}


def answers(arith: pd.DataFrame, scaling: pd.DataFrame, ref: pd.DataFrame | None, df: pd.DataFrame,
            num_params: int) -> list[str]:
    """The answers to notebook 04's exercises, one sentence each, every figure from the tables and runs:
    `arith` (the 16Ψ table, MiB), `scaling` (`results.scaling_table(df)`), `ref` (the H200 reference runs
    or None), `df` (the learner's runs), `num_params` (Qwen3-0.6B's parameters, for exercise 1)."""
    a = arith.set_index(["GPUs", "zero_stage"])["16Ψ arithmetic MiB"]
    out = [f"1. ZeRO-{s}: {num_params * PER_GPU[s](16) / MiB:,.0f} MiB per GPU on 16 GPUs, "
           f"{PER_GPU[s](16) / PER_GPU[s](1):.0%} of the {a[(1, s)]:,} MiB on 1 GPU"
           + (" (the 2Ψ of 16-bit parameters stay whole on every GPU)." if s == 2 else ".") for s in (2, 3)]
    mem = next(c for c in scaling.columns if c.startswith("peak"))
    gpu = not mem.startswith("peak host")
    for exp, g in scaling.groupby("experiment"):
        first, last = g.iloc[0], g.iloc[-1]
        run = df[df["experiment"] == exp].iloc[0]
        params = int(run["num_params"])
        where = tuple(run.get(k) not in (None, "none", False) for k in ("offload_optimizer", "offload_param"))
        fall = params * (gpu_bytes_per_param(int(run["zero_stage"]), first.GPUs, *where)
                         - gpu_bytes_per_param(int(run["zero_stage"]), last.GPUs, *where)) / MiB
        d = last[mem] - first[mem]
        head = (f"2. {exp}: {mem} {first[mem]:,.0f} at {first.GPUs} -> {last[mem]:,.0f} at {last.GPUs} ranks "
                f"({d:+,.0f} MiB); by the 16Ψ arithmetic the model states its GPUs keep"
                + (" (with offload: no fp32 optimizer states" + (", no parameters" if where[1] else "") + ")"
                   if where[0] else "") + f" fall by {fall:,.1f} MiB for its {params:,} parameters")
        if gpu:
            verdict = ("about as much as the arithmetic" if abs(d + fall) <= 0.25 * max(fall, 1) else
                       "less than the arithmetic" if -d < fall else "more than the arithmetic")
            why = {"less": "activations, logits and communication buffers are not partitioned by ZeRO; they stay "
                           "on every rank.",
                   "about": "the peak fell with the model states; the rest of it (activations, logits, buffers) "
                            "stayed on every rank.",
                   "more": "other parts of the peak changed too (under ZeRO-3 the gathered layers and prefetch "
                           "buckets, the caching allocator's blocks): the peak is not the model states plus a "
                           "constant."}[verdict.split()[0]]
            out.append(f"{head}: {verdict}; {why}")
        else:
            out.append(f"{head}. A change of that size cannot be read from host RSS: each rank's RSS is the whole "
                       "process (Python, torch, DeepSpeed, the data), hundreds of MiB, and on a CPU the 'GPU' and "
                       "the host are the same memory.")
    gb = scaling.groupby("GPUs")["global batch"].mean()
    out.append(f"3. the global batch went from {gb.iloc[0]:g} to {gb.iloc[-1]:g} sequences per step (on average: "
               "micro-batches are filled up to a token budget): to keep it, divide "
               "each rank's share (max_tokens_per_micro_batch, or the micro-batch or the accumulation) by the number "
               "of ranks; the steps per epoch then stay as on one rank, where with the share unchanged they fall.")
    eff = {(r.experiment, r.GPUs): _pct(r["scaling efficiency"]) for _, r in scaling.iterrows() if r.GPUs > 1}
    mine = ", ".join(f"{e} x{n}: {v:.0f}%" for (e, n), v in eff.items())
    if ref is not None and not ref.empty:
        rs = scaling_table(ref)
        theirs = ", ".join(f"{r.experiment} x{r.GPUs}: {r['scaling efficiency']}" for _, r in rs.iterrows() if r.GPUs > 1)
        theirs = f" The H200 reference ({ref['device'].iloc[0]}, steady state): {theirs}."
    else:
        theirs = ""
    steps = int(df["global_steps"].max())
    if not gpu:
        why = (f" Not meaningful as a scaling figure: these are CPU processes of a {df['num_params'].iloc[0]:,}-parameter "
               f"model sharing this machine's cores, over {steps} optimizer steps at most, so warm-up and fixed per-step costs (Python, "
               "launching, gloo) dominate and the ranks compete for the same cores"
               + (("; above 100% means the one-rank run was the slower to warm up, not that two ranks beat "
                   "linear speed-up") if any(v > 100 for v in eff.values()) else "")
               + ". Steady-state figures need the GPU runs, such as the H200 reference.")
    else:
        why = (" Below 100%: the gradient all-reduce (ZeRO-2) and the parameter all-gathers (ZeRO-3) that one GPU "
               "did not need, and per-step synchronisation." if all(v < 100 for v in eff.values()) else
               " Above 100% is not real speed-up: the steady state may not have been reached, or the runs differ.")
    out.append(f"4. your runs: {mine}.{why}{theirs}")
    m = multi_node_row(df)
    peak = f"{m['peak memory per rank MiB']:,.0f} MiB ({m['memory']})" if m["peak memory per rank MiB"] is not None else "n/a"
    out.append(f"5. several nodes, from {m['source']}: {m['nodes (distinct hosts)']} host(s), {m['ranks']} ranks, "
               f"{m['tokens/s']:,} tokens/s ({m['tokens/s against 1 rank']} the one-rank run of the same experiment"
               + ("" if gpu else "; CPU processes: not a scaling figure, see 4") + "), "
               f"peak per rank {peak} ({m['run']}). "
               + ("Between real nodes the gradients travel over the network (on GPUs NCCL over InfiniBand or Ethernet, "
                  "here " + ("NCCL" if gpu else "gloo over TCP") + "), slower than the links inside one node."
                  if m["nodes (distinct hosts)"] > 1 else
                  "All its ranks ran on one host: no traffic between nodes was measured; a SLURM cluster gives "
                  "the two-node run."))
    return out
