"""Notebook 03c's reference runs and figures: models that do not fit (`scripts/large_models.sh` on one H100 and
on two H200s, committed under workshop_lessons/reference), each run's outcome read from its directory and log,
with `fit.estimate` beside every measured figure; the learner's runs beside them (`exercise_table`, and the rung
with activation checkpointing against ZeRO-3 + CPU offload, both trained here: `checkpointing_rung`, `rung_ratios`),
and the records the solution notebook writes its answers from (`exercise_table`, `rung_against_offload`,
`ratio_against_reference`): figures, not sentences.

    python scripts/make_references.py large-models   # rewrites reference/*/large-models*/table.md from the runs
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import psutil

from workshop_lib import env, fit
from workshop_lib.ds_config import EXPERIMENTS, Offload
from workshop_lib.errors import WorkshopError
from workshop_lib.fit import GPUS, HEADROOM, MODELS, estimate, model_shape
from workshop_lib.results import title
from workshop_lib.units import MiB

from .baseline import compare_speed
from .comparisons import Comparison, compare
from .registry import REFERENCE
from .runs import notebook_run_options

REFERENCES = {
    "one H100 80GB, 128 GiB host": REFERENCE / "h100" / "large-models",
    "two H200 141GB, 256 GiB host": REFERENCE / "h200" / "large-models-x2",
}
GPU_OF = {"one H100 80GB, 128 GiB host": "H100 80GB", "two H200 141GB, 256 GiB host": "H200 141GB"}


def outcome(run_dir: Path) -> str:
    """What became of a run: "trained", or the first line of the error it stopped with (the workshop's own
    message, DeepSpeed's assertion), or, with neither (a process killed from outside, e.g. by the kernel's
    out-of-memory killer), "killed" with the last host RSS its memory.csv sampled."""
    if (run_dir / "results.json").is_file():
        return "trained"
    log = run_dir.parent / f"{run_dir.name}.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    errors = (
        re.findall(r"workshop: error: (.+)$", text, re.M)  # after a progress bar's \r, on its line
        or re.findall(r"^(?:\[rank\d+\]: )?\w*Error: (.+)$", text, re.M)
    )
    if errors:
        return errors[-1].strip()
    mem = run_dir / "memory.csv"
    if mem.is_file():
        rss = pd.read_csv(mem)["host_rss_mib"].dropna()
        if len(rss):
            return f"killed, no error written (host RSS {rss.iloc[-1]:,.0f} MiB at the last sample)"
    return "no record"


def _row(run_dir: Path, gpu: str) -> dict:
    cfg = json.loads((run_dir / "run_config.json").read_text()) if (run_dir / "run_config.json").is_file() else {}
    name = run_dir.name
    model = cfg.get("model") or f"Qwen/{name.split('-stage')[0].split('-baseline')[0]}"
    experiment = cfg.get("experiment") or name.split("-")[-1]
    world = cfg.get("world_size", 1)
    est = estimate(
        model,
        **EXPERIMENTS[experiment].fit_setup,
        gpus_per_node=world,
        train_micro_batch_size_per_gpu=1,
        max_length=cfg.get("max_tokens_per_micro_batch") or 8192,
        activation_checkpointing=bool(cfg.get("activation_checkpointing")),
        gpu=gpu,
    )
    r = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").is_file() else {}
    return {
        "model": model,
        "experiment": experiment,
        "GPUs": world,
        "activation checkpointing": bool(cfg.get("activation_checkpointing")),
        "outcome": outcome(run_dir),
        **{
            title(k): r.get(k)
            for k in (
                "steady_train_tokens_per_second",
                "gpu_peak_mib",
                "gpu_peak_allocated_mib",
                "gpu_peak_reserved_mib",
            )
        },
        NODE_HOST_PEAK: node_host_peak(r),
        "est. states GPU MiB": est["model_states_gpu_mib"],
        "est. states host MiB, node": est["model_states_cpu_mib"],
        "est. total GPU MiB": est["total_gpu_mib"],
    }


NODE_HOST_PEAK = title("host_peak_rss_mib") + ", node"  # `node_host_peak`: the node's ranks' peaks summed


def node_host_peak(r: dict) -> float | None:
    """Host memory of a run's node, MiB: the sum of its ranks' peak RSS on rank 0's host (results.json's
    per_rank_memory; each rank is a process with its own partition of the offloaded states), to compare with
    DeepSpeed's per-node estimate. Rank 0's own where the ranks are not recorded; None without a run. The
    ranks' peaks need not coincide, so this is at most the node's peak."""
    if not r:
        return None
    ranks = r.get("per_rank_memory") if isinstance(r.get("per_rank_memory"), list) else None
    if not ranks:
        return r.get("host_peak_rss_mib")
    host = ranks[0].get("host")
    return round(sum(x["host_peak_rss_mib"] for x in ranks if x.get("host") == host), 1)


def reference_runs(root: Path) -> pd.DataFrame:
    """One row per run under root/runs (a directory, or only its .log when the run stopped before it wrote
    one): model, experiment, GPUs, outcome, steady tokens/s, peaks (MiB; host memory per node, every rank's
    summed: `node_host_peak`) and `fit.estimate`'s figures (host: per node)."""
    runs = root / "runs"
    if not runs.is_dir():
        return pd.DataFrame()
    dirs = sorted(
        {
            p if p.is_dir() else p.parent / p.name.removesuffix(".log")
            for p in runs.iterdir()
            if p.is_dir() or p.name.endswith(".log")
        }
    )
    gpu = next((g for k, g in GPU_OF.items() if REFERENCES[k] == root), "H100 80GB")
    return pd.DataFrame([_row(d, gpu) for d in dirs])


def largest_trained(df: pd.DataFrame) -> dict[str, str]:
    """experiment -> the largest model (by parameters) that trained with it, from `reference_runs`."""
    done = df[df["outcome"] == "trained"]
    return {e: max(g["model"], key=lambda m: model_shape(m)["num_params"]) for e, g in done.groupby("experiment")}


# The settings of the reference runs (scripts/large_models.sh): micro-batches of 8,192 tokens, no activation
# checkpointing, so that the model states decide what fits.
LARGE = {
    "max_tokens_per_micro_batch": 8192,
    "activation_checkpointing": False,
    "save_model": False,
    "save_strategy": "no",
}
REFERENCE_HOST_MIB = 128 * 1024  # the H100 machine's 128 GiB
REFERENCE_GPU = "H100 80GB"


HOST_SHARE = 0.9  # of the host's memory the offloaded states may fill: the OS and the notebook's kernel keep the rest
# Micro-batch sizes tried, the reference runs' first: a GPU with room for the baseline at 8,192 tokens needs more
# tokens for it not to fit (an H200 at 16,384), a smaller one fewer for ZeRO-3 + CPU offload to fit.
TOKENS_TRIED = (8192, 16384, 4096, 2048)


def this_machine() -> tuple[float | None, float]:
    """(the GPU memory a run may use now, MiB, `env.gpu_free_mib`, None without a GPU or with the tiny model
    forced (WORKSHOP_TINY=1); this machine's host memory, MiB)."""
    tiny = notebook_run_options()["tiny"]
    return None if tiny else env.gpu_free_mib(), psutil.virtual_memory().total / MiB


def nearest_gpu(gpu_mib: float) -> str:
    """The `fit.GPUS` entry nearest `gpu_mib` in memory (for `fit.estimate`'s gpu and the explorer)."""
    return min(GPUS, key=lambda g: abs(GPUS[g] - gpu_mib))


def _fits(e: dict, gpu_mib: float, host_mib: float) -> bool:
    host = e["model_states_cpu_mib"]
    return (
        e["fits"] and e["total_gpu_mib"] <= (1 - HEADROOM) * gpu_mib and (host is None or host <= HOST_SHARE * host_mib)
    )


CONFIGURATIONS = ("baseline", "stage2", "stage3", "stage3_offload")  # `configurations`' rows


def configurations(model: str, gpu_mib: float, host_mib: float, max_tokens: int = 8192) -> pd.DataFrame:
    """`fit.estimate` of `model` with the reference runs' settings (1 x `max_tokens` tokens, no activation
    checkpointing) for the baseline, ZeRO-2, ZeRO-3 and ZeRO-3 + CPU offload on one GPU of `gpu_mib` usable with
    `host_mib` of host memory: one row each, MiB. fits: the estimate's whole verdict (`fit.estimate`: the GPU,
    the host), with the GPU total within 1 - `fit.HEADROOM` of gpu_mib and the host states within `HOST_SHARE`
    of host_mib."""
    rows = []
    for name in CONFIGURATIONS:
        e = estimate(
            model,
            **EXPERIMENTS[name].fit_setup,
            max_length=max_tokens,
            gpu=nearest_gpu(gpu_mib),
            host_memory_mib=host_mib,
        )
        rows.append(
            {
                "experiment": name,
                "states GPU MiB": e["model_states_gpu_mib"],
                "activations MiB": e["activations_gpu_mib"],
                "total GPU MiB": e["total_gpu_mib"],
                "states host MiB": e["model_states_cpu_mib"],
                "fits": _fits(e, gpu_mib, host_mib),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Choice:
    """03c's model that does not fit, and its micro-batch, for one machine (`pick_model`). MiB throughout."""

    model: str
    max_tokens: int  # tokens per micro-batch (one sequence)
    gpu_mib: float  # the GPU memory the estimates were held against
    host_mib: float
    here: bool  # for this machine; False: for the reference machine (no GPU here, or nothing here tells the story)
    baseline: dict  # `fit.estimate` of the HF Trainer alone: total_gpu_mib above gpu_mib
    stage2: dict  # of ZeRO-2: above gpu_mib
    offload: dict  # of ZeRO-3 + CPU offload: within 1 - fit.HEADROOM of gpu_mib, its host states within HOST_SHARE

    def line(self) -> str:
        """One line: the machine the estimates are for, and the choice with its numbers."""
        where = (
            "this machine"
            if self.here
            else f"the reference machine (one {REFERENCE_GPU}, {REFERENCE_HOST_MIB / 1024:,.0f} GiB of host memory)"
        )
        return (
            f"Estimates for {where}: {self.gpu_mib:,.0f} MiB of GPU memory, {self.host_mib:,.0f} MiB of host "
            f"memory. {self.model} in micro-batches of {self.max_tokens:,} tokens does not fit with the HF Trainer "
            f"alone (~{self.baseline['total_gpu_mib']:,.0f} MiB) nor ZeRO-2 (~{self.stage2['total_gpu_mib']:,.0f}), "
            f"and fits with ZeRO-3 + CPU offload (~{self.offload['total_gpu_mib']:,.0f} MiB on the GPU, "
            f"~{self.offload['model_states_cpu_mib']:,.0f} MiB of host states)."
        )


def _choose(gpu_mib: float, host_mib: float) -> tuple | None:
    for model in sorted(MODELS, key=lambda m: -model_shape(m)["num_params"]):
        for tokens in TOKENS_TRIED:
            base, zero2, off = (
                estimate(
                    model,
                    **EXPERIMENTS[e].fit_setup,
                    max_length=tokens,
                    gpu=nearest_gpu(gpu_mib),
                    host_memory_mib=host_mib,
                )
                for e in ("baseline", "stage2", "stage3_offload")
            )
            if min(base["total_gpu_mib"], zero2["total_gpu_mib"]) > gpu_mib and _fits(off, gpu_mib, host_mib):
                return model, tokens, base, zero2, off
    return None


def pick_model(gpu_mib: float | None, host_mib: float) -> Choice:
    """The largest shipped Qwen3, in the first micro-batch of `TOKENS_TRIED` tokens, that the HF Trainer alone
    and ZeRO-2 do not fit on one GPU of `gpu_mib` usable while ZeRO-3 + CPU offload fits it and `host_mib` of
    host memory (`configurations`' rule): the model notebook 03c fails with, then trains. A pure function of the
    two memories. The notebook's runs do not compile their blocks, so the activations are what `fit.estimate`
    counts (and the HF Trainer keeps more: its "does not fit" holds). Without a GPU (`gpu_mib` None), or where no
    model tells the story on this machine, the choice for the reference machine (`REFERENCE_GPU`,
    `REFERENCE_HOST_MIB`), with `here` False."""
    found = _choose(gpu_mib, host_mib) if gpu_mib is not None else None
    if found:
        return Choice(*found[:2], gpu_mib, host_mib, True, *found[2:])
    gpu_mib, host_mib = GPUS[REFERENCE_GPU], REFERENCE_HOST_MIB
    return Choice(*(found := _choose(gpu_mib, host_mib))[:2], gpu_mib, host_mib, False, *found[2:])


def _tiny(r: dict) -> bool:
    return bool(r.get("tiny", (r.get("config") or {}).get("tiny")))


H100 = "one H100 80GB, 128 GiB host"
X2 = "two H200 141GB, 256 GiB host"


@dataclass(frozen=True)
class CheckpointingRung:
    """The rung notebook 03c trains beside ZeRO-3 + CPU offload: the first change up the ladder that fits the model
    on the GPUs at hand (`fit.fix_on_these_gpus`), where that change is activation checkpointing without offload,
    the model and micro-batch unchanged; as a run, `experiment` (its ZeRO stage: baseline, stage2 or stage3) with
    activation checkpointing, written to the folder `name`. Its words are `fit.fix_on_these_gpus(est)["change"]`."""

    experiment: str

    @property
    def name(self) -> str:
        return f"{self.experiment}_ac"


def checkpointing_rung(est: dict) -> CheckpointingRung | None:
    """`CheckpointingRung` of `fit.estimate`'s `est` (a run that does not fit); None where the first rung that fits
    these GPUs offloads, or changes the model or the micro-batch: no faster rung of the same run to train."""
    fix = fit.fix_on_these_gpus(est)
    if fix is None:
        return None
    c, base = fix["config"], est["config"]
    if (
        not c["activation_checkpointing"]
        or c["offload"] != "none"
        or any(c[k] != base[k] for k in ("model", "train_micro_batch_size_per_gpu", "max_length"))
    ):
        return None
    setup = {"zero_stage": c["zero_stage"], "offload": "none"}
    return CheckpointingRung(next(n for n, e in EXPERIMENTS.items() if e.fit_setup == setup and not e.overlay))


@dataclass(frozen=True)
class RungAgainstOffload:
    """One model trained two ways on one GPU (the tiny model on a CPU) with the same micro-batches: a rung with
    activation checkpointing and no offload (`checkpointing_rung`) against ZeRO-3 + CPU offload, steady tokens/s
    from each run's results.json (`Comparison`, value = checkpointing, other = offload, with the band of steady
    tokens/s on the runs' machine: `baseline.speed_band`)."""

    model: str
    tiny: bool
    device: str  # results.json's, e.g. "NVIDIA H100 80GB HBM3"
    rung: str  # the checkpointing run's setup in words (`fit.setup`)
    tokens_per_second: Comparison
    torch_compile: tuple[bool, bool]  # whether each run compiled its blocks: (checkpointing, offload)


def rung_against_offload(rung_dir: str | Path, offload_dir: str | Path) -> RungAgainstOffload:
    """`RungAgainstOffload` of two finished runs: `rung_dir` (activation checkpointing, no offload) and
    `offload_dir` (ZeRO-3 + CPU offload), each read from its results.json.

    Raises:
        WorkshopError: the two runs trained different models or micro-batches (their ratio would compare those).
    """
    ac, off = (json.loads((Path(d) / "results.json").read_text()) for d in (rung_dir, offload_dir))
    same = ("max_tokens_per_micro_batch", "train_micro_batch_size_per_gpu")
    if ac["model"] != off["model"] or any(ac["config"][k] != off["config"][k] for k in same):
        raise WorkshopError(
            f"{rung_dir} and {offload_dir} trained different models or micro-batches.",
            "run both with the same model and micro-batch settings.",
        )
    e = EXPERIMENTS[ac["config"]["experiment"]]
    words = fit.setup(
        {
            "zero_stage": e.zero_stage,
            "offload": e.offload_optimizer,
            "nodes": 1,
            "gpus_per_node": 1,
            "activation_checkpointing": ac["config"]["activation_checkpointing"],
        }
    )
    return RungAgainstOffload(
        ac["model"],
        _tiny(ac),
        ac["device"],
        words,
        compare_speed(ac, off),
        (bool(ac["config"]["torch_compile"]), bool(off["config"]["torch_compile"])),
    )


def checkpointing_against_offload(machine: str | None = None) -> RungAgainstOffload | None:
    """`rung_against_offload` of the largest model that `machine`'s references (default the H100's) trained on one
    GPU both with activation checkpointing and no offload, and with ZeRO-3 + CPU offload; None where none did."""
    runs = {}  # (model, experiment, activation checkpointing) -> the run's folder, trained runs on one GPU
    for f in sorted((REFERENCES[machine or H100] / "runs").glob("*/results.json")):
        r = json.loads(f.read_text())
        if r["world_size"] == 1:
            runs[r["model"], r["experiment"], bool(r["config"]["activation_checkpointing"])] = f.parent
    ac = {m: d for (m, e, c), d in runs.items() if c and EXPERIMENTS[e].offload_optimizer == "none"}
    off = {m: d for (m, e, c), d in runs.items() if e == "stage3_offload" and not c}
    both = sorted(set(ac) & set(off), key=lambda m: model_shape(m)["num_params"])
    return rung_against_offload(ac[both[-1]], off[both[-1]]) if both else None


def rung_ratios(mine: RungAgainstOffload | None, ref: RungAgainstOffload | None) -> pd.DataFrame:
    """The learner's checkpointing rung against ZeRO-3 + CPU offload beside the reference's: one row each, with
    the model, device, both steady tokens/s, their ratio (checkpointing / offload) and its verdict with the band."""
    rows = []
    for who, r in (("yours", mine), (f"reference ({H100})", ref)):
        if r is None:
            continue
        t = r.tokens_per_second
        rows.append(
            {
                "measured": who,
                "model": r.model,
                "device": r.device,
                "rung": r.rung,
                "rung tokens/s": t.value,
                "ZeRO-3 + CPU offload tokens/s": t.other,
                "rung / offload": round(t.ratio, 2),
                "compiled (rung, offload)": ", ".join("yes" if c else "no" for c in r.torch_compile),
                "verdict": f"{t.verdict} ({t.band_text})",
            }
        )
    return pd.DataFrame(rows)


def like_for_like(mine: RungAgainstOffload, ref: RungAgainstOffload) -> bool:
    """The same model on the same GPU, each run compiled (or not) as the other's counterpart."""
    return (mine.model, mine.device, mine.torch_compile) == (ref.model, ref.device, ref.torch_compile)


def ratio_against_reference(mine: RungAgainstOffload, ref: RungAgainstOffload) -> Comparison:
    """The learner's ratio (rung / offload tokens/s) against the reference's, unit "x". The band, only where
    both trained the same model on the same GPU, compiled alike (`like_for_like`; else the difference is the
    setup's, not noise): twice the band of one figure, as a ratio of two figures each within +-b is within
    about +-2b."""
    b = mine.tokens_per_second.band
    return compare(
        "rung / offload tokens/s",
        mine.tokens_per_second.ratio,
        ref.tokens_per_second.ratio,
        unit="x",
        noise=2 * b if like_for_like(mine, ref) and b is not None else None,
    )


@dataclass(frozen=True)
class AllocatorCache:
    """One reference run's GPU memory from the estimate outwards, MiB: `fit.estimate`'s total for its settings,
    PyTorch's peak allocated (live tensors), its peak reserved (the caching allocator's segments, live or
    not) and NVML's peak (what the whole GPU had in use: the reserved segments, the CUDA context, libraries).
    At the moment of the reserved peak, at least `cached_mib` = reserved - allocated peak was reserved but
    unallocated: the cache an out-of-memory message calls "reserved by PyTorch but unallocated"."""

    model: str
    experiment: str
    estimate_mib: float
    allocated_mib: float
    reserved_mib: float
    nvml_mib: float
    gpu_mib: float  # the GPU's memory (`fit.GPUS`)

    @property
    def cached_mib(self) -> float:
        return self.reserved_mib - self.allocated_mib

    @property
    def nvml_vs_estimate(self) -> Comparison:
        """NVML's peak against the estimate (no band: one run)."""
        return compare("gpu_peak_mib", self.nvml_mib, self.estimate_mib, noise=None)


def allocator_cache(experiment: str = "stage3_offload", machine: str | None = None) -> AllocatorCache | None:
    """`AllocatorCache` of `machine`'s reference run of `experiment` (default: the H100's; the largest model
    that trained with it, without activation checkpointing: `reference_result`); None where none is on file."""
    machine = machine or H100
    r = reference_result(experiment, machine)
    if r is None:
        return None
    df = reference_runs(REFERENCES[machine])
    row = df[(df["model"] == r["model"]) & (df["experiment"] == experiment) & ~df["activation checkpointing"]].iloc[0]
    return AllocatorCache(
        r["model"],
        experiment,
        float(row["est. total GPU MiB"]),
        float(r["gpu_peak_allocated_mib"]),
        float(r["gpu_peak_reserved_mib"]),
        float(r["gpu_peak_mib"]),
        float(GPUS[GPU_OF[machine]]),
    )


@dataclass(frozen=True)
class OnH100s:
    """A reference run on two H200s read against as many H100s, like for like, MiB per GPU: PyTorch's peak
    allocated there (its live tensors, which the card's size does not change) and `fit.estimate` of the same
    setup on H100s, each against what an H100 leaves a run, 1 - `fit.HEADROOM` of its memory. NVML's peak on
    the H200 is kept but not compared: it counts the cache PyTorch's allocator kept on a 141 GB card."""

    model: str
    experiment: str
    gpus: int
    tokens_per_second: float
    allocated_mib: float  # results.json's gpu_peak_allocated_mib (rank 0)
    nvml_mib: float  # results.json's gpu_peak_mib, on the H200
    estimate_mib: float  # fit.estimate of the run's setup on `gpus` H100s
    gpu_mib: float  # an H100's memory (`fit.GPUS`)

    @property
    def usable_mib(self) -> float:
        return (1 - HEADROOM) * self.gpu_mib

    @property
    def fits(self) -> bool:
        """PyTorch's measured peak within what an H100 leaves a run."""
        return self.allocated_mib <= self.usable_mib

    @property
    def estimate_fits(self) -> bool:
        return self.estimate_mib <= self.usable_mib


def on_h100s(experiment: str = "stage3") -> OnH100s | None:
    """`OnH100s` of the two-H200 reference run of `experiment` with activation checkpointing (03c's exercise 3:
    Qwen3-8B with ZeRO-3, the setup the estimate gives one H100's Qwen3-8B on more GPUs); None where none is on
    file."""
    runs = [json.loads(f.read_text()) for f in sorted((REFERENCES[X2] / "runs").glob("*/results.json"))]
    found = [r for r in runs if r["experiment"] == experiment and r["config"]["activation_checkpointing"]]
    if not found:
        return None
    r = max(found, key=lambda x: x["num_params"])
    est = estimate(
        r["model"],
        **EXPERIMENTS[experiment].fit_setup,
        gpus_per_node=r["world_size"],
        max_length=r["config"]["max_tokens_per_micro_batch"],
        activation_checkpointing=True,
        gpu=REFERENCE_GPU,
    )
    return OnH100s(
        r["model"],
        experiment,
        r["world_size"],
        r["steady_train_tokens_per_second"],
        r["gpu_peak_allocated_mib"],
        r["gpu_peak_mib"],
        est["total_gpu_mib"],
        GPUS[REFERENCE_GPU],
    )


def reference_result(experiment: str, machine: str = H100) -> dict | None:
    """results.json of `machine`'s reference run of `experiment` (`REFERENCES`) with the largest model that
    trained with it, without activation checkpointing; None where none is on file."""
    root = REFERENCES[machine]
    df = reference_runs(root)
    if df.empty:
        return None
    df = df[~df["activation checkpointing"]]
    model = largest_trained(df).get(experiment)
    f = root / "runs" / f"{Path(model).name}-{experiment}" / "results.json" if model else None
    return json.loads(f.read_text()) if f and f.is_file() else None


def exercise_table(offload_run: dict, machine: str = H100) -> pd.DataFrame:
    """The learner's table for 03c's exercise 1: their stage3_offload run (a results.json dict) followed by
    `machine`'s reference run of the same experiment (`reference_result`; a larger model). Columns: run, measured,
    model, parameters (M), steady tokens/s, GPU peak MiB (NVML's), host RSS after step 1 MiB and bytes/param,
    DeepSpeed's estimate of the host states in bytes/param, host peak RSS MiB."""
    rows = []
    ref = reference_result("stage3_offload", machine)
    for measured, r in (("yours", offload_run), (f"reference ({machine})", ref)):
        if not r:
            continue
        n = r["num_params"]
        rows.append(
            {
                "run": "stage3_offload",
                "measured": measured,
                "model": r["model"] if "tiny" in r["model"] or not _tiny(r) else f"{r['model']} (tiny)",
                "parameters (M)": n / 1e6,
                **{
                    title(k): r.get(k)
                    for k in ("steady_train_tokens_per_second", "gpu_peak_mib", "host_states_rss_mib")
                },
                "host bytes/param after step 1": r["host_states_rss_mib"] * MiB / n,
                "est. host states bytes/param": r["estimated_model_states_cpu_mib"] * MiB / n,
                title("host_peak_rss_mib"): r.get("host_peak_rss_mib"),
            }
        )
    return pd.DataFrame(rows)


def explorer():
    """An ipywidgets panel over `fit.estimate`: model, ZeRO stage, offload, GPU, GPUs per node, nodes, micro-batch,
    max_length and activation checkpointing; shows fit's `table`, `plot` and `explain`, or a WorkshopError's message
    for an impossible combination. Returns the widget (`display(explorer())`); its `.controls` maps estimate's
    argument names to their widgets."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    wide = {"description_width": "initial"}
    controls = {
        "model": w.Dropdown(options=MODELS, value="Qwen/Qwen3-4B", description="model"),
        "zero_stage": w.Dropdown(
            options=[("none (HF Trainer)", "none")] + [(str(z), z) for z in range(4)],
            value=3,
            description="ZeRO stage",
            style=wide,
        ),
        "offload": w.Dropdown(options=typing.get_args(Offload), value="cpu", description="offload"),
        "gpu": w.Dropdown(options=list(GPUS), value="H100 80GB", description="GPU"),
        "gpus_per_node": w.IntSlider(value=1, min=1, max=8, description="GPUs per node", style=wide),
        "nodes": w.IntSlider(value=1, min=1, max=16, description="nodes"),
        "train_micro_batch_size_per_gpu": w.IntSlider(value=1, min=1, max=64, description="micro-batch", style=wide),
        "max_length": w.IntSlider(
            value=4096, min=256, max=32768, step=256, description="max_length (tokens)", style=wide
        ),
        "activation_checkpointing": w.Checkbox(value=False, description="activation checkpointing"),
    }

    def show(**kw):
        kw["zero_stage"] = None if kw["zero_stage"] == "none" else kw["zero_stage"]
        try:
            est = estimate(**kw)
        except WorkshopError as e:
            print(e)
            return
        display(fit.table(est))
        ax = fit.plot(est)
        display(ax.figure)
        plt.close(ax.figure)  # shown once, by display; not again at the cell's end
        print(fit.explain(est))

    out = w.interactive_output(show, controls)
    c = list(controls.values())
    panel = w.VBox([w.HBox(c[:4]), w.HBox(c[4:6]), w.HBox(c[6:]), out])
    panel.controls = controls
    return panel
