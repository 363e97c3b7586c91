"""Notebook 01's figures and verdicts, computed from its three runs (results.json dicts): `baseline` (the
default recipe), `baseline_classic` (the original workshop's recipe) and `baseline_accum4` (a quarter of the
tokens per micro-batch, 4 micro-batches per optimizer step). The solution notebook writes the answers from them.
`recipe_here`: the default recipe beside what the notebook's runs use on this machine."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from workshop_lib import env
from workshop_lib.config import RECIPE_FIELDS, TINY, RunConfig, resolve
from workshop_lib.ds_config import EXPERIMENTS
from workshop_lib.gpus import CATALOGUE
from workshop_lib.model import count_params
from workshop_lib.preflight import check_machine
from workshop_lib.units import MiB

from .comparisons import Comparison, compare
from .references import band, cpu_band

# Settings as a run ran them (results.json's own key, else its config's), beside the data and batching that
# exercises 2-3 count: what else differs between the recipes' runs without DeepSpeed
RAN = ("model", "precision", "attn_implementation", "torch_compile")
FREED_GRADIENTS_BELOW = 14  # bytes/param: under it, the states are fp32 weights + Adam's moments (12), no gradients


def recipe_here(cfg: RunConfig) -> pd.DataFrame:
    """What run `cfg` (a notebook's `lessons.run_config`, not resolved; an experiment without DeepSpeed, whose
    machine check starts nothing) changes from its recipe on this machine, by the code the run itself takes:
    `config.resolve` (the notebook's options, --tiny's overlay `TINY`) and `preflight.check_machine` (precision,
    attention and compilation here). One row per recipe setting, or tiny / random_weights / max_steps, that
    differs: its name, the recipe's value (a `RunConfig` of the recipe alone, resolved), the run's, and which of
    the three changed it."""
    recipe = asdict(resolve(RunConfig(cfg.experiment, recipe=cfg.recipe, output_dir=cfg.output_dir)))
    given = resolve(cfg)
    notebook, here = asdict(given), asdict(check_machine(given, EXPERIMENTS[cfg.experiment]))

    def text(v) -> str:
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    rows = [
        {
            "setting": k,
            f"recipe {cfg.recipe}": text(recipe[k]),
            "this notebook's runs here": text(here[k]),
            "changed by": f"this machine, {env.device_name()}"
            if here[k] != notebook[k]
            else "--tiny (config.TINY)"
            if cfg.tiny and k in TINY
            else "this notebook (lessons.notebook_run_options)",
        }
        for k in [*RECIPE_FIELDS, "tiny", "random_weights", "max_steps"]
        if here[k] != recipe[k]
    ]
    return pd.DataFrame(rows)


def speed(r: dict) -> tuple[float, str]:
    """(tokens/s, which): the steady-state figure (`metrics.steady_state`) where the run has one, else the
    whole run's."""
    steady = r.get("steady_train_tokens_per_second")
    if steady is not None and steady == steady and steady > 0:  # neither missing nor NaN
        return steady, "steady-state"
    return r["train_tokens_per_second"], "whole-run"


def peak(r: dict) -> tuple[float, str]:
    """(MiB, what): torch's peak allocated over the training steps on a GPU, else the host's peak RSS."""
    if r.get("gpu_peak_allocated_mib") is not None and r["gpu_peak_allocated_mib"] == r["gpu_peak_allocated_mib"]:
        return r["gpu_peak_allocated_mib"], "torch peak allocated GPU memory"
    return r["host_peak_rss_mib"], "host peak RSS (no GPU)"


def peak_metric(r: dict) -> str:
    """results.json's key of `peak(r)`."""
    return "gpu_peak_allocated_mib" if peak(r)[1].startswith("torch") else "host_peak_rss_mib"


def speed_band(r: dict) -> float | None:
    """The band of steady tokens/s for a run like `r`: the GPU reference's (`lessons.band`), or for a run without
    a GPU the spread measured on a CPU (`lessons.cpu_band`), which is far wider."""
    gpu = r.get("gpu_peak_mib")
    if gpu is not None and gpu == gpu:  # neither missing nor NaN
        return band("steady_train_tokens_per_second")
    return cpu_band()


def compare_speed(r: dict, other: dict) -> Comparison:
    """`r`'s tokens/s (`speed`) against `other`'s, with the band of steady tokens/s on `r`'s machine (`speed_band`)."""
    return compare("steady_train_tokens_per_second", speed(r)[0], speed(other)[0], noise=speed_band(r))


def compare_peak(r: dict, other: dict) -> Comparison:
    """`r`'s peak (`peak`: GPU allocated, else host RSS) against `other`'s, MiB, with that metric's band."""
    return compare(peak_metric(r), peak(r)[0], peak(other)[0])


def states_bytes_per_param(r: dict) -> float | None:
    """Measured model states (GPU memory allocated after the first optimizer step) in bytes per parameter;
    None without a GPU."""
    if r.get("gpu_states_allocated_mib") is None or r["gpu_states_allocated_mib"] != r["gpu_states_allocated_mib"]:
        return None
    return r["gpu_states_allocated_mib"] * MiB / r["num_params"]


def gpu_total_mib(r: dict) -> float | None:
    """The run's GPU memory as nvidia-smi prints it, MiB: results.json's gpu_total_mib, or, for a run made before
    it was recorded, the memory of the first `gpus.CATALOGUE` row that matches its device name (None: no GPU, no
    row, or a row whose name covers several sizes)."""
    if number(r.get("gpu_total_mib")):
        return r["gpu_total_mib"]
    return next((g.memory_mib for g in CATALOGUE if g.match in (r.get("device") or "")), None)


def gpu_share(r: dict) -> float | None:
    """The run's NVML peak (gpu_peak_mib) as a share of the memory it could use: the GPU's (`gpu_total_mib`), times
    WORKSHOP_GPU_MEMORY_FRACTION where the run had one; None without a GPU."""
    total, nvml = gpu_total_mib(r), r.get("gpu_peak_mib")
    if not total or nvml is None or nvml != nvml:
        return None
    return nvml / (total * (number(r.get("gpu_memory_fraction")) or 1))


def number(v) -> float | None:
    """v, or None where it is missing or NaN (a DataFrame row without the figure): the lessons' one NaN check."""
    return None if v is None or v != v else v


@dataclass(frozen=True)
class NvmlSplit:
    """NVML's peak (MiB) = torch's peak allocated + the caching allocator's free blocks (reserved - allocated)
    + what lies outside PyTorch's allocator (CUDA context, cuBLAS/NCCL workspaces: NVML - reserved)."""

    nvml_mib: float
    allocated_mib: float
    cached_mib: float
    outside_mib: float


def nvml_split(r: dict) -> NvmlSplit | None:
    """The run's `NvmlSplit` at its training peaks; None without a GPU."""
    if (
        r.get("gpu_peak_mib") is None
        or r.get("gpu_peak_reserved_mib") is None
        or r["gpu_peak_mib"] != r["gpu_peak_mib"]
    ):
        return None
    return NvmlSplit(
        r["gpu_peak_mib"],
        r["gpu_peak_allocated_mib"],
        r["gpu_peak_reserved_mib"] - r["gpu_peak_allocated_mib"],
        r["gpu_peak_mib"] - r["gpu_peak_reserved_mib"],
    )


@dataclass(frozen=True)
class MicroBatch:
    """One run's optimizer step by micro-batch: `ms` = its steady step time / gradient_accumulation_steps, for
    `tokens` = tokens_per_step / gradient_accumulation_steps; `arithmetic_ms`, the time its model FLOPs take at the
    GPU's peak (`metrics.flops_per_token` x tokens / peak FLOP/s = the run's MFU x `ms`), None without a known peak
    (a CPU); `other_ms` the rest of `ms`."""

    count: int  # micro-batches per optimizer step
    tokens: float
    ms: float
    arithmetic_ms: float | None

    @property
    def other_ms(self) -> float | None:
        return None if self.arithmetic_ms is None else self.ms - self.arithmetic_ms


def ran(r: dict, setting: str):
    """`setting` as run `r` (results.json) ran it: its own key (precision, attention as built), else its config's."""
    return r[setting] if setting in r else r["config"][setting]


def micro_batch(r: dict) -> MicroBatch:
    """`r`'s (results.json) `MicroBatch`."""
    n, mfu = r["gradient_accumulation_steps"], number(r.get("mfu"))
    ms = r["steady_step_time_s"] * 1000 / n
    return MicroBatch(n, r["tokens_per_step"] / n, ms, None if mfu is None else mfu * ms)


@dataclass(frozen=True)
class Baseline:
    """Notebook 01's exercises 1-6. Memory in MiB, speeds in tokens/s (steady state where the run has one)."""

    loss_on: dict[str, str]  # recipe -> which tokens the loss is taken on ("answer", "all")
    models: dict[str, str]  # recipe -> model
    classic_mean_tokens: float  # real (non-padding) tokens per classic prompt, mean
    classic_max_length: int  # what every classic prompt is padded to
    padding_fraction: float  # of the tokens the classic recipe processes: 1 - mean / max_length
    padding_speedup_bound: float  # the most that removing the padding alone could speed it up: max_length / mean
    speed: Comparison  # default against classic, real tokens/s
    speed_kind: str  # "steady-state" or "whole-run"
    logits_on: dict[str, str]  # recipe -> where its LM head computes logits ("labelled", "all")
    labelled_fraction: float  # of the default run's training tokens, those with a target (data_stats)
    head_width: dict[str, int]  # recipe -> its run's vocabulary, the width of the LM head
    classic_micro_batch: MicroBatch
    differences: dict[str, tuple]  # `RAN` setting -> (default's, classic's), where the two runs differ
    tokens_per_micro_batch: tuple[int, int]  # (baseline, accum4): the token budgets
    accumulation_steps: int  # accum4's gradient_accumulation_steps
    accum_loss: Comparison  # accum4's train loss against the baseline's, nats
    accum_speed: Comparison  # accum4's tokens/s against the baseline's
    accum_peak: Comparison  # accum4's peak against the baseline's (GPU allocated, else host RSS), MiB
    micro_batches: tuple[MicroBatch, MicroBatch]  # (baseline, accum4)
    other_ms: (
        Comparison | None
    )  # accum4's ms per micro-batch besides its arithmetic against the baseline's (no peak: None)
    peak_what: str  # what `peak` measured here
    states_mib: float | None  # the baseline's model states measured after step 1 (None without a GPU)
    states_bytes_per_param: float | None
    gradients_freed: bool | None  # the measured states are below `FREED_GRADIENTS_BELOW` bytes/param
    estimated_states_mib: float  # the estimate (GPU part; the host part without a GPU)
    estimator: str
    peak_over_states: float | None  # the baseline's training peak / its model states
    nvml: NvmlSplit | None


def figures(base: dict, classic: dict, accum: dict) -> Baseline:
    """Notebook 01's figures from its three runs' results.json dicts."""
    stats, default = classic["data_stats"]["train"], base["data_stats"]["train"]
    mb = (micro_batch(base), micro_batch(accum))
    max_len = classic["config"]["max_length"]
    bpp = states_bytes_per_param(base)
    states = base.get("gpu_states_allocated_mib") if bpp is not None else None
    return Baseline(
        loss_on={"default": base["loss_on"], "classic": classic["loss_on"]},
        models={"default": base["model"], "classic": classic["model"]},
        classic_mean_tokens=stats["mean_tokens"],
        classic_max_length=max_len,
        padding_fraction=1 - stats["mean_tokens"] / max_len,
        padding_speedup_bound=max_len / stats["mean_tokens"],
        speed=compare_speed(base, classic),
        speed_kind=speed(base)[1],
        logits_on={"default": base["config"]["logits_on"], "classic": classic["config"]["logits_on"]},
        labelled_fraction=default["labelled_tokens"] / default["tokens"],
        head_width={
            k: count_params(r["config"]["model"], r["config"]["tiny"])["vocab_size"]
            for k, r in (("default", base), ("classic", classic))
        },
        classic_micro_batch=micro_batch(classic),
        differences={k: (a, b) for k in RAN if (a := ran(base, k)) != (b := ran(classic, k))},
        tokens_per_micro_batch=(
            base["config"]["max_tokens_per_micro_batch"],
            accum["config"]["max_tokens_per_micro_batch"],
        ),
        accumulation_steps=accum["gradient_accumulation_steps"],
        accum_loss=compare("train_loss", accum["train_loss"], base["train_loss"]),
        accum_speed=compare_speed(accum, base),
        accum_peak=compare_peak(accum, base),
        peak_what=peak(base)[1],
        micro_batches=mb,
        other_ms=None
        if mb[0].other_ms is None
        else compare("steady_step_time_s", mb[1].other_ms, mb[0].other_ms, unit="ms"),
        states_mib=states,
        states_bytes_per_param=bpp,
        gradients_freed=None if bpp is None else bpp < FREED_GRADIENTS_BELOW,
        estimated_states_mib=base["estimated_model_states_gpu_mib"] or base["estimated_model_states_cpu_mib"],
        estimator=base["estimator"],
        peak_over_states=peak(base)[0] / states if states else None,
        nvml=nvml_split(base),
    )
