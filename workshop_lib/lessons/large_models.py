"""Notebook 03c's reference runs and answers: models that do not fit (`scripts/large_models.sh` on one H100 and
on two H200s, committed under docs/), each run's outcome read from its directory and log, with `fit.estimate`
beside every measured figure.

    python -m workshop_lib.lessons.large_models     # rewrites docs/*/large-models*/table.md from the runs
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from . import DOCS

REFERENCES = {"one H100 80GB, 128 GiB host": DOCS / "h100" / "large-models",
              "two H200 141GB, 256 GiB host": DOCS / "h200" / "large-models-x2"}
GPU_OF = {"one H100 80GB, 128 GiB host": "H100 80GB", "two H200 141GB, 256 GiB host": "H200 141GB"}


def outcome(run_dir: Path) -> str:
    """What became of a run: "trained", or the first line of the error it stopped with (the workshop's own
    message, DeepSpeed's assertion), or, with neither (a process killed from outside, e.g. by the kernel's
    out-of-memory killer), "killed" with the last host RSS its memory.csv sampled."""
    if (run_dir / "results.json").is_file():
        return "trained"
    log = run_dir.parent / f"{run_dir.name}.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    errors = (re.findall(r"workshop: error: (.+)$", text, re.M)  # after a progress bar's \r, on its line
              or re.findall(r"^(?:\[rank\d+\]: )?\w*Error: (.+)$", text, re.M))
    if errors:
        return errors[-1].strip()
    mem = run_dir / "memory.csv"
    if mem.is_file():
        rss = pd.read_csv(mem)["host_rss_mib"].dropna()
        if len(rss):
            return f"killed, no error written (host RSS {rss.iloc[-1]:,.0f} MiB at the last sample)"
    return "no record"


def _row(run_dir: Path, gpu: str) -> dict:
    from .. import fit

    cfg = json.loads((run_dir / "run_config.json").read_text()) if (run_dir / "run_config.json").is_file() else {}
    name = run_dir.name
    model = cfg.get("model") or f"Qwen/{name.split('-stage')[0].split('-baseline')[0]}"
    experiment = cfg.get("experiment") or name.split("-")[-1]
    world = cfg.get("world_size", 1)
    from ..config import EXPERIMENTS

    exp = EXPERIMENTS[experiment]
    offload = "none" if exp.offload_optimizer == "none" else exp.offload_optimizer
    est = fit.estimate(model, exp.zero_stage, offload if exp.zero_stage else "none", gpus_per_node=world,
                       train_micro_batch_size_per_gpu=1, max_length=cfg.get("max_tokens_per_micro_batch") or 8192,
                       activation_checkpointing=bool(cfg.get("activation_checkpointing")), gpu=gpu)
    r = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").is_file() else {}
    return {"model": model, "experiment": experiment, "GPUs": world,
            "activation checkpointing": bool(cfg.get("activation_checkpointing")), "outcome": outcome(run_dir),
            "steady tokens/s": r.get("steady_train_tokens_per_second"),
            "GPU peak MiB (NVML)": r.get("gpu_peak_mib"), "torch peak alloc MiB": r.get("gpu_peak_allocated_mib"),
            "host peak RSS MiB": r.get("host_peak_rss_mib"),
            "est. states GPU MiB": est["model_states_gpu_mib"], "est. states host MiB": est["model_states_cpu_mib"],
            "est. total GPU MiB": est["total_gpu_mib"],
            "NVMe swap MiB": sum(r["nvme_swap_mib"].values()) if r.get("nvme_swap_mib") else None,
            "est. NVMe MiB": est["nvme_mib"]}


def reference_runs(root: Path) -> pd.DataFrame:
    """One row per run under root/runs (a directory, or only its .log when the run stopped before it wrote
    one): model, experiment, GPUs, outcome, steady tokens/s, peaks (MiB), NVMe swap files at the end (MiB) and
    `fit.estimate`'s figures."""
    runs = root / "runs"
    if not runs.is_dir():
        return pd.DataFrame()
    dirs = sorted({p if p.is_dir() else p.parent / p.name.removesuffix(".log") for p in runs.iterdir()
                   if p.is_dir() or p.name.endswith(".log")})
    gpu = next((g for k, g in GPU_OF.items() if REFERENCES[k] == root), "H100 80GB")
    return pd.DataFrame([_row(d, gpu) for d in dirs])


def largest_trained(df: pd.DataFrame) -> dict[str, str]:
    """experiment -> the largest model (by parameters) that trained with it, from `reference_runs`."""
    from ..fit import model_shape

    done = df[df["outcome"] == "trained"]
    return {e: max(g["model"], key=lambda m: model_shape(m)["num_params"]) for e, g in done.groupby("experiment")}


NVME_VS_CPU = DOCS / "h100" / "large-models" / "nvme-vs-cpu"  # CPU and NVMe offload of one model in one device call


def offload_comparison(root: Path = NVME_VS_CPU) -> pd.DataFrame:
    """CPU against NVMe offload of one model, both run in one device call (root/runs, `scripts/large_models.sh`),
    from each run's own logs, so that a run stopped after its training steps (before results.json) counts too:
    training steps logged (train_log.csv), the steady step time (s) and tokens/s over them
    (`metrics.steady_state`, the first third of the steps left out, as in results.json), the peak GPU memory
    (NVML) and host RSS in memory.csv (MiB), and whether the run wrote results.json. One row per run."""
    from ..metrics import steady_state

    rows = []
    for run in sorted(d for d in (root / "runs").iterdir() if d.is_dir()):
        cfg = json.loads((run / "run_config.json").read_text())
        log = pd.read_csv(run / "train_log.csv").dropna(subset=["step_time_s"])
        steady = steady_state(log["step_time_s"].tolist(), log["tokens"].astype(int).tolist(), 1)
        mem = pd.read_csv(run / "memory.csv")
        rows.append({"model": cfg["model"], "experiment": cfg["experiment"], "training steps": len(log),
                     "steady s/step": steady["steady_step_time_s"],
                     "steady tokens/s": steady["steady_train_tokens_per_second"],
                     "GPU peak MiB (NVML)": mem["gpu_used_mib"].max(), "host peak RSS MiB": mem["host_rss_mib"].max(),
                     "results.json": (run / "results.json").is_file()})
    return pd.DataFrame(rows)


def drive_free_gib(machine_txt: Path) -> float:
    """The free space of the drive `scripts/large_models.sh` swapped to, GiB: the 'Avail' column of the `df -h`
    line it wrote into machine.txt (e.g. '/dev/vda 252G 17G 64G 21% /' -> 64)."""
    line = next(x for x in machine_txt.read_text().splitlines() if x.startswith("/"))
    avail = line.split()[3]
    return float(avail[:-1]) * {"T": 1024, "G": 1, "M": 1 / 1024}[avail[-1]]


def nvme_summary(root: Path = NVME_VS_CPU) -> str:
    """The comparison in sentences, computed from `offload_comparison`, and which shipped Qwen3 models' swap
    files (`memory.estimate_nvme_swap`) fit the drive of that call (`drive_free_gib`)."""
    from ..fit import MODELS, model_shape
    from ..memory import MiB, estimate_nvme_swap

    df = offload_comparison(root).set_index("experiment")
    cpu, nvme = df.loc["stage3_offload"], df.loc["stage3_nvme"]
    free = drive_free_gib(root / "machine.txt")
    swap = json.loads((root / "runs" / f"{Path(nvme['model']).name}-stage3_nvme" / "ds_config.json").read_text())
    count, size = (swap["zero_optimization"]["offload_param"][k] for k in ("buffer_count", "buffer_size"))
    fits = {m: estimate_nvme_swap(model_shape(m)["num_params"], True, True) / 1024 for m in MODELS}
    return (f"{cpu['model']}, {nvme['training steps']} training steps each: NVMe offload took "
            f"{nvme['steady s/step'] / cpu['steady s/step']:.1f}x the steady step time of CPU offload "
            f"({nvme['steady s/step']:.2f} s against {cpu['steady s/step']:.2f} s; "
            f"{nvme['steady tokens/s']:,.0f} against {cpu['steady tokens/s']:,.0f} tokens/s), with a host peak RSS "
            f"of {nvme['host peak RSS MiB']:,.0f} MiB against {cpu['host peak RSS MiB']:,.0f} MiB and a GPU peak of "
            f"{nvme['GPU peak MiB (NVML)']:,.0f} MiB against {cpu['GPU peak MiB (NVML)']:,.0f} MiB. NVMe offload "
            f"keeps pinned host buffers to swap the parameters through: {count} x {size:,} elements x 2 bytes = "
            f"{count * size * 2 / MiB:,.0f} MiB here (ds_config.json's offload_param), one per tensor in use at "
            "once, each as large as the largest tensor (the embedding).\n\n"
            f"Swap files of NVMe offload (`memory.estimate_nvme_swap`, 18 bytes/param) against the {free:,.0f} GiB "
            "free on that machine's drive: "
            + "; ".join(f"{m} {gib:,.1f} GiB ({'fits' if gib <= 0.95 * free else 'does not fit'})"
                        for m, gib in sorted(fits.items(), key=lambda kv: kv[1])) + ".")


# The settings of the reference runs (scripts/large_models.sh): micro-batches of 8,192 tokens, no activation
# checkpointing, so that the model states decide what fits.
LARGE = {"max_tokens_per_micro_batch": 8192, "activation_checkpointing": False, "save_model": False,
         "save_strategy": "no"}
REFERENCE_HOST_MIB = 128 * 1024  # the H100 machine's 128 GiB


def this_gpu() -> tuple[str, float]:
    """(the `fit.GPUS` entry nearest this machine's GPU 0 in memory, host memory MiB); without a GPU, the
    reference machine's: ("H100 80GB", 128 GiB)."""
    import psutil
    import torch

    from ..fit import GPUS

    if not torch.cuda.is_available():
        return "H100 80GB", REFERENCE_HOST_MIB
    total = torch.cuda.get_device_properties(0).total_memory / 2**20
    return min(GPUS, key=lambda g: abs(GPUS[g] - total)), psutil.virtual_memory().total / 2**20


def configurations(model: str, gpu: str, host_mib: float) -> pd.DataFrame:
    """`fit.estimate` of `model` with the reference runs' settings (1 x 8,192 tokens, no activation
    checkpointing) for the baseline, ZeRO-2, ZeRO-3, ZeRO-3 + CPU offload and ZeRO-3 + NVMe offload on one
    `gpu` with `host_mib` of host memory: one row each, MiB."""
    from ..fit import estimate

    rows = []
    for name, stage, offload in [("baseline", None, "none"), ("stage2", 2, "none"), ("stage3", 3, "none"),
                                 ("stage3_offload", 3, "cpu"), ("stage3_nvme", 3, "nvme")]:
        e = estimate(model, stage, offload, max_length=LARGE["max_tokens_per_micro_batch"], gpu=gpu,
                     host_memory_mib=host_mib)
        rows.append({"experiment": name, "states GPU MiB": e["model_states_gpu_mib"],
                     "activations MiB": e["activations_gpu_mib"], "total GPU MiB": e["total_gpu_mib"],
                     "states host MiB": e["model_states_cpu_mib"], "on NVMe MiB": e["nvme_mib"], "fits": e["fits"]})
    return pd.DataFrame(rows)


def pick_model(gpu: str, host_mib: float) -> str:
    """The largest shipped Qwen3 that ZeRO-3 + CPU offload fits on one `gpu` (GPU and host, `configurations`)
    and the baseline does not: the model this notebook makes fit. The smallest Qwen3 where nothing fails."""
    from ..fit import MODELS, model_shape

    for model in sorted(MODELS, key=lambda m: -model_shape(m)["num_params"]):
        df = configurations(model, gpu, host_mib).set_index("experiment")
        if df.at["stage3_offload", "fits"] and not df.at["baseline", "fits"]:
            return model
    return min(MODELS, key=lambda m: model_shape(m)["num_params"])


def answers(offload_run: dict, nvme_run: dict | None, mismatch: dict, fp16) -> list[str]:
    """The exercises' answers from this notebook's runs (results.json dicts: stage3_offload and stage3_nvme;
    nvme_run None when it did not run) and drills (`drills.batch_size_mismatch`, `drills.fp16_overflow`)."""
    from ..memory import MiB

    n = offload_run["num_params"]
    host = offload_run["host_states_rss_mib"]
    out = [f"1. ZeRO-3 + CPU offload trained {offload_run['model'] if not offload_run['config']['tiny'] else 'the tiny model'}"
           f" ({n / 1e6:,.1f}M parameters) with "
           + (f"{offload_run['gpu_peak_mib']:,.0f} MiB GPU peak (NVML) and " if offload_run["gpu_peak_mib"] else "")
           + f"host RSS "
           f"{host:,.0f} MiB after step 1: {host * MiB / n:,.1f} bytes/param of host memory, against DeepSpeed's "
           f"estimate of {offload_run['estimated_model_states_cpu_mib'] * MiB / n:,.1f} (18 x 1.5 buffer factor)"
           + ("; on a tiny model the process's own libraries dominate the RSS." if host * MiB / n > 100 else ".")]
    if nvme_run:
        ratio = nvme_run["steady_train_tokens_per_second"] / offload_run["steady_train_tokens_per_second"]
        out.append(f"2. NVMe offload: host RSS after step 1 {nvme_run['host_states_rss_mib']:,.0f} MiB against "
                   f"{host:,.0f} MiB with CPU offload ({nvme_run['host_states_rss_mib'] - host:+,.0f} MiB), at "
                   f"{ratio:.2f}x its steady tokens/s; on the drive {nvme_run['nvme_swap_mib']['params']:,.1f} MiB "
                   f"of parameters and {nvme_run['nvme_swap_mib']['optimizer']:,.1f} MiB of optimizer states.")
    else:
        out.append("2. NVMe offload did not run here (see the async_io check above).")
    out.append(f"3. DeepSpeed refused the batch: {mismatch['arithmetic']} (train_batch_size must equal micro x "
               f"accumulation x world_size); build_ds_config(world_size=...) writes it for the ranks that run.")
    f16 = fp16[fp16["precision"] == "fp16"]
    b16 = fp16[fp16["precision"] == "bf16"]
    out.append(f"4. fp16: {int(f16['skipped'].sum())} of {len(f16)} steps skipped, the loss scale from "
               f"{f16['loss_scale'].iloc[0]:,.0f} to {f16['loss_scale'].iloc[-1]:,.0f}"
               + (f", then DeepSpeed stopped: \"{f16['error'].dropna().iloc[-1].rstrip('.')}\""
                  if f16['error'].notna().any() else "")
               + f"; bf16 trained from loss {b16['loss'].iloc[0]:.3f} to {b16['loss'].iloc[-1]:.3f}.")
    return out


def main() -> None:
    for machine, root in REFERENCES.items():
        df = reference_runs(root)
        if df.empty:
            continue
        text = (f"# Models that do not fit: reference runs on {machine}\n\nGenerated by `python -m "
                f"workshop_lib.lessons.large_models` from runs/ (made by `scripts/large_models.sh`, see README.md). "
                "Estimates: `workshop_lib.fit.estimate` (DeepSpeed's model-state estimators, activations after "
                "Korthikanti et al. 2022) for the run's settings. Steady tokens/s: median step after warm-up.\n\n"
                + df.to_markdown(index=False, floatfmt=",.0f") + "\n")
        (root / "table.md").write_text(text)
        print(f"wrote {root / 'table.md'}")
    text = ("# CPU against NVMe offload: one H100 80GB, one device call\n\nGenerated by `python -m "
            "workshop_lib.lessons.large_models` from runs/ (made by `scripts/large_models.sh`, see ../README.md). "
            "Steady: the median step after the first third of the steps, from each run's train_log.csv; peaks from "
            "its memory.csv.\n\n" + offload_comparison().to_markdown(index=False, floatfmt=",.2f") + "\n\n"
            + nvme_summary() + "\n")
    (NVME_VS_CPU / "table.md").write_text(text)
    print(f"wrote {NVME_VS_CPU / 'table.md'}")


if __name__ == "__main__":
    main()
