"""Notebook 04's figures and verdicts, computed from its runs: the 16Ψ arithmetic, the scaling table of the
learner's runs (`results.scaling_table`) beside the reference runs on 2 H200s (`REFERENCE`), the bytes each
ZeRO stage communicates per step (Rajbhandari et al. 2020, section 7) beside what DeepSpeed's comms logger
recorded in the learner's own run (comms.json, `workshop_lib.comms`), and the gradient buckets of a ds_config.
Records only: the notebook writes the sentences from them.

The collectives DeepSpeed 0.19.8 issues, as notebook 04 states them (module:qualname, resolved in the installed
DeepSpeed by tests/test_deepspeed_citations.py):
- ZeRO-1/2 gradients: each full bucket is all-reduced and each rank keeps its partition of the sum
  (`deepspeed.runtime.zero.stage_1_and_2:DeepSpeedZeroOptimizer.average_tensor`, with
  use_multi_rank_bucket_allreduce, on by default, through
  `deepspeed.runtime.zero.stage_1_and_2:DeepSpeedZeroOptimizer.allreduce_and_scatter`): 2Ψ, not the paper's Ψ.
- ZeRO-1/2 parameters after the step: one all_gather_into_tensor per parameter group
  (`deepspeed.runtime.utils:all_gather_dp_groups`; allgather_bucket_size acts only without it).
- ZeRO-3 gradients: a reduce-scatter per bucket (`deepspeed.runtime.comm.coalesced_collectives:reduce_scatter_coalesced`);
  its persistent parameters (stage3_param_persistence_threshold) are all-gathered after every step
  (`deepspeed.runtime.zero.stage3:DeepSpeedZeroOptimizer_Stage3._post_step`) instead of in the passes.
- ZeRO-2's forward pass issues no collective: ranks meet in the backward pass, at the gradients' all-reduce, so a
  rank with a slower forward makes the other wait there (`stragglers`)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from workshop_lib.comms import COMMS_FILE
from workshop_lib.memory import zero_bytes_per_param
from workshop_lib.results import PEAK_PER_GPU, PEAK_PER_RANK, per_gpu, scaling_table, title, unit
from workshop_lib.units import MiB

from .comparisons import Comparison, compare
from .references import band
from .runs import notebook_run_options

# Bytes per parameter of the model states per GPU with N GPUs (Rajbhandari et al. 2020): stage -> f(N).
PER_GPU = {0: lambda n: 16, 1: lambda n: 4 + 12 / n, 2: lambda n: 2 + 14 / n, 3: lambda n: 16 / n}
# How far the measured fall of the peak may be from the 16Ψ arithmetic's fall of the model states and still
# count as "the same" (a chosen tolerance, not a measured band: the caching allocator rounds blocks, and the
# peak's other parts move a little between world sizes).
MEMORY_TOLERANCE = 0.25
# How far a communication volume counted by DeepSpeed's comms logger may be from the formula and still count
# as "the same": DeepSpeed pads each rank's partition for alignment, and the gradient norm's all-reduces add
# a few bytes per step (a chosen tolerance; the volumes are exact, not noisy).
COMM_TOLERANCE = 0.02
# Bytes per element that DeepSpeed communicates in: the training precision (engine.communication_data_type:
# fp16 -> float16, bf16 -> bfloat16, else float32; the CPU trains in fp32).
BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp32": 4}


def run_options(on_gpus: bool, common: dict, size_micro_batches: bool) -> list[str]:
    """The `workshop run` options of notebook 04's runs (and of its reference, scripts/two_gpu_reference.py):
    on GPUs the course's length (`common`, `lessons.notebook_run_options`) and, with `size_micro_batches` (ranks
    on this machine, whose GPUs the notebook sees), micro-batches sized for them as in 01-03; 4 steps of the tiny
    model on CPU ranks. No checkpoint and no model: these runs measure, and a ZeRO checkpoint of Qwen3-0.6B is
    8 GB to write."""
    tiny = common["tiny"] or not on_gpus
    args = ["--max-steps", str(common["max_steps"] if on_gpus else 4), "--save-strategy", "no", "--no-save-model"]
    args += ["--tiny"] if tiny else []
    args += ["--random-weights"] if common["random_weights"] else []
    if size_micro_batches and not tiny:
        budget = notebook_run_options(size_micro_batches=True)["max_tokens_per_micro_batch"]
        args += ["--max-tokens-per-micro-batch", str(budget)]
    return args


# Notebook 04's reference on 2 H200s of one host, by the measurement protocol (README.md there,
# `scripts/two_gpu_reference.py`): its scaling runs in rounds, runs/NAME, repeat/NAME and repeat/NAME-rK, and the
# recipe's FSDP2 in fsdp2/. Exercise 7's A/B on 2 H100s (ab/ there: ZeRO-2 with 10x smaller gradient buckets and with
# the recipe's, a pair in ab/runs and one in ab/repeat); two nodes on one host, NVLink against sockets
# (`scripts/two_nodes_one_host.sh`)
REFERENCE = Path(__file__).resolve().parent / "reference" / "h200" / "x2-2026-11-29"
BUCKET_AB = REFERENCE.parents[1] / "h100" / "x2-2026-11-28" / "ab"
LINKS = REFERENCE.parents[1] / "h100" / "links-2026-11-28"


def bucket_ab(folder: Path = BUCKET_AB, metric: str = "steady_train_tokens_per_second") -> list[Comparison]:
    """Exercise 7 from its A/B in `folder`: per pair (folder/runs, folder/repeat), `metric` (a results.json key:
    steady tokens/s, or a peak in MiB) of ZeRO-2 with `--reduce-bucket-size 50000000` (stage2-small-buckets)
    against the recipe's buckets (stage2-recipe-buckets); band: the largest spread of one run between the pairs
    (`band`). Empty where no pair is on file."""
    out = []
    noise = band(metric, folder)
    for part in ("runs", "repeat"):
        small, recipe = (folder / part / f"stage2-{k}-buckets" / "results.json" for k in ("small", "recipe"))
        if small.is_file() and recipe.is_file():
            out.append(
                compare(
                    metric, json.loads(small.read_text())[metric], json.loads(recipe.read_text())[metric], noise=noise
                )
            )
    return out


# Columns of the scaling table shown beside the reference (where both have them).
BESIDE = [
    title("global_batch_size"),
    title("steady_train_tokens_per_second"),
    per_gpu("steady_train_tokens_per_second"),
    "scaling efficiency",
    PEAK_PER_GPU,
    PEAK_PER_RANK,
    title("estimated_model_states_gpu_mib"),
]


def reference_info(ref: pd.DataFrame | None) -> dict | None:
    """What the reference runs (`ref`, their results) are: {device, model, random_weights, recipe,
    global_steps, warmup_steps, runs: {experiment: [GPU counts]}}; None where there are none."""
    if ref is None or ref.empty:
        return None
    r = ref.iloc[0]
    return {
        "device": r["device"],
        "model": r["model"],
        "random_weights": bool(r["random_weights"]),
        "recipe": r["recipe"],
        "global_steps": int(r["global_steps"]),
        "warmup_steps": int(r["warmup_steps"]),
        "runs": {e: sorted(int(n) for n in g["world_size"]) for e, g in ref.groupby("experiment")},
    }


def beside(scaling: pd.DataFrame, ref: pd.DataFrame | None) -> pd.DataFrame:
    """The learner's scaling table (experiment, ranks and `BESIDE` columns) with the reference's
    figures of the same experiment and number of GPUs in "(ref)" columns ("n/a" where none)."""
    rs = scaling_table(ref).set_index(["experiment", "GPUs"]) if ref is not None and not ref.empty else None
    rows = []
    for _, r in scaling.iterrows():
        row = {"experiment": r["experiment"], "ranks": r["GPUs"]}
        for c in BESIDE:
            if c in scaling:
                row[c] = r[c]
            if rs is not None and c in rs:
                v = rs[c].get((r["experiment"], r["GPUs"]))
                row[f"{c} (ref)"] = "n/a" if v is None or (not isinstance(v, str) and pd.isna(v)) else v
        rows.append(row)
    return pd.DataFrame(rows)


def _speed(df: pd.DataFrame) -> str:
    """The speed `results.scaling_table` compares: steady tokens/s where every run has it, else samples/s."""
    ok = "steady_train_tokens_per_second" in df and df["steady_train_tokens_per_second"].notna().all()
    return "steady_train_tokens_per_second" if ok else "train_samples_per_second"


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
    tps = (
        "steady_train_tokens_per_second"
        if pd.notna(r.get("steady_train_tokens_per_second"))
        else "train_tokens_per_second"
    )
    one = df[(df["experiment"] == r["experiment"]) & (df["world_size"] == 1) & (df["model"] == r["model"])]
    return {
        "run": r["run_dir"],
        "nodes (distinct hosts)": hosts[best],
        "ranks": int(r["world_size"]),
        unit(tps): round(r[tps]),
        "peak memory per rank MiB": max(x[key] for x in ranks) if ranks else None,
        "memory": "GPU (NVML)" if key == "gpu_peak_mib" else "host RSS",
        f"{unit(tps)} against 1 rank": f"{r[tps] / one[tps].iloc[0]:.2f}x"
        if len(one) and pd.notna(one[tps].iloc[0])
        else "n/a",
        "source": "a several-node job" if hosts[best] > 1 else "ranks on this one machine (no several-node run found)",
    }


@dataclass(frozen=True)
class MemoryFall:
    """Exercise 2 for one experiment: the measured change of the peak per rank from `ranks_from` to
    `ranks_to` ranks (`memory`: the scaling table's peak column, MiB; negative: it fell) against the fall of
    the model states by the 16Ψ arithmetic (`workshop_lib.memory.zero_bytes_per_param`, with the run's offload), MiB.
    `on_gpu` False: the peak is host RSS (the whole process), which cannot show a change of that size."""

    experiment: str
    num_params: int
    ranks_from: int
    ranks_to: int
    memory: str
    change_mib: float
    arithmetic_fall_mib: float
    offload_optimizer: bool
    offload_param: bool
    on_gpu: bool

    @property
    def fall(self) -> Comparison:
        """Measured fall (MiB) against the arithmetic's, band `MEMORY_TOLERANCE`: "higher" fell more,
        "lower" fell less, "within the band" about as much."""
        return compare(
            "peak memory fall", -self.change_mib, self.arithmetic_fall_mib, unit="MiB", noise=MEMORY_TOLERANCE
        )


@dataclass(frozen=True)
class Scaling:
    """Exercise 4 for one experiment at `gpus` ranks: tokens/s per rank against the same experiment on
    `base_gpus` ranks of the same machine (`per_rank`: ratio = scaling efficiency; band: the measured spread of
    the experiment's speed at those ranks over `REFERENCE`'s rounds, `lessons.band`; "lower" is below linear
    scaling beyond the noise).
    `steady`: steady-state tokens/s (else whole-run samples/s, warm-up included, as `results.scaling_table`)."""

    experiment: str
    gpus: int
    base_gpus: int
    per_rank: Comparison
    steady: bool


def scaling(df: pd.DataFrame) -> list[Scaling]:
    """`Scaling` of every run of `df` with more ranks than the fewest of its experiment (same model, recipe)."""
    col = _speed(df)
    out = []
    for (exp, _, _), g in df.sort_values("world_size").groupby(["experiment", "model", "recipe"], sort=False):
        # the spread of this experiment's reference runs at these ranks over its rounds: ZeRO-3's is not ZeRO-2's
        noise = band(col, REFERENCE, tuple(f"{exp}-{n}" for n in g["world_size"]))
        noise = "reference" if noise is None else noise  # none on file: the course's band
        first = g.iloc[0]
        for _, r in g.iloc[1:].iterrows():
            out.append(
                Scaling(
                    exp,
                    int(r["world_size"]),
                    int(first["world_size"]),
                    compare(
                        col,
                        r[col] / r["world_size"],
                        first[col] / first["world_size"],
                        unit=f"{unit(col)} per rank",
                        noise=noise,
                    ),
                    col.startswith("steady"),
                )
            )
    return out


@dataclass(frozen=True)
class MultiGpu:
    """Notebook 04's exercises as figures and verdicts.

    states_16: exercise 1, per stage 2 and 3: MiB of model states per GPU on 16 GPUs and on 1 (16Ψ arithmetic,
        `num_params` of Qwen3-0.6B), their ratio, and the MiB that stay whole on every GPU (not partitioned).
    memory: exercise 2, one `MemoryFall` per experiment (first to last number of ranks).
    global_batch: exercise 3, {ranks: mean global batch in sequences} of the learner's runs.
    scaling, reference_scaling: exercise 4, `Scaling` of the learner's runs and of the reference's.
    on_gpu: the learner's runs measured GPU memory (else host RSS: CPU processes, not a scaling figure).
    max_steps, model_params: the most optimizer steps of the learner's runs, and their model's parameters.
    multi_node: exercise 5, `multi_node_row`, and the run's tokens/s per rank against 1 rank as `multi_node_speed`
        (None where no one-rank run of the experiment).
    """

    states_16: pd.DataFrame
    memory: list[MemoryFall]
    global_batch: dict[int, float]
    scaling: list[Scaling]
    reference_scaling: list[Scaling]
    on_gpu: bool
    max_steps: int
    model_params: int
    multi_node: dict
    multi_node_speed: Comparison | None = field(default=None)


def figures(
    arith: pd.DataFrame, scaling_df: pd.DataFrame, ref: pd.DataFrame | None, df: pd.DataFrame, num_params: int
) -> MultiGpu:
    """The figures and verdicts of notebook 04's exercises 1-5, from `arith` (the 16Ψ table, MiB),
    `scaling_df` (`results.scaling_table(df)`), `ref` (the reference runs, `REFERENCE`/runs, or None), `df` (the learner's
    runs) and `num_params` (Qwen3-0.6B's parameters, for exercise 1)."""
    a = arith.set_index(["GPUs", "zero_stage"])["16Ψ arithmetic MiB"]
    states = pd.DataFrame(
        [
            {
                "zero_stage": s,
                "MiB per GPU on 16 GPUs": num_params * PER_GPU[s](16) / MiB,
                "MiB per GPU on 1 GPU": a[(1, s)],
                "fraction of 1 GPU": PER_GPU[s](16) / PER_GPU[s](1),
                "not partitioned MiB": num_params * PER_GPU[s](math.inf) / MiB,
            }
            for s in (2, 3)
        ]
    )
    mem = PEAK_PER_GPU if PEAK_PER_GPU in scaling_df else PEAK_PER_RANK
    on_gpu = mem == PEAK_PER_GPU
    memory = []
    for exp, g in scaling_df.groupby("experiment"):
        first, last = g.iloc[0], g.iloc[-1]
        run = df[df["experiment"] == exp].iloc[0]
        where = tuple(run.get(k) not in (None, "none", False) for k in ("offload_optimizer", "offload_param"))
        stage, params = int(run["zero_stage"]), int(run["num_params"])
        fall = (
            params
            * (zero_bytes_per_param(stage, first.GPUs, *where) - zero_bytes_per_param(stage, last.GPUs, *where))
            / MiB
        )
        memory.append(
            MemoryFall(
                exp, params, int(first.GPUs), int(last.GPUs), mem, float(last[mem] - first[mem]), fall, *where, on_gpu
            )
        )
    row = multi_node_row(df)
    r = df[df["run_dir"] == row["run"]].iloc[0]
    one = df[(df["experiment"] == r["experiment"]) & (df["world_size"] == 1) & (df["model"] == r["model"])]
    col = "steady_train_tokens_per_second"  # as multi_node_row
    col = col if pd.notna(r.get(col)) else "train_tokens_per_second"
    speed = (
        compare(col, r[col] / r["world_size"], one[col].iloc[0], unit=f"{unit(col)} per rank")
        if len(one) and pd.notna(one[col].iloc[0])
        else None
    )
    return MultiGpu(
        states,
        memory,
        scaling_df.groupby("GPUs")[title("global_batch_size")].mean().to_dict(),
        scaling(df),
        scaling(ref) if ref is not None and not ref.empty else [],
        on_gpu,
        int(df["global_steps"].max()),
        int(df["num_params"].iloc[0]),
        row,
        speed,
    )


# ------------------------------------------------------------------------------------------------------------
# Communication per optimizer step (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
# Parameter Models", section 7): data parallelism all-reduces the gradients, which a ring does as a reduce-scatter
# (Ψ elements) plus an all-gather (Ψ): 2Ψ. In the paper ZeRO-1 and ZeRO-2 reduce-scatter the gradients (Ψ; each
# rank keeps the sum of its partition) and all-gather the updated parameters (Ψ): 2Ψ, the same as data
# parallelism; DeepSpeed 0.19.8 all-reduces them instead (`DEEPSPEED`, the module docstring): 3Ψ. ZeRO-3
# all-gathers the parameters in the forward pass (Ψ), again in the backward pass (Ψ), and reduce-scatters the
# gradients (Ψ): 3Ψ, 1.5x. A ring moves (N-1)/N of each Ψ through every rank's link.
# ------------------------------------------------------------------------------------------------------------

# The paper's collectives per stage: (name, Ψ per optimizer step, done every micro-batch rather than once a step).
PAPER = {
    0: [("all-reduce gradients", 2, False)],
    1: [("reduce-scatter gradients", 1, False), ("all-gather parameters", 1, False)],
    2: [("reduce-scatter gradients", 1, True), ("all-gather parameters", 1, False)],
    3: [
        ("all-gather parameters (forward)", 1, True),
        ("all-gather parameters (backward)", 1, True),
        ("reduce-scatter gradients", 1, True),
    ],
}
# What DeepSpeed 0.19.8 does with its defaults (read in deepspeed/runtime/zero/stage_1_and_2.py and stage3.py, and
# logged by its comms logger in tests/test_lessons_multi_gpu.py): stage 1-2 all-reduce each gradient bucket and keep
# their partition of the sum (`use_multi_rank_bucket_allreduce: true`, its default), 2Ψ where the paper's
# reduce-scatter moves Ψ; stage 2 reduces in every micro-batch's backward pass, stage 1 (and 0) at the step's last.
DEEPSPEED = {
    0: [("all-reduce gradients", 2, False)],
    1: [("all-reduce gradients", 2, False), ("all-gather parameters", 1, False)],
    2: [("all-reduce gradients", 2, True), ("all-gather parameters", 1, False)],
    3: PAPER[3],
}


def comm_volume(
    num_params: int,
    world_size: int,
    bytes_per_element: int = 2,
    gradient_accumulation_steps: int = 1,
    collectives: dict = PAPER,
) -> pd.DataFrame:
    """Data each rank's collectives move per optimizer step, per ZeRO stage, for a model of `num_params`
    parameters (Ψ) on `world_size` ranks (N), elements of `bytes_per_element` bytes (2 for bf16/fp16, 4 for fp32).
    `collectives`: `PAPER` (Rajbhandari et al. 2020, section 7) or `DEEPSPEED` (0.19.8's defaults). In the
    paper ZeRO-1 and ZeRO-2 reduce-scatter the gradients (Ψ), they do not all-reduce them (2Ψ); DeepSpeed 0.19.8
    all-reduces each bucket by default (`use_multi_rank_bucket_allreduce`), which its comms logger shows.

    Returns one row per stage 0-3: "collectives" (their names), "volume (Ψ)" (Ψ-sized transfers per optimizer
    step: the paper's 2, 2, 2, 3 with one micro-batch per step; gradient_accumulation_steps multiplies those
    done every micro-batch), "MiB per step" (volume x Ψ x bytes), "ring factor (N-1)/N", and "MiB each rank
    sends per step" (what a ring all-reduce / reduce-scatter / all-gather sends over each rank's link: the
    volume x (N-1)/N).
    """
    ring = (world_size - 1) / world_size
    rows = []
    for stage, ops in collectives.items():
        volume = sum(psi * (gradient_accumulation_steps if every_micro else 1) for _, psi, every_micro in ops)
        mib = volume * num_params * bytes_per_element / MiB
        rows.append(
            {
                "zero_stage": stage,
                "collectives": " + ".join(name for name, _, _ in ops),
                "volume (Ψ)": volume,
                "MiB per step": mib,
                "ring factor (N-1)/N": ring,
                "MiB each rank sends per step": mib * ring,
            }
        )
    return pd.DataFrame(rows)


# DeepSpeed's comms logger records each op's size as the tensor handed to it (comm/utils.get_msg_size_from_args):
# Ψ-sized transfers per byte handed, N the ranks. An all-reduce of S bytes moves 2S (reduce-scatter + all-gather),
# a reduce-scatter of an S-byte input S, an all-gather of an s-byte shard N x s, a reduce or broadcast S.
VOLUME_PER_BYTE = {
    "all_reduce": lambda n: 2,
    "all_reduce_coalesced": lambda n: 2,
    "inference_all_reduce": lambda n: 2,
    "reduce_scatter_tensor": lambda n: 1,
    "reduce_scatter": lambda n: 1,
    "all_gather_into_tensor": lambda n: n,
    "all_gather": lambda n: n,
    "reduce": lambda n: 1,
    "broadcast": lambda n: 1,
    "barrier": lambda n: 0,
}


def read_comms(run_dir: str | Path) -> dict | None:
    """A run's comms.json (`workshop_lib.comms.write`), or None where the run has none (comms logger off)."""
    path = Path(run_dir) / COMMS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def comm_measured(comms: dict, num_params: int, bytes_per_element: int) -> pd.DataFrame:
    """What DeepSpeed's comms logger recorded on rank 0 (`comms`: a comms.json), per collective, per optimizer
    step: calls, MiB handed to the op, the data volume that moves (MiB, `VOLUME_PER_BYTE`), that volume in
    Ψ-sized transfers (`num_params` x `bytes_per_element` bytes), and latency (ms, as timed by the logger).
    A last row "total" sums them."""
    n, steps, rows = comms["world_size"], comms["optimizer_steps"], []
    psi = num_params * bytes_per_element / MiB
    for op, v in comms["ops"].items():
        volume = v["message_mib"] * VOLUME_PER_BYTE.get(op, lambda n: 1)(n) / steps
        rows.append(
            {
                "collective": op,
                "calls per step": v["count"] / steps,
                "MiB handed per step": v["message_mib"] / steps,
                "volume MiB per step": volume,
                "volume (Ψ)": volume / psi,
                "latency ms per step": v["latency_ms"] / steps,
            }
        )
    t = pd.DataFrame(rows)
    total = {"collective": "total"} | t.drop(columns="collective").sum().to_dict()
    return pd.concat([t, pd.DataFrame([total])], ignore_index=True)


@dataclass(frozen=True)
class CommCheck:
    """One run's communication per optimizer step, measured by DeepSpeed's comms logger, against the formula:
    `paper` (Rajbhandari et al. 2020) and `deepspeed` (DeepSpeed 0.19.8's defaults), MiB per step, band
    `COMM_TOLERANCE`. `gradients` and `parameters`: the measured volume (Ψ) of the collectives that carry
    gradients (all_reduce, reduce_scatter*, reduce) and parameters (all_gather*, broadcast)."""

    run: str
    zero_stage: int
    world_size: int
    num_params: int
    bytes_per_element: int
    gradient_accumulation_steps: int
    paper: Comparison
    deepspeed: Comparison
    gradients: float
    parameters: float


def comm_check(comms: dict, run: dict) -> CommCheck:
    """`CommCheck` of a run (`run`: its results.json as a dict, `comms`: its comms.json)."""
    b = BYTES_PER_ELEMENT[run["precision"]]
    stage, n, ga = int(run["zero_stage"]), int(run["world_size"]), int(run["gradient_accumulation_steps"])
    m = comm_measured(comms, run["num_params"], b).set_index("collective")
    total = m.at["total", "volume MiB per step"]
    want = {
        k: comm_volume(run["num_params"], n, b, ga, c).set_index("zero_stage").at[stage, "MiB per step"]
        for k, c in (("paper", PAPER), ("deepspeed", DEEPSPEED))
    }
    kind = lambda ops: float(m.loc[[o for o in m.index if o.startswith(ops)], "volume (Ψ)"].sum())  # noqa: E731
    return CommCheck(
        run.get("output_dir") or "",
        stage,
        n,
        int(run["num_params"]),
        b,
        ga,
        compare("communication per step", total, want["paper"], unit="MiB", noise=COMM_TOLERANCE),
        compare("communication per step", total, want["deepspeed"], unit="MiB", noise=COMM_TOLERANCE),
        kind(("all_reduce", "reduce")),
        kind(("all_gather", "broadcast")),
    )


@dataclass(frozen=True)
class Buckets:
    """ZeRO-1/2's gradient buckets for `num_params` gradients of `bytes_per_element` bytes with
    `reduce_bucket_size` elements per bucket: DeepSpeed collects the gradients as the backward pass produces
    them and reduces a bucket when it is full (asynchronously, beside the backward pass, with overlap_comm);
    the last one, partly full, when the backward pass ends, with nothing left to overlap. Assumes the
    gradients arrive evenly through the backward pass."""

    num_params: int
    reduce_bucket_size: int
    bytes_per_element: int

    @property
    def count(self) -> int:
        """Buckets per backward pass: ceil(Ψ / bucket)."""
        return math.ceil(self.num_params / self.reduce_bucket_size)

    @property
    def bucket_mib(self) -> float:
        """MiB of a full bucket."""
        return min(self.reduce_bucket_size, self.num_params) * self.bytes_per_element / MiB

    @property
    def last_mib(self) -> float:
        """MiB of the last bucket, reduced after the backward pass."""
        return (self.num_params - (self.count - 1) * self.reduce_bucket_size) * self.bytes_per_element / MiB

    @property
    def reduced_during_backward(self) -> float:
        """Fraction of the gradients whose bucket is sent while the backward pass still runs:
        (count - 1) x bucket / Ψ."""
        return (self.count - 1) * self.reduce_bucket_size / self.num_params

    @property
    def first_sent_at(self) -> float:
        """Fraction of the backward pass done when the first bucket is full and sent (1.0: at its end)."""
        return min(self.reduce_bucket_size, self.num_params) / self.num_params


def buckets(ds_config: dict, num_params: int) -> Buckets:
    """`Buckets` of a ds_config (its zero_optimization.reduce_bucket_size, DeepSpeed's default 500M where absent)
    for a model of `num_params`, elements of its precision (bf16/fp16: 2 bytes, else 4)."""
    size = ds_config.get("zero_optimization", {}).get("reduce_bucket_size", 500_000_000)
    half = ds_config.get("bf16", {}).get("enabled") is True or ds_config.get("fp16", {}).get("enabled") is True
    return Buckets(num_params, int(size), 2 if half else 4)


@dataclass
class Stragglers:
    """Each rank's forward pass per optimizer step of a run on several ranks, from its micro_batches*.csv
    (`workshop_lib.callbacks.MicroBatches`): `steps` has one row per step and columns forward_ms_<rank> (ms,
    summed over the step's micro-batches), length_<rank> (padded length of its last micro-batch) and waited_ms
    (the slowest rank's forward less the fastest's: what the faster rank has to wait for later, at the first
    collective both need, ZeRO-2's gradient all-reduce in the backward pass; ZeRO-2's forward has none). Under
    ZeRO-3 the forward's own all-gathers make part of the wait inside it. `steady_from`: the first steady step
    (results.json's warm-up)."""

    steps: pd.DataFrame
    steady_from: int

    @property
    def steady(self) -> pd.DataFrame:
        return self.steps.loc[self.steady_from :]

    @property
    def mean_waited_ms(self) -> float:
        """Mean waited_ms over the steady steps."""
        return float(self.steady["waited_ms"].mean())

    @property
    def length_gap(self) -> float:
        """Mean over the steady steps of the longest rank's padded length less the shortest's (tokens)."""
        lengths = self.steady.filter(like="length_")
        return float((lengths.max(axis=1) - lengths.min(axis=1)).mean())


def stragglers(run_dir: str | Path) -> Stragglers:
    """`Stragglers` of the run in `run_dir`. Raises FileNotFoundError where the run wrote no micro_batches.csv
    (runs made before 2026-11-26)."""
    run_dir = Path(run_dir)
    files = [run_dir / "micro_batches.csv"] + sorted(
        run_dir.glob("micro_batches.rank*.csv"), key=lambda p: int(p.stem.split("rank")[1])
    )
    per_rank = []
    for rank, f in enumerate(files):
        g = pd.read_csv(f).groupby("step")
        per_rank.append(
            pd.DataFrame({f"forward_ms_{rank}": g["forward_ms"].sum(), f"length_{rank}": g["length"].last()})
        )
    steps = pd.concat(per_rank, axis=1)
    fwd = steps.filter(like="forward_ms_")
    steps["waited_ms"] = (fwd.max(axis=1) - fwd.min(axis=1)).round(2)
    warm = json.loads((run_dir / "results.json").read_text())["warmup_steps"]
    return Stragglers(steps, int(warm) + 1)


def zero2_collectives_ms(comm: pd.DataFrame) -> dict[str, float]:
    """ZeRO-1/2's collectives per optimizer step as DeepSpeed 0.19.8 issues them (module docstring), ms, from a
    scripts/comm_benchmark.py CSV (`comm`): "all_reduce", every gradient's all-reduce, the CSV's largest timed
    all-reduce scaled to the parameters' bytes at its bandwidth (a CSV made before the benchmark timed the
    all-reduce at the bucket's size has only its sweep's); "all_gather", the parameters' all-gather; "serial", their
    sum: the time they add to a step where nothing overlaps them."""
    ar = comm.query("op == 'all_reduce'").sort_values("mib").iloc[-1]
    params = comm.query("op == 'all_gather' and what == 'parameters'").iloc[0]
    out = {"all_reduce": ar["ms"] * params["mib"] / ar["mib"], "all_gather": params["ms"]}
    return out | {"serial": out["all_reduce"] + out["all_gather"]}


def nccl_lines(*logs: Path) -> tuple[list[str], Path | None]:
    """Three raw `NCCL_DEBUG=INFO` lines that say how NCCL joined the ranks, from the first of `logs` that holds
    them (a run's launch.log, or a reference's nccl-<link>.txt, whose `uniq -c` counts are dropped): the network
    it chose ("Using network"), the interface or device it uses ("NET/...: Using [..."), and a channel's transport
    (" via ..."); and that file. ([], None) where no log holds all three."""
    for log in (p for p in logs if p.is_file()):
        info = [re.sub(r"^\s*\d+ ", "", ln) for ln in log.read_text(errors="replace").splitlines() if "NCCL INFO" in ln]
        picked = [next((ln for ln in info if key in ln), None) for key in ("Using network", "Using [", " via ")]
        if None not in picked:
            return picked, log
    return [], None


def links(folder: str | Path) -> pd.DataFrame:
    """Each link of a two-nodes-on-one-host folder (scripts/two_nodes_one_host.sh: comm-<link>.csv,
    nccl-<link>.txt, <experiment>-<link>/results.json anywhere below): the transport NCCL chose (its first
    "via ..." line), ZeRO-2's collectives per step as DeepSpeed issues them (`zero2_collectives_ms`: the gradients'
    all-reduce, the parameters' all-gather, their serial sum, ms) with the all-gather's bus GB/s, and each run's
    steady step time (s). One row per link."""
    folder, rows = Path(folder), []
    for comm in sorted(folder.glob("comm-*.csv")):
        link = comm.stem.split("-", 1)[1]
        c = pd.read_csv(comm)
        nccl = folder / f"nccl-{link}.txt"
        lines = nccl.read_text().splitlines() if nccl.is_file() else []
        row = {"link": link, "NCCL transport": next((ln.split(" via ")[1] for ln in lines if " via " in ln), "?")}
        row |= {f"{k} ms": v for k, v in zero2_collectives_ms(c).items()}
        row["all_gather bus GB/s"] = c.query("what == 'parameters'")["busbw_gbps"].iloc[0]
        for res in sorted(folder.rglob(f"*-{link}/results.json")):
            r = json.loads(res.read_text())
            row[f"{r['experiment']} s/step"] = r["steady_step_time_s"]
        rows.append(row)
    return pd.DataFrame(rows)
