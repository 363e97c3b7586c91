"""Notebook 04's answers, computed from its runs: the 16Ψ arithmetic table, the scaling table of the
learner's runs (`results.scaling_table`), the H200 reference runs (docs/h200/default-x4) and the runs' rows."""

from __future__ import annotations

import pandas as pd

from ..results import scaling_table


def _pct(v: str) -> float:
    return float(str(v).rstrip("%"))


def multi_node_row(df: pd.DataFrame) -> dict:
    """The run for the several-nodes table: the one whose ranks ran on the most distinct hosts (a two-node
    SLURM job where there is one, else the largest run on this machine). {run, hosts, ranks, tokens_per_s,
    peak_mib, source}."""
    hosts = [len({r.get("host") for r in ranks}) if isinstance(ranks, list) else 1 for ranks in df["per_rank_memory"]]
    best = max(range(len(df)), key=lambda i: (hosts[i], df["world_size"].iloc[i]))
    r = df.iloc[best]
    ranks = r["per_rank_memory"] if isinstance(r["per_rank_memory"], list) else []
    key = "gpu_peak_mib" if ranks and ranks[0].get("gpu_peak_mib") is not None else "host_peak_rss_mib"
    speed = r["steady_train_tokens_per_second"] if pd.notna(r.get("steady_train_tokens_per_second")) else r["train_tokens_per_second"]
    return {"run": r["run_dir"], "hosts": hosts[best], "ranks": int(r["world_size"]), "tokens_per_s": speed,
            "peak_mib": max(x[key] for x in ranks) if ranks else None,
            "source": "a several-node job" if hosts[best] > 1 else "ranks on this one machine (no several-node run found)"}


def answers(arith: pd.DataFrame, scaling: pd.DataFrame, ref: pd.DataFrame | None, df: pd.DataFrame) -> list[str]:
    """The answers to notebook 04's exercises, one sentence each, every figure from the tables and runs."""
    a = arith.set_index(["GPUs", "zero_stage"])["16Ψ arithmetic MiB"]
    out = [f"1. ZeRO-{s}: {a[(1, s)]:,} MiB on 1 GPU, {a[(2, s)]:,} MiB per GPU on 2 ({a[(1, s)] - a[(2, s)]:,} MiB less)."
           for s in (2, 3)]
    mem = next(c for c in scaling.columns if c.startswith("peak"))
    for exp, g in scaling.groupby("experiment"):
        first, last = g.iloc[0], g.iloc[-1]
        out.append(f"2. {exp}: {mem} {first[mem]:,.0f} at {first.GPUs} -> {last[mem]:,.0f} at {last.GPUs} ranks "
                   f"({last[mem] - first[mem]:+,.0f} MiB). Activations, logits and communication buffers are not "
                   "partitioned by ZeRO; they stay on every rank.")
    gb = scaling.groupby("GPUs")["global batch"].mean()
    out.append(f"3. the global batch went from {gb.iloc[0]:g} to {gb.iloc[-1]:g} sequences per step: to keep it, divide "
               "each rank's share (max_tokens_per_micro_batch, or the micro-batch or the accumulation) by the number "
               "of ranks; the steps per epoch then stay as on one GPU, where with the share unchanged they fall.")
    eff = {(r.experiment, r.GPUs): _pct(r["scaling efficiency"]) for _, r in scaling.iterrows() if r.GPUs > 1}
    mine = ", ".join(f"{e} x{n}: {v:.0f}%" for (e, n), v in eff.items())
    gpu = not mem.startswith("peak host")
    if ref is not None and not ref.empty:
        rs = scaling_table(ref)
        theirs = ", ".join(f"{r.experiment} x{r.GPUs}: {r['scaling efficiency']}" for _, r in rs.iterrows() if r.GPUs > 1)
        theirs = f" The H200 reference ({ref['device'].iloc[0]}, steady state): {theirs}."
    else:
        theirs = ""
    if not gpu:
        why = (" These are CPU processes of a tiny model sharing this machine's cores, over a few steps: their "
               "efficiency says little about GPUs (warm-up and fixed per-step costs dominate, the ranks compete for "
               "the same cores" + (", and above 100% means the one-rank run was the slower to warm up" if
               any(v > 100 for v in eff.values()) else "") + ").")
    else:
        why = (" Below 100%: the gradient all-reduce (ZeRO-2) and the parameter all-gathers (ZeRO-3) that one GPU "
               "did not need, and per-step synchronisation." if all(v < 100 for v in eff.values()) else
               " Above 100% is not real speed-up: the steady state may not have been reached, or the runs differ.")
    out.append(f"4. your runs: {mine}.{why}{theirs}")
    m = multi_node_row(df)
    peak = f"{m['peak_mib']:,.0f} MiB" if m["peak_mib"] is not None else "n/a"
    out.append(f"5. several nodes, from {m['source']}: {m['hosts']} host(s), {m['ranks']} ranks, "
               f"{m['tokens_per_s']:,.0f} tokens/s, peak per rank {peak} ({m['run']}).")
    return out
